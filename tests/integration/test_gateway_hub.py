"""The result hub against a real Redis: the callers waiting on one batch share one reader of its results, which
reads after each ring of the bell, and only then."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from farm.app.gateway import hub as hub_module
from farm.app.gateway.bell import ResultsBell
from farm.app.gateway.hub import ResultHub
from farm.client.aio import AsyncRewardClient
from farm.protocol.keys import Keys, Part
from farm.results import Result, Status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def result(request_id: str) -> dict[str, str]:
    return {"r": json.dumps(Result(request_id, "b", Status.OK, 1.0).to_dict())}


def test_a_result_is_read_once_when_others_still_wait_on_the_batch(redis_url, namespace, monkeypatch):
    reads = []
    real = hub_module.reads.results_after

    def counted(*args, **options):
        reads.append(args[3])  # the cursor read after
        return real(*args, **options)
    monkeypatch.setattr(hub_module.reads, "results_after", counted)

    async def main():
        admin = aioredis.Redis.from_url(redis_url, decode_responses=True)
        client = AsyncRewardClient(redis_url=redis_url, namespace=namespace, keep_alive=False)
        hub = ResultHub(client, ResultsBell(redis_url, Keys(namespace), lambda conn_id: admin.client_unblock(conn_id)))
        done = Keys(namespace).batch("b", Part.done)
        try:
            first = asyncio.create_task(hub.wait("b", "r1", 10))
            second = asyncio.create_task(hub.wait("b", "r2", 10))
            await asyncio.sleep(0.3)  # the reader read the empty stream and waits on the bell
            await admin.xadd(done, result("r1"))
            got_first = await first
            await asyncio.sleep(0.3)
            await admin.xadd(done, result("r2"))
            return got_first, await second
        finally:
            await hub.close()
            await hub.bell.close()
            await client.close()
            await admin.aclose()
    got_first, got_second = asyncio.run(main())
    assert (got_first.request_id, got_second.request_id) == ("r1", "r2")
    # the empty stream, then once per result: no read again after r1 only to find nothing more
    assert len(reads) == 3
