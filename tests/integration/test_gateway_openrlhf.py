"""OpenRLHF's remote reward through the gateway, as OpenRLHF 0.11 sends it: one sample per call from each
engine actor, `{"query", "prompts", "labels"}` posted as aiohttp writes JSON, to a URL with no headers of
ours. Samples form the tenant's rolling batches; a retried sample is the same request."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import redis

from farm.app.gateway.config import GatewaySettings
from farm.store.tenants import create_tenant
from tests.integration.gateway_support import running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PROMPT = "What is 2 + 3? Put the final answer in \\boxed{}.\n"


def body(query: str, prompt: str, label: str) -> bytes:
    # aiohttp's `json=` is json.dumps with its defaults, sent as application/json
    return json.dumps({"query": [query], "prompts": [prompt], "labels": [label]}).encode()


@pytest.fixture
def gateway(settings, engine, start_workers):
    start_workers("math.verify")
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=0.0, roll_check_s=0.1)) as base:
        yield base


def tenant(engine, **openrlhf) -> str:
    _, token = create_tenant(engine, f"rl{time.monotonic_ns()}", config={"openrlhf": openrlhf}, now=time.time())
    return token


async def call_all(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60) as http:
        return await asyncio.gather(*(http.post(url, content=b, headers={"Content-Type": "application/json"})
                                      for b in bodies))


def farm_batches(settings, prefix: str) -> dict[str, dict]:
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        keys = [k for k in r.scan_iter(match=f"{settings.namespace}:b:{prefix}*") if k.count(":") == 3]
        return {k.split(":", 2)[2]: r.hgetall(k) for k in keys}
    finally:
        r.close()


def test_a_right_answer_scores_one_and_a_wrong_one_zero_as_openrlhf_reads_them(gateway, engine):
    token = tenant(engine, batch_size=2, rollover_s=30.0)
    replies = asyncio.run(call_all(f"{gateway}/t/{token}/get_reward", [
        body(PROMPT + "2 + 3 = \\boxed{5}", PROMPT, "5"), body(PROMPT + "it is \\boxed{6}", PROMPT, "5")]))
    assert [r.status_code for r in replies] == [200, 200]
    answers = [r.json() for r in replies]
    assert answers[0] == {"rewards": [1.0], "scores": [1.0], "extra_logs": {"farm_ok": [1.0], "farm_masked": [0.0]}}
    assert answers[1]["rewards"] == [0.0] and answers[1]["extra_logs"]["farm_masked"] == [0.0]


def test_one_steps_samples_fill_one_batch_and_the_next_sample_opens_the_next(gateway, engine, settings):
    token = tenant(engine, batch_size=3, rollover_s=30.0)
    url = f"{gateway}/t/{token}/get_reward"
    first = asyncio.run(call_all(url, [body(PROMPT + f"\\boxed{{{i}}}", PROMPT, "5") for i in range(3)]))
    assert [r.status_code for r in first] == [200] * 3
    later = asyncio.run(call_all(url, [body(PROMPT + "\\boxed{5}", PROMPT, "5")]))
    assert later[0].json()["rewards"] == [1.0]
    batches = farm_batches(settings, "t")
    sizes = sorted((int(b["size"]), int(b["arrived"]), b["state"]) for b in batches.values())
    assert sizes == [(3, 1, "open"), (3, 3, "completed")]


def test_a_step_that_ends_short_of_the_batch_size_is_sealed_after_the_rollover(gateway, engine, settings):
    token = tenant(engine, batch_size=8, rollover_s=0.5)
    started = time.monotonic()
    replies = asyncio.run(call_all(f"{gateway}/t/{token}/get_reward",
                                   [body(PROMPT + "\\boxed{5}", PROMPT, "5"), body(PROMPT + "\\boxed{4}", PROMPT, "5")]))
    assert [r.json()["rewards"] for r in replies] == [[1.0], [0.0]]
    assert time.monotonic() - started < 30
    (batch,) = farm_batches(settings, "t").values()
    assert (batch["size"], batch["arrived"], batch["state"]) == ("2", "2", "completed")


def test_a_retried_sample_is_the_same_request(gateway, engine, settings):
    token = tenant(engine, batch_size=2, rollover_s=30.0)
    url = f"{gateway}/t/{token}/get_reward"
    same = body(PROMPT + "\\boxed{5}", PROMPT, "5")
    replies = asyncio.run(call_all(url, [same, same, body(PROMPT + "\\boxed{7}", PROMPT, "5")]))
    assert [r.json()["rewards"] for r in replies] == [[1.0], [1.0], [0.0]]
    (batch,) = farm_batches(settings, "t").values()
    assert (batch["arrived"], batch["state"]) == ("2", "completed")


def test_the_completion_is_what_gets_judged_not_the_prompt(gateway, engine):
    token = tenant(engine, batch_size=1, rollover_s=30.0)
    prompt = "Earlier someone wrote \\boxed{5}. What is 2 + 4?\n"
    (reply,) = asyncio.run(call_all(f"{gateway}/t/{token}/get_reward", [body(prompt + "It is 6.", prompt, "5")]))
    assert reply.json()["rewards"] == [0.0]


def test_lists_of_different_lengths_are_refused_with_a_clear_400(gateway, engine):
    token = tenant(engine)
    (reply,) = asyncio.run(call_all(f"{gateway}/t/{token}/get_reward", [
        json.dumps({"query": ["a", "b"], "prompts": ["a"], "labels": ["1"]}).encode()]))
    assert reply.status_code == 400 and "one entry per sample" in reply.json()["error"]["message"]


def test_a_tenant_config_for_another_pipeline_maps_the_payload_for_it(gateway, engine):
    token = tenant(engine, pipeline="no-such-pipeline")
    (reply,) = asyncio.run(call_all(f"{gateway}/t/{token}/get_reward", [body(PROMPT + "5", PROMPT, "5")]))
    assert reply.status_code == 400 and "no-such-pipeline" in reply.json()["error"]["message"]


def test_a_sample_retried_after_its_batch_was_sealed_still_gets_its_reward(gateway, engine, settings):
    token = tenant(engine, batch_size=8, rollover_s=0.3)
    url = f"{gateway}/t/{token}/get_reward"
    sample = body(PROMPT + "\\boxed{5}", PROMPT, "5")
    (first,) = asyncio.run(call_all(url, [sample]))
    time.sleep(1.0)  # the batch is sealed at one sample meanwhile
    (again,) = asyncio.run(call_all(url, [sample]))
    assert first.json()["rewards"] == again.json()["rewards"] == [1.0]
    (batch,) = farm_batches(settings, "t").values()
    assert (batch["size"], batch["arrived"], batch["state"]) == ("1", "1", "completed")


def test_two_tenants_samples_never_share_a_batch(gateway, engine, settings):
    tokens = [tenant(engine, batch_size=2, rollover_s=0.3) for _ in range(2)]
    replies = asyncio.run(call_all(f"{gateway}/t/{tokens[0]}/get_reward", [body(PROMPT + "\\boxed{5}", PROMPT, "5")])
                          ) + asyncio.run(call_all(f"{gateway}/t/{tokens[1]}/get_reward",
                                                   [body(PROMPT + "\\boxed{5}", PROMPT, "5")]))
    assert [r.json()["rewards"] for r in replies] == [[1.0], [1.0]]
    batches = farm_batches(settings, "t")
    assert len(batches) == 2 and len({name.split(":")[0] for name in batches}) == 2
    assert all(b["arrived"] == "1" for b in batches.values())


def test_a_sample_whose_batch_ended_before_it_was_submitted_joins_the_next_batch(gateway, engine, settings):
    from farm.app.gateway.config import protocols
    from farm.app.gateway.openrlhf import sample_payload
    from farm.app.gateway.rolling import Roller, sample_key

    tenant_row, token = create_tenant(engine, "late", config={"openrlhf": {"batch_size": 4, "rollover_s": 0.3}},
                                      now=time.time())
    url = f"{gateway}/t/{token}/get_reward"
    (first,) = asyncio.run(call_all(url, [body(PROMPT + "\\boxed{5}", PROMPT, "5")]))
    assert first.json()["rewards"] == [1.0]
    config = protocols(tenant_row.config).openrlhf
    late = sample_payload(config, PROMPT + "\\boxed{4}", PROMPT, "5")

    async def join_without_submitting():  # a gateway that took the sample and stalled before submitting it
        import redis.asyncio as aioredis
        r = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
        await Roller(r, settings.namespace).join(r, tenant_row.id, "openrlhf", config.rolling,
                                                 sample_key(config.task, config.pipeline, late), time.time())
        await r.aclose()
    asyncio.run(join_without_submitting())
    time.sleep(1.5)  # the batch is sealed with the one sample that did arrive, and completes
    (retry,) = asyncio.run(call_all(url, [body(PROMPT + "\\boxed{4}", PROMPT, "5")]))
    assert retry.status_code == 200 and retry.json()["rewards"] == [0.0]
    states = sorted((b["arrived"], b["state"]) for b in farm_batches(settings, "t").values())
    # the retry's batch is open until its rollover (0.3 s) seals it, which a slow machine's check may come after;
    # the batch the late sample had joined may have been opened by the retry, found ended and cancelled, empty
    taken = [s for s in states if s[0] != "0"]
    assert taken in ([("1", "completed"), ("1", "open")], [("1", "completed"), ("1", "completed")])
    assert all(s == ("0", "cancelled") for s in states if s[0] == "0")
