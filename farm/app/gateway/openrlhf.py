"""OpenRLHF's remote reward (`--reward.remote_url http://GATEWAY/t/<token>/get_reward`): each call carries
one sample (or a few) from a vLLM engine actor, with no step in sight. Samples join the tenant's rolling
batch (`farm.app.gateway.rolling`) and the call answers once their results are in.

Answers `{"rewards": [...], "scores": [...], "extra_logs": {"farm_ok": [...], "farm_masked": [...]}}`.
OpenRLHF has no way to leave a sample out: a result that says nothing of the response (infra error,
cancelled, invalid input) scores 0 and counts in `farm_masked`, which OpenRLHF logs with the step. A call
that outlives `wait_s` gets 504, so OpenRLHF tries again, and the retry waits on the same requests. An
identical sample within the hour is answered from the first one's result, never from one the farm caused
(`rolling.runs_again`; the tenant's `replay_identical` turns it off).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from farm.app.gateway.config import OpenRLHF
from farm.app.gateway.rolling import sample_key
from farm.app.gateway.service import Caller, Gateway
from farm.app.gateway.web import ERRORS, caller, gateway
from farm.errors import InvalidInput
from farm.integrations.mapping import payload as pipeline_payload
from farm.integrations.mapping import verl_score
from farm.results import Result

router = APIRouter(tags=["openrlhf"], responses=ERRORS)
MAX_SAMPLES = 1024


class RewardCall(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenRLHF may send more keys in later versions: ignored

    query: list[StrictStr] = Field(max_length=MAX_SAMPLES, description="prompt + response, one per sample")
    prompts: list[StrictStr] = Field(max_length=MAX_SAMPLES)
    labels: list[Any] = Field(max_length=MAX_SAMPLES, description="the reference answers")


class RewardAnswer(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]


def sample_payload(config: OpenRLHF, query: str, prompt: str, label: Any) -> dict[str, Any]:
    response = query[len(prompt):] if config.response == "completion" and query.startswith(prompt) else query
    try:
        out = pipeline_payload(config.pipeline, response, label)
    except ValueError as exc:
        raise InvalidInput(f"openrlhf.pipeline {config.pipeline!r}: {exc}") from exc
    return {**out, **config.extra}


@router.post("/get_reward", response_model=RewardAnswer)
async def get_reward(body: RewardCall, c: Caller = Depends(caller), g: Gateway = Depends(gateway)):
    if not len(body.query) == len(body.prompts) == len(body.labels):
        raise InvalidInput(f"query, prompts and labels must have one entry per sample; got {len(body.query)}, "
                           f"{len(body.prompts)} and {len(body.labels)}")
    config = c.protocols.openrlhf
    payloads = [sample_payload(config, q, p, label) for q, p, label in zip(body.query, body.prompts, body.labels)]
    try:
        results: list[Result] = await asyncio.gather(*(
            g.one(c, "openrlhf", config.rolling, sample_key(config.task, config.pipeline, p), p, config.wait_s,
                  config.replay_identical)
            for p in payloads))
    except (TimeoutError, asyncio.TimeoutError):
        return JSONResponse({"error": {"type": "Timeout", "message": f"results not ready within {config.wait_s:g} s;"
                                       " calling again waits on the same requests"}}, 504)
    scores = [verl_score(r) for r in results]  # as verl's: no None, a maskable status scores 0 and says so
    rewards = [s["score"] for s in scores]
    return RewardAnswer(rewards=rewards, scores=rewards,
                        extra_logs={"farm_ok": [1.0 if r.ok else 0.0 for r in results],
                                    "farm_masked": [s["farm_masked"] for s in scores]})
