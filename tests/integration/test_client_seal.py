"""Sealing a batch, against real Redis and workers: a window that closes by time, not by size, takes no more
requests, and its size becomes what arrived."""

from __future__ import annotations

import asyncio

import pytest

from farm.client.aio import AsyncRewardClient
from farm.errors import BatchClosed, BatchNotFound

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

QUEUED = {"times": [1, 0]}  # one synthetic compile second: waits for a worker
NOTHING = {"times": [0, 0]}  # visits no stage: finishes on arrival


def test_sealing_makes_what_arrived_the_size_and_the_batch_completes_when_those_finish(reward_client, start_workers):
    batch = reward_client.open_batch("t", "synthetic", 10)
    batch.submit_many([("r0", {"times": [0.2, 0]}), ("r1", {"times": [0.2, 0]})])
    assert batch.seal() == "sealed"
    progress = batch.progress()
    assert (progress.size, progress.arrived, progress.state) == (2, 2, "open")
    start_workers("synthetic.compile")
    assert sorted(r.request_id for r in batch.gather(timeout=30)) == ["r0", "r1"]
    assert batch.progress().state == "completed"


def test_a_sealed_batch_refuses_a_new_request_saying_so(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 10)
    batch.submit("r0", QUEUED)
    batch.seal()
    with pytest.raises(BatchClosed, match="sealed"):
        batch.submit("r1", QUEUED)


def test_a_sealed_batch_takes_a_retried_request_as_the_duplicate_it_is(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 10)
    batch.submit("r0", QUEUED)
    batch.seal()
    assert batch.submit("r0", QUEUED) == "duplicate"


def test_sealing_a_batch_whose_requests_are_all_done_completes_it_at_once(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 10)
    batch.submit_many([("r0", NOTHING), ("r1", NOTHING)])
    assert batch.seal() == "completed"
    assert [r.request_id for r in batch.gather(timeout=5)] == ["r0", "r1"]


def test_sealing_an_empty_batch_cancels_it(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 10)
    assert batch.seal() == "cancelled"
    assert batch.progress().state == "cancelled"


def test_sealing_a_finished_batch_changes_nothing(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", NOTHING)
    assert batch.seal() == "completed"
    assert (batch.progress().size, batch.progress().state) == (1, "completed")


def test_sealing_a_batch_the_farm_never_had_says_so(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1)
    reward_client.dispatch.redis.delete(f"{reward_client.settings.namespace}:b:{batch.id}")
    with pytest.raises(BatchNotFound):
        batch.seal()


def test_the_async_client_seals_too(settings):
    async def scenario():
        async with AsyncRewardClient(settings) as client:
            batch = await client.open_batch("t", "synthetic", 10)
            await batch.submit("r0", NOTHING)
            return await batch.seal(), await batch.gather(timeout=5)

    state, results = asyncio.run(scenario())
    assert state == "completed" and [r.request_id for r in results] == ["r0"]
