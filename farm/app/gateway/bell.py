"""Waiting for results without holding a shared connection: every long poll, result stream and one-sample call
that waits on a batch is woken by one reader, which follows all the batches anyone waits on with a single
blocking XREAD on a connection of its own. A waiter holds no pooled connection while it waits, so a thousand
idle polls of one tenant cost the others nothing but memory (issue: 100 polls once starved the pool of 64).

A wake-up only says "the batch's done stream has entries after your cursor"; the woken caller reads them on a
pooled connection, as it would have without waiting.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

import redis.asyncio as aioredis

from farm.protocol.ids import check_cursor
from farm.protocol.keys import Keys, Part

log = logging.getLogger(__name__)
BLOCK_MS = 1000  # the longest one XREAD blocks: bounds a wake-up lost to a race with CLIENT UNBLOCK (see _add)
RETRY_S = 0.5  # after the bell's connection failed: the waiters re-read (and see the outage) meanwhile


def stream_id(cursor: str) -> tuple[int, int]:
    """A results cursor (a stream id, 'ms-seq') as a comparable pair; InvalidInput for anything that is not one
    (farm.protocol.ids), checked before it reaches Redis: one bad id in the bell's shared XREAD would fail every
    waiter's."""
    ms, seq = check_cursor(cursor).split("-")
    return int(ms), int(seq)


@dataclass(eq=False)
class Waiter:
    """One caller waiting on one batch for entries after `cursor`."""

    batch_id: str
    cursor: tuple[int, int]
    rung: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self, timeout: float) -> bool:
        """True when woken (entries may have arrived after the cursor), False at the timeout. Clears the wake-up,
        so the caller's next read and wait miss nothing that arrives between them."""
        try:
            await asyncio.wait_for(self.rung.wait(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            return False
        finally:
            self.rung.clear()
        return True


@dataclass(eq=False)
class _Stream:
    """One batch followed: the id the next XREAD reads after, and who waits."""

    after: tuple[int, int]
    waiters: set[Waiter] = field(default_factory=set)

    def read_from(self) -> tuple[int, int]:
        """Where the next XREAD starts: past what the bell has seen and what every waiter has read already (a
        waiter that read a burst has moved its cursor past it: the bell need not step through it entry by entry)."""
        return max(self.after, min((w.cursor for w in self.waiters), default=self.after))


class ResultsBell:
    """`async with bell.waiting_on(batch, cursor) as w: ... await w.wait(s)`. One reader task per event loop, alive
    while anyone waits."""

    def __init__(self, redis_url: str, keys: Keys, unblock: Callable[[int], object]) -> None:
        self.redis_url, self.keys = redis_url, keys
        self._unblock = unblock  # CLIENT UNBLOCK on another connection: an XREAD under way does not see new batches
        self._streams: dict[str, _Stream] = {}
        self._task: asyncio.Task | None = None
        self._conn: aioredis.Redis | None = None
        self._conn_id: int | None = None
        self._blocked = False

    @asynccontextmanager
    async def waiting_on(self, batch_id: str, cursor: str) -> AsyncIterator[Waiter]:
        """Register before the caller's first read (so nothing that arrives after it is missed), and always leave."""
        waiter = Waiter(batch_id, stream_id(cursor))
        await self._add(waiter)
        try:
            yield waiter
        finally:
            self._remove(waiter)

    async def _add(self, waiter: Waiter) -> None:
        stream = self._streams.get(waiter.batch_id)
        if stream is None:
            stream = self._streams[waiter.batch_id] = _Stream(waiter.cursor)
            stream.waiters.add(waiter)
            if self._task is None or self._task.done():
                self._task = asyncio.create_task(self._follow())
            elif self._blocked and self._conn_id is not None:
                # the XREAD under way does not name this batch: end it early, and the next one will. If this lands
                # before the XREAD reaches Redis, the wake-up waits for the next round (at most BLOCK_MS).
                try:
                    await self._unblock(self._conn_id)
                except Exception as exc:  # the bell's own round ends by BLOCK_MS anyway
                    log.debug("could not unblock the results bell: %s", exc)
            return
        stream.waiters.add(waiter)
        if waiter.cursor < stream.after:  # entries the bell has seen may be after this cursor: read them at once
            waiter.rung.set()

    def _remove(self, waiter: Waiter) -> None:
        stream = self._streams.get(waiter.batch_id)
        if stream is not None:
            stream.waiters.discard(waiter)
            if not stream.waiters:
                del self._streams[waiter.batch_id]

    async def _connect(self) -> aioredis.Redis:
        if self._conn is None:
            self._conn = aioredis.Redis.from_url(self.redis_url, decode_responses=True, single_connection_client=True)
            self._conn_id = int(await self._conn.client_id())
        return self._conn

    async def _follow(self) -> None:
        while self._streams:
            try:
                conn = await self._connect()
                names = {self.keys.batch(name, Part.done): name for name in self._streams}
                ids = {key: "%d-%d" % self._streams[name].read_from() for key, name in names.items()}
                self._blocked = True
                try:
                    reply = await conn.xread(ids, count=1, block=BLOCK_MS)
                finally:
                    self._blocked = False
                for key, entries in reply or ():
                    self._ring(names[key], entries)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every waiter re-reads on its own connection, where the outage is handled
                log.warning("the results bell lost its connection: %s", exc)
                await self._drop()
                for stream in self._streams.values():
                    for waiter in stream.waiters:
                        waiter.rung.set()
                await asyncio.sleep(RETRY_S)
        # the connection stays for the next waiter (a one-sample caller at concurrency 1 leaves none between calls);
        # one Redis closed meanwhile fails the next XREAD, and the reader connects anew above (a new client id)

    def _ring(self, batch_id: str, entries: list) -> None:
        """Wake the batch's waiters whose cursor is before the entry the XREAD returned (its first after where the
        bell read from): they have entries to read. Each reads all it has on its own connection, and moves its
        cursor, so a burst of results rings a waiter once or twice, not once per entry."""
        stream = self._streams.get(batch_id)
        if stream is None or not entries:
            return
        stream.after = max(stream.after, stream_id(entries[-1][0]))
        for waiter in stream.waiters:
            if waiter.cursor < stream.after:
                waiter.rung.set()

    async def _drop(self) -> None:
        conn, self._conn, self._conn_id = self._conn, None, None
        if conn is not None:
            try:
                await conn.aclose()
            except Exception:  # already broken
                pass

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._streams.clear()
        await self._drop()
