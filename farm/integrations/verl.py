"""Farm rewards for verl: an async `compute_score` for `reward.custom_reward_function`.

    reward.custom_reward_function.path=pkg://farm.integrations.verl
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.farm_task=gsm8k

verl's reward loop scores each trajectory as it finishes and `compute_score` does not see the step. With
`farm.integrations.verl_manager.FarmAgentLoopManager` as the agent loop manager, each step's rows name the
step's farm batch in their `extra_info` (opened when rollout starts, sized to the step) and every sample
joins it; without it, each sample is a farm batch of its own. The answer has the same keys for every sample
(verl stacks them): `score`, `farm_status`, `farm_masked` (verl has no None: a maskable status scores 0).

This module imports no verl: the reward loop loads it by path, and its step keying is plain data.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from farm.client import AsyncRewardClient
from farm.config import from_env
from farm.integrations.mapping import missing_score, payload, verl_score
from farm.integrations.waiting import Waiters

log = logging.getLogger(__name__)

# where a tagged row's request goes: written into extra_info by the agent loop manager
BATCH_KEY, REQUEST_KEY, GROUP_KEY = "farm_batch", "farm_request", "farm_group"

_clients: dict[tuple[str | None, str], AsyncRewardClient] = {}
_waiters = Waiters()


def step_batch_id(run: str, global_steps: int, validate: bool, ordinal: int = 0) -> str:
    """The farm batch of one `generate_sequences` call: a run's training step (or its validation), and the
    call's ordinal within it (DAPO-style dynamic sampling generates several times per step)."""
    kind = "val" if validate else "step"
    return f"{run}.{kind}{global_steps}" + (f".{ordinal}" if ordinal else "")


def tag_rows(extra_infos: Sequence[Mapping[str, Any] | None] | None, batch_id: str,
             uids: Sequence[Any] | None, size: int) -> list[dict[str, Any]]:
    """Each row's extra_info plus where its request goes: the step's batch, a request id unique in it, and its
    GRPO group (verl's `uid`). New dicts: repeated rows share one extra_info object."""
    infos = list(extra_infos) if extra_infos is not None else [None] * size
    return [{**(info or {}), BATCH_KEY: batch_id, REQUEST_KEY: f"r{i}",
             GROUP_KEY: None if uids is None else str(uids[i])} for i, info in enumerate(infos)]


def farm_client(redis_url: str | None = None, namespace: str | None = None) -> AsyncRewardClient:
    """One client per farm per process (FARM_* environment variables unless named)."""
    settings = from_env()
    key = (redis_url or settings.redis_url, namespace or settings.namespace)
    if key not in _clients:
        _clients[key] = AsyncRewardClient(settings.with_(redis_url=key[0], namespace=key[1]))
    return _clients[key]


async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping | None = None,
                        *, farm_task: str = "verl", farm_pipeline: str = "math", farm_timeout: float | None = None,
                        farm_redis_url: str | None = None, farm_namespace: str | None = None,
                        **kwargs: Any) -> dict[str, Any]:
    """One sample's reward from the farm. The `farm_*` arguments come from
    `reward.custom_reward_function.reward_kwargs`; a sample whose result is not back in `farm_timeout` seconds
    is masked (`farm_masked` = 1) and its request is left to finish."""
    client = farm_client(farm_redis_url, farm_namespace)
    request = payload(farm_pipeline, solution_str, ground_truth)
    info = extra_info or {}
    try:
        if info.get(BATCH_KEY):
            return verl_score(await _in_step(client, info, request, farm_timeout))
        return verl_score(await _alone(client, farm_task, farm_pipeline, request, farm_timeout))
    except TimeoutError:
        log.warning("a %s sample of %s had no reward after %s s; it is masked", farm_task, data_source, farm_timeout)
        return missing_score(f"no result within {farm_timeout} s")


async def _in_step(client: AsyncRewardClient, info: Mapping[str, Any], request: Any, timeout: float | None):
    batch_id, request_id = info[BATCH_KEY], info[REQUEST_KEY]
    waiter = await _waiters.waiter(batch_id, lambda: client.batch(batch_id))
    await waiter.batch.submit(request_id, request, info.get(GROUP_KEY))
    return await waiter.result(request_id, timeout)


async def _alone(client: AsyncRewardClient, task: str, pipeline: str, request: Any, timeout: float | None):
    async with client.open_batch(task, pipeline, 1) as batch:
        await batch.submit("r0", request)
        try:
            [result] = await batch.gather(timeout=timeout)
        except TimeoutError:
            await batch.cancel()
            raise
    return result
