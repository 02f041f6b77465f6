"""Fully asynchronous (AReaL-style) scoring: one farm batch per policy version, closed by its staleness
deadline instead of a size, against a real `math.verify` worker."""

from __future__ import annotations

import asyncio

import pytest

from farm.client import RewardClient
from farm.integrations.streaming import StreamingRewards

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def math(answer: str, response: str) -> dict:
    return {"response": response, "answer": answer}


def test_trajectories_of_one_version_share_a_batch_that_closes_at_its_deadline(settings, start_workers):
    start_workers("math.verify")

    async def scenario():
        rewards = StreamingRewards("stream-math", "math", staleness_s=2.0, capacity=100, settings=settings)
        first = await asyncio.gather(*(rewards.score(0, f"t{i}", math("4", f"\\boxed{{{3 + i % 2}}}"))
                                       for i in range(4)))
        await asyncio.sleep(2.5)  # past version 0's deadline
        late = await rewards.score(0, "t-late", math("4", "\\boxed{4}"))
        await rewards.aclose()
        return rewards, first, late

    rewards, first, late = asyncio.run(scenario())
    assert [r.reward for r in first] == [0.0, 1.0, 0.0, 1.0] and {r.batch_id for r in first} == {rewards.batch_id(0)}
    assert late is None, "a trajectory past its version's staleness deadline is refused"
    with RewardClient(settings) as client:
        progress = client.batch(rewards.batch_id(0)).progress()
    assert (progress.state, progress.size, progress.arrived, progress.done) == ("completed", 4, 4, 4)


def test_a_closed_window_still_scores_the_trajectories_already_submitted(settings, start_workers):
    async def scenario():
        rewards = StreamingRewards("stream-math", "math", staleness_s=60, capacity=100, settings=settings)
        scoring = asyncio.ensure_future(rewards.score(3, "t0", math("1", "\\boxed{1}")))
        while 3 not in rewards.windows or not (await rewards.windows[3].waiter.batch.progress()).arrived:
            await asyncio.sleep(0.01)
        state = await rewards.close(3)  # no worker yet: t0 is still queued
        start_workers("math.verify")
        result = await scoring
        final = await rewards.windows[3].waiter.batch.progress()
        await rewards.aclose()
        return state, result, final

    state, result, final = asyncio.run(scenario())
    assert (state, result.status.value) == ("sealed", "ok")
    assert (final.state, final.size, final.done) == ("completed", 1, 1)


def test_a_new_policy_version_opens_its_own_batch(settings, start_workers):
    start_workers("math.verify")

    async def scenario():
        rewards = StreamingRewards("stream-math", "math", staleness_s=60, capacity=100, settings=settings)
        old = await rewards.score(0, "a", math("2", "\\boxed{2}"))
        new = await rewards.score(1, "a", math("2", "\\boxed{2}"))
        await rewards.aclose()
        return rewards, old, new

    rewards, old, new = asyncio.run(scenario())
    assert (old.batch_id, new.batch_id) == (rewards.batch_id(0), rewards.batch_id(1))


def test_a_window_that_fills_up_completes_like_any_batch(settings, start_workers):
    start_workers("math.verify")

    async def scenario():
        rewards = StreamingRewards("stream-math", "math", staleness_s=60, capacity=2, settings=settings)
        await asyncio.gather(*(rewards.score(0, f"t{i}", math("2", "\\boxed{2}")) for i in range(2)))
        state = await rewards.close(0)
        await rewards.aclose()
        return state

    assert asyncio.run(scenario()) == "completed"
