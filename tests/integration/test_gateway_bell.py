"""The results bell against a real Redis: one reader wakes the waiters of a batch when its done stream grows,
and a waiter on a batch the reader does not follow yet is woken without waiting out the reader's block."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from farm.app.gateway import bell as bell_module
from farm.app.gateway.bell import ResultsBell, Waiter, _Stream, stream_id
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


def test_a_result_rings_its_waiter_with_one_read_on_the_bells_connection(redis_url, namespace):
    async def scenario(bell, admin, done):
        sent = []
        connect = bell._connect

        async def counting():  # every command the bell's client sends, alone or in a pipeline
            conn = await connect()
            if not getattr(conn, "counted", False):
                one, many, conn.counted = conn.execute_command, conn.pipeline, True

                async def command(*args, **options):
                    sent.append(args[0])
                    return await one(*args, **options)

                def pipeline(*args, **options):
                    pipe = many(*args, **options)
                    execute = pipe.execute

                    async def counted_execute(*a, **k):
                        sent.extend(str(call[0]) for call, _ in pipe.command_stack)
                        return await execute(*a, **k)
                    pipe.execute = counted_execute
                    return pipe
                conn.execute_command, conn.pipeline = command, pipeline
            return conn
        bell._connect = counting
        async with bell.waiting_on("a", "0-0") as waiter:
            await asyncio.sleep(0.2)
            await admin.xadd(done("a"), {"r": "1"})
            woken = await waiter.wait(10)
            await asyncio.sleep(0.2)  # whatever the bell sends after ringing, before it blocks again
            return woken, sent
    woken, sent = run(redis_url, namespace, scenario)
    assert woken
    assert set(sent) == {"XREAD"}  # no second command to find the stream's last entry
    assert len(sent) <= 3  # the block before the entry, the read that saw it, the block after


def test_the_bell_reads_on_from_where_every_waiter_has_read_not_from_what_it_saw_itself():
    ahead, behind = Waiter("a", (7, 0)), Waiter("a", (5, 0))
    stream = _Stream((3, 0), {ahead, behind})
    assert stream.read_from() == (5, 0)  # a burst its waiters read past is not stepped through entry by entry
    stream.after = (6, 0)
    assert stream.read_from() == (6, 0)  # a waiter behind what the bell saw was rung already
    assert _Stream((3, 0)).read_from() == (3, 0)


def test_a_waiter_that_read_a_burst_is_not_rung_again_for_it(redis_url, namespace):
    async def scenario(bell, admin, done):
        async with bell.waiting_on("a", "0-0") as waiter:
            await asyncio.sleep(0.2)
            pipe = admin.pipeline(transaction=False)
            for i in range(5):
                pipe.xadd(done("a"), {"r": str(i)})
            ids = await pipe.execute()
            first = await waiter.wait(10)
            waiter.cursor = stream_id(ids[-1])  # it read them all, as the hub does
            await asyncio.sleep(0.3)  # the bell may ring once more for what it saw before the cursor moved
            waiter.rung.clear()
            return first, await waiter.wait(0.5)
    assert run(redis_url, namespace, scenario) == (True, False)


async def woken_once(bell, admin, done, batch: str) -> tuple[bool, int | None]:
    """One waiter on `batch`, woken by one entry, and the client id the bell read it on; then the waiter leaves, and
    the reader ends with no one waiting."""
    async with bell.waiting_on(batch, "0-0") as waiter:
        await asyncio.sleep(0.2)
        await admin.xadd(done(batch), {"r": "1"})
        woken, conn_id = await waiter.wait(10), bell._conn_id
    while not bell._task.done():  # its last XREAD ends by BLOCK_MS, and then the reader, with no one waiting
        await asyncio.sleep(0.05)
    return woken, conn_id


def test_the_bells_connection_is_kept_for_the_next_waiter(redis_url, namespace):
    async def scenario(bell, admin, done):
        return await woken_once(bell, admin, done, "a"), await woken_once(bell, admin, done, "b")
    (woken_a, first), (woken_b, second) = run(redis_url, namespace, scenario)
    assert woken_a and woken_b and first == second


def test_a_waiter_on_a_new_batch_is_woken_after_redis_dropped_the_bells_idle_connection(redis_url, namespace,
                                                                                       monkeypatch):
    async def scenario(bell, admin, done):
        _, dropped = await woken_once(bell, admin, done, "a")
        monkeypatch.setattr(bell_module, "BLOCK_MS", 30_000)  # a wake-up sent to the old connection waits this long
        await admin.client_kill_filter(_id=dropped)  # as Redis's `timeout` does to an idle client
        async with bell.waiting_on("a", "0-0"):  # redis-py reconnects the kept connection for the reader's XREAD
            await asyncio.sleep(0.5)
            async with bell.waiting_on("b", "0-0") as on_b:
                await asyncio.sleep(0.2)
                await admin.xadd(done("b"), {"r": "1"})
                return dropped, bell._conn_id, await on_b.wait(10)
    dropped, now, woken = run(redis_url, namespace, scenario)
    assert now != dropped and woken
