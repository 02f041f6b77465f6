"""Awaiting one request's result in a batch that many callers feed: trainers that score per sample (verl's
reward loop, AReaL's rollout workflows) submit into a shared batch and each await their own result.

One reader per batch reads the batch's results once and hands each to whoever awaits it, instead of every
caller reading the whole batch.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict
from typing import Awaitable, Callable

from farm.client import AsyncBatch
from farm.results import Result

KEPT = 64  # waiters kept per event loop: batches of the last steps, for late or repeated samples


class Waiter:
    """The results of one batch, by request id, for callers that await them one at a time."""

    def __init__(self, batch: AsyncBatch) -> None:
        self.batch = batch
        self.results: dict[str, Result] = {}
        self.waiting: dict[str, asyncio.Future] = {}
        self.reader: asyncio.Task | None = None

    async def result(self, request_id: str, timeout: float | None = None) -> Result:
        """The request's result (submit it first); TimeoutError after `timeout` seconds."""
        if request_id in self.results:  # read already: a repeated sample, or one another caller waited for
            return self.results[request_id]
        future = self.waiting.get(request_id)
        if future is None:
            future = self.waiting[request_id] = asyncio.get_running_loop().create_future()
        if self.reader is None or self.reader.done():
            self.reader = asyncio.create_task(self._read())
        return await asyncio.wait_for(asyncio.shield(future), timeout)

    async def _read(self) -> None:
        error: BaseException | None = None
        try:
            async for result in self.batch.as_completed():
                self.results[result.request_id] = result
                future = self.waiting.pop(result.request_id, None)
                if future is not None and not future.done():
                    future.set_result(result)
        except Exception as exc:  # the farm failed us: every waiter hears of it rather than waiting forever
            error = exc
        # the batch is over (or the read failed): whoever still waits was never submitted here
        for request_id, future in self.waiting.items():
            if not future.done():
                future.set_exception(error or KeyError(f"batch {self.batch.id!r} finished without a result for "
                                                       f"{request_id!r}"))
        self.waiting.clear()


class Waiters:
    """The waiters of the batches one process feeds, per event loop (a batch's reader belongs to the loop
    that started it), the most recent `KEPT` of each. Concurrent callers of a new batch share one waiter."""

    def __init__(self) -> None:
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OrderedDict[str, asyncio.Future]] = (
            weakref.WeakKeyDictionary())

    async def waiter(self, batch_id: str, attach: Callable[[], Awaitable[AsyncBatch]]) -> Waiter:
        """The batch's waiter; `attach()` makes its handle the first time."""
        kept = self._loops.setdefault(asyncio.get_running_loop(), OrderedDict())
        making = kept.get(batch_id)
        if making is None:
            making = kept[batch_id] = asyncio.ensure_future(self._make(attach))
            while len(kept) > KEPT:
                kept.popitem(last=False)
        kept.move_to_end(batch_id)
        try:
            return await asyncio.shield(making)
        except Exception:
            kept.pop(batch_id, None)  # attaching failed: the next caller tries again
            raise

    @staticmethod
    async def _make(attach: Callable[[], Awaitable[AsyncBatch]]) -> Waiter:
        return Waiter(await attach())
