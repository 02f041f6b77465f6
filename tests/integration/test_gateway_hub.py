"""The result hub against a real Redis: the callers waiting on one batch share one reader of its results, which
reads after each ring of the bell, and only then (its first read too)."""

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


def counted_reads(monkeypatch) -> list[str]:
    """The cursors the hub reads its batches' results after, in order."""
    reads = []
    real = hub_module.reads.results_after

    def counted(*args, **options):
        reads.append(args[3])  # the cursor read after
        return real(*args, **options)
    monkeypatch.setattr(hub_module.reads, "results_after", counted)
    return reads


def test_a_result_is_read_once_when_others_still_wait_on_the_batch(redis_url, namespace, monkeypatch):
    reads = counted_reads(monkeypatch)

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
    # once per result, each after the bell rang: no read of the empty stream first, nor after r1 to find nothing more
    assert len(reads) == 2


def one_at_a_time(redis_url, namespace, steps):
    """Calls that each wait for one result, one after another, as a one-sample caller at concurrency 1 makes them:
    `steps` is a list of (request id, whether its result arrives only after its caller waits)."""
    async def main():
        admin = aioredis.Redis.from_url(redis_url, decode_responses=True)
        client = AsyncRewardClient(redis_url=redis_url, namespace=namespace, keep_alive=False)
        hub = ResultHub(client, ResultsBell(redis_url, Keys(namespace), lambda conn_id: admin.client_unblock(conn_id)))
        done, ids, got = Keys(namespace).batch("b", Part.done), [], []
        try:
            for request_id, later in steps:
                if not later:
                    ids.append(await admin.xadd(done, result(request_id)))
                waiting = asyncio.create_task(hub.wait("b", request_id, 10))
                if later:
                    await asyncio.sleep(0.2)
                    ids.append(await admin.xadd(done, result(request_id)))
                got.append((await waiting).request_id)
                await asyncio.sleep(0.2)  # its reader has ended: no one waits on the batch
            return got, ids
        finally:
            await hub.close()
            await hub.bell.close()
            await client.close()
            await admin.aclose()
    return asyncio.run(main())


def test_a_call_after_the_last_caller_left_reads_on_from_where_the_batch_was_read(redis_url, namespace, monkeypatch):
    reads = counted_reads(monkeypatch)

    got, ids = one_at_a_time(redis_url, namespace, [("r1", True), ("r2", True), ("r3", False)])

    assert got == ["r1", "r2", "r3"]
    # each call reads once the bell rang, on from the result read before (r3, there already, rings at once)
    assert reads == ["0-0", ids[0], ids[1]]


def test_a_call_again_for_a_result_already_read_is_answered_without_a_read(redis_url, namespace, monkeypatch):
    reads = counted_reads(monkeypatch)

    got, _ = one_at_a_time(redis_url, namespace, [("r1", True), ("r1", False)])

    assert got == ["r1", "r1"] and len(reads) == 1  # r1, once; the second call reads nothing


def test_a_batch_left_idle_past_the_linger_is_read_afresh(redis_url, namespace, monkeypatch):
    monkeypatch.setattr(hub_module, "LINGER_S", 0.0)
    reads = counted_reads(monkeypatch)

    got, _ = one_at_a_time(redis_url, namespace, [("r1", True), ("r2", False)])

    assert got == ["r1", "r2"] and reads == ["0-0", "0-0"]  # r2's call reads from the stream's start again
