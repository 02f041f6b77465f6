"""The asyncio client end to end, with a real worker."""

from __future__ import annotations

import asyncio

import pytest

from farm.client.aio import AsyncRewardClient
from farm.errors import BatchClosed, BatchFull, DuplicateRequest, InvalidInput

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_the_async_client_submits_streams_groups_and_cancels(settings, start_workers):
    start_workers("synthetic.compile")

    async def scenario():
        async with AsyncRewardClient(settings) as farm:
            batch = await farm.open_batch("t", "synthetic", 3, group_size=2)
            # r0 runs a second: the batch is still running when r3 finds it full (done, it would say completed)
            assert await batch.submit("r0", {"times": [1.0, 0]}, group="a") == "queued"
            assert await batch.submit("r0", {"times": [1.0, 0]}, group="a") == "duplicate"
            with pytest.raises(DuplicateRequest):
                await batch.submit("r0", {"times": [0.02, 0]})
            await batch.submit("r1", {"times": [0, 0]}, group="a")
            await batch.submit("r2", {"times": [-1, 0]})
            with pytest.raises(BatchFull):
                await batch.submit("r3", {"times": [0, 0]})
            with pytest.raises(InvalidInput, match="JSON"):
                await (await farm.open_batch("t", "synthetic", 1)).submit("x", {"times": [object()]})
            groups = [(g, sorted(r.request_id for r in rs)) async for g, rs in batch.completed_groups(timeout=10)]
            assert groups == [("a", ["r0", "r1"])]
            results = {r.request_id: r.status.value for r in await batch.gather(timeout=10)}
            assert results == {"r0": "ok", "r1": "wrong", "r2": "invalid_input"}
            assert (await batch.progress()).state == "completed"

            attached = await farm.batch(batch.id)
            assert attached.size == 3
            doomed = await farm.open_batch("t", "synthetic", 2)
            await doomed.submit("slow", {"times": [30, 0]})
            assert await doomed.cancel() == "cancelled"
            assert [r.status.value async for r in doomed.as_completed(timeout=5)] == ["cancelled"]
            with pytest.raises(BatchClosed):
                await doomed.submit("late", {"times": [0, 0]})
            with pytest.raises(TimeoutError, match="1 of 1 results still missing"):
                await (await farm.open_batch("t", "synthetic", 1)).gather(timeout=0.2)

    asyncio.run(scenario())
