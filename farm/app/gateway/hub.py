"""Waiting for one request's result when many callers wait on the same batch (OpenRLHF and SandboxFusion
send one sample per HTTP call): one reader per batch follows its results stream and wakes the callers,
instead of every caller reading the whole stream (quadratic in the batch size). The reader waits on the
results bell between reads, holding no pooled connection.

What a batch's reader has read outlives its last caller for a while (`LINGER_S`, at most `LINGER_MAX` batches):
one-sample callers at low concurrency leave no one waiting between calls, and the next call reads on from
there, rather than read and parse the whole batch's results again (quadratic again, at concurrency 1).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

from farm.app.gateway.bell import ResultsBell, stream_id
from farm.client.aio import AsyncRewardClient
from farm.client.core import MAX_BLOCK_S, READ_COUNT, done_entries
from farm.protocol import reads
from farm.results import Result

log = logging.getLogger(__name__)
TOUCH_EVERY_S = 5.0  # how often a batch callers wait on is touched (farm.protocol.silence)
LINGER_S = 30.0  # how long a batch's reads are kept once no one waits on it
LINGER_MAX = 64  # batches whose reads are kept with no one waiting, at most (the longest idle go first)


class _Watch:
    """One batch's results read so far (and the cursor after them), the callers waiting on the rest, and the task
    reading them."""

    def __init__(self) -> None:
        self.results: dict[str, Result] = {}
        self.waiters: dict[str, list[asyncio.Future]] = defaultdict(list)
        self.ended = False
        self.task: asyncio.Task | None = None
        self.last = "0-0"
        self.touched = float("-inf")


class ResultHub:
    """`await hub.wait(batch, request, timeout)`: the request's Result, or TimeoutError."""

    def __init__(self, client: AsyncRewardClient, bell: ResultsBell) -> None:
        self.client, self.bell = client, bell
        self._watches: dict[str, _Watch] = {}
        self._idle: dict[str, float] = {}  # batch -> when its last caller left (monotonic), the longest idle first

    async def wait(self, batch_id: str, request_id: str, timeout: float) -> Result:
        self._forget_idle(time.monotonic())
        watch = self._watches.get(batch_id)
        if watch is None:
            watch = self._watches[batch_id] = _Watch()
        if request_id in watch.results:
            return watch.results[request_id]
        future = asyncio.get_running_loop().create_future()
        watch.waiters[request_id].append(future)
        if watch.task is None or watch.task.done():  # a new batch, or one whose reads lingered: read on from there
            self._idle.pop(batch_id, None)
            watch.task = asyncio.create_task(self._follow(batch_id, watch))
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        finally:
            waiting = watch.waiters.get(request_id)
            if waiting is not None and future in waiting:
                waiting.remove(future)
                if not waiting:
                    del watch.waiters[request_id]

    def _forget_idle(self, now: float) -> None:
        """Drop the reads of batches no one has waited on for LINGER_S, and the longest idle past LINGER_MAX."""
        while self._idle:
            batch_id, since = next(iter(self._idle.items()))
            if now - since < LINGER_S and len(self._idle) <= LINGER_MAX:
                return
            del self._idle[batch_id], self._watches[batch_id]

    async def _follow(self, batch_id: str, watch: _Watch) -> None:
        keys = self.client.session.keys
        gone = True  # the watch leaves the hub, unless its batch may still bring results to callers to come
        try:
            async with self.bell.waiting_on(batch_id, watch.last) as bell:
                # a watch lives while someone waits; what it read stays for callers that come meanwhile
                first = True
                while watch.waiters and not watch.ended:
                    if time.monotonic() - watch.touched >= TOUCH_EVERY_S:  # callers wait on it: its trainers live
                        await self.client.touch([batch_id])
                        watch.touched = time.monotonic()
                    if first:  # the bell reads on from this watch's cursor: it rings at once for what is there
                        first = False
                        await bell.wait(MAX_BLOCK_S)
                    reply = await self.client.call(
                        lambda r: reads.results_after(r, keys, batch_id, watch.last, READ_COUNT))
                    read = 0
                    for _, entries in reply or ():
                        read += len(entries)
                        for last, result in done_entries(entries):
                            watch.last = last
                            if result is None:
                                watch.ended = True
                                continue
                            watch.results[result.request_id] = result
                            for future in watch.waiters.pop(result.request_id, ()):
                                if not future.done():
                                    future.set_result(result)
                    # fewer than asked for: caught up as of that read, so wait for the bell (or the next touch, or
                    # the last caller leaving) without reading again to see nothing; what arrived since rings it
                    if read < READ_COUNT and watch.waiters and not watch.ended:
                        bell.cursor = stream_id(watch.last)
                        await bell.wait(MAX_BLOCK_S)
            if watch.ended:  # its results expire, or it was cancelled before these arrived: nothing will come
                self._fail(watch, LookupError(f"batch {batch_id!r} ended without a result for this request"))
            else:  # its last caller left: what was read lingers for the next (no await from the loop's test to here)
                self._idle[batch_id], gone = time.monotonic(), False
        except Exception as exc:  # the farm went away for longer than the client rides out: fail the waiters
            log.warning("stopped following the results of batch %r: %s", batch_id, exc)
            self._fail(watch, exc)
        finally:
            if gone and self._watches.get(batch_id) is watch:
                del self._watches[batch_id]

    @staticmethod
    def _fail(watch: _Watch, exc: BaseException) -> None:
        for futures in watch.waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(exc)

    async def close(self) -> None:
        for watch in list(self._watches.values()):
            if watch.task is not None:
                watch.task.cancel()
        self._watches.clear()
        self._idle.clear()
