"""The results bell against a real Redis: one reader wakes the waiters of a batch when its done stream grows,
and a waiter on a batch the reader does not follow yet is woken without waiting out the reader's block."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from farm.app.gateway import bell as bell_module
from farm.app.gateway.bell import ResultsBell, stream_id
from farm.errors import InvalidInput
from farm.protocol.keys import Keys, Part

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def run(redis_url: str, namespace: str, scenario):
    async def main():
        admin = aioredis.Redis.from_url(redis_url, decode_responses=True)
        bell = ResultsBell(redis_url, Keys(namespace), lambda conn_id: admin.client_unblock(conn_id))
        try:
            return await scenario(bell, admin, lambda batch: Keys(namespace).batch(batch, Part.done))
        finally:
            await bell.close()
            await admin.aclose()
    return asyncio.run(main())


def test_a_waiter_is_woken_by_an_entry_on_its_batch_and_not_by_another_batchs(redis_url, namespace):
    async def scenario(bell, admin, done):
        async with bell.waiting_on("a", "0-0") as on_a, bell.waiting_on("b", "0-0") as on_b:
            await asyncio.sleep(0.2)
            await admin.xadd(done("a"), {"r": "1"})
            return await on_a.wait(10), await on_b.wait(0.5)
    assert run(redis_url, namespace, scenario) == (True, False)


def test_a_waiter_whose_cursor_is_past_the_entries_is_not_woken_by_them(redis_url, namespace):
    async def scenario(bell, admin, done):
        first = await admin.xadd(done("a"), {"r": "1"})
        async with bell.waiting_on("a", first) as waiter:
            return await waiter.wait(0.5)
    assert run(redis_url, namespace, scenario) is False


def test_a_waiter_on_a_new_batch_is_woken_while_the_reader_blocks_on_others(redis_url, namespace, monkeypatch):
    monkeypatch.setattr(bell_module, "BLOCK_MS", 30_000)  # without the unblock, the new batch waits this long

    async def scenario(bell, admin, done):
        async with bell.waiting_on("a", "0-0"):
            await asyncio.sleep(0.5)  # the reader blocks on batch a alone
            async with bell.waiting_on("b", "0-0") as on_b:
                await asyncio.sleep(0.2)
                await admin.xadd(done("b"), {"r": "1"})
                return await on_b.wait(10)
    assert run(redis_url, namespace, scenario) is True


@pytest.mark.parametrize("cursor", ["", "0", "1-", "-1-0", "1-0\n", " 1-0", "18446744073709551616-0",
                                    "0-18446744073709551616", "1-0-0", "١-0"])
def test_a_cursor_that_is_not_a_stream_id_redis_takes_is_refused(cursor):
    with pytest.raises(InvalidInput):
        stream_id(cursor)


def test_the_largest_stream_id_is_a_cursor():
    assert stream_id("18446744073709551615-18446744073709551615") == ((1 << 64) - 1, (1 << 64) - 1)
