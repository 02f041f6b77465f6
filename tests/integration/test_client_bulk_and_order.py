"""Bulk submit, results in submission order, and batches that cancel when the trainer's block fails,
in both clients against real Redis and workers."""

from __future__ import annotations

import asyncio

import pytest

from farm.client.aio import AsyncRewardClient
from farm.client.sync import RewardClient
from farm.errors import BatchFull, FarmNotConfigured, InvalidInput, PayloadTooLarge

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

NOTHING = {"times": [0, 0]}  # visits no stage: finishes on arrival


def test_a_bulk_submit_queues_every_request_and_returns_their_kinds_in_order(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1200)
    requests = [(f"r{i}", {"times": [1, 0]} if i % 2 else NOTHING) for i in range(1100)]
    kinds = batch.submit_many(requests)
    assert kinds == ["finished" if i % 2 == 0 else "queued" for i in range(1100)]
    assert batch.submit_many([{"id": "r0", "payload": NOTHING}, ("r1100", NOTHING, "g")]) == ["duplicate", "finished"]
    assert batch.progress().arrived == 1101


def test_a_malformed_request_refuses_the_bulk_submit_before_anything_is_sent(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 3)
    with pytest.raises(InvalidInput, match=r"request #1 \('r1'\) of the bulk submit: payload is not JSON.*nothing"):
        batch.submit_many([("r0", NOTHING), ("r1", {"times": [object()]}), ("r2", NOTHING)])
    with pytest.raises(InvalidInput, match=r"request #0 of the bulk submit must be \(id, payload\)"):
        batch.submit_many(["r0"])
    assert batch.progress().arrived == 0


def test_an_oversized_payload_in_a_bulk_submit_is_named(settings):
    with RewardClient(settings.with_(max_payload_bytes=100)) as small:
        batch = small.open_batch("t", "synthetic", 2)
        with pytest.raises(PayloadTooLarge, match=r"request #1 \('big'\)"):
            batch.submit_many([("ok", NOTHING), ("big", {"times": [0, 0], "pad": "x" * 200})])


def test_a_bulk_submit_past_the_batch_size_queues_the_requests_that_fit_then_raises(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 2)
    queued = {"times": [30, 0]}
    with pytest.raises(BatchFull, match="'r2' is one too many"):
        batch.submit_many([("r0", queued), ("r1", queued), ("r2", queued)])
    assert batch.progress().arrived == 2


def test_gather_returns_results_in_submission_order_not_completion_order(reward_client, start_workers):
    start_workers("synthetic.compile", 2)
    batch = reward_client.open_batch("t", "synthetic", 3)
    batch.submit_many([("slow", {"times": [0.8, 0]}), ("quick", {"times": [0.05, 0]}), ("at-once", NOTHING)])
    assert [r.request_id for r in batch.gather(timeout=30)] == ["slow", "quick", "at-once"]
    assert set(batch.results_by_id(timeout=5)) == {"slow", "quick", "at-once"}


def test_a_batch_whose_block_raises_is_cancelled(reward_client):
    with pytest.raises(RuntimeError, match="trainer crashed"):
        with reward_client.open_batch("t", "synthetic", 2) as batch:
            batch.submit("r0", {"times": [30, 0]})
            raise RuntimeError("trainer crashed")
    assert batch.progress().state == "cancelled"
    assert [r.status.value for r in batch.gather(timeout=5)] == ["cancelled"]


def test_a_batch_whose_block_ends_normally_stays_open(reward_client):
    with reward_client.open_batch("t", "synthetic", 2) as batch:
        batch.submit("r0", {"times": [30, 0]})
    assert batch.progress().state == "open"


def test_a_client_takes_the_farm_by_url_and_namespace(settings):
    with RewardClient(redis_url=settings.redis_url, namespace=settings.namespace) as client:
        assert client.open_batch("t", "synthetic", 1).submit("r0", NOTHING) == "finished"


def test_a_client_with_no_farm_named_refuses_and_names_the_ways_to_name_one(monkeypatch, tmp_path):
    monkeypatch.delenv("FARM_REDIS_URL", raising=False)
    monkeypatch.setenv("FARM_DATA_DIR", str(tmp_path))
    for make in (RewardClient, AsyncRewardClient):
        with pytest.raises(FarmNotConfigured, match=r"redis_url=.*FARM_REDIS_URL.*farm up.*FARM_DATA_DIR"):
            make()


def test_256_concurrent_async_submits_share_a_bounded_pool(settings):
    async def scenario():
        async with AsyncRewardClient(settings) as farm:
            batch = await farm.open_batch("t", "synthetic", 256)
            kinds = await asyncio.gather(*(batch.submit(f"r{i}", NOTHING) for i in range(256)))
            assert kinds == ["finished"] * 256
            # concurrent submits have no order of their own: gather follows the order the farm took them in
            assert sorted(r.request_id for r in await batch.gather(timeout=10)) == sorted(f"r{i}" for i in range(256))

    asyncio.run(scenario())


def test_one_async_client_serves_one_event_loop_after_another(settings):
    farm = AsyncRewardClient(settings)

    async def step(i: int) -> list[str]:
        batch = await farm.open_batch("t", "synthetic", 2)
        await batch.submit_many([(f"a{i}", NOTHING), (f"b{i}", NOTHING)])
        return [r.request_id for r in await batch.gather(timeout=10)]

    assert [asyncio.run(step(i)) for i in range(3)] == [["a0", "b0"], ["a1", "b1"], ["a2", "b2"]]
    asyncio.run(farm.close())


def test_an_async_batch_whose_block_raises_is_cancelled(settings):
    async def scenario():
        async with AsyncRewardClient(settings) as farm:
            with pytest.raises(RuntimeError, match="trainer crashed"):
                async with farm.open_batch("t", "synthetic", 2) as batch:
                    await batch.submit("r0", {"times": [30, 0]})
                    raise RuntimeError("trainer crashed")
            assert (await batch.progress()).state == "cancelled"
            plain = await farm.open_batch("t", "synthetic", 1)  # awaited, not entered: no cancel on its own
            assert (await plain.progress()).state == "open"

    asyncio.run(scenario())
