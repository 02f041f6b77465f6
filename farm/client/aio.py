"""The trainer client for asyncio trainers: the I/O shell around `farm.client.core` on redis.asyncio,
with the same API as the blocking client.

    async with AsyncRewardClient() as farm:
        batch = await farm.open_batch("math-0", "synthetic", size=8)
        await batch.submit("r0", {"times": [0.5, 0]})
        async for result in batch.as_completed(timeout=60):
            ...
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Callable

import redis.asyncio as aioredis

from farm import registry
from farm.celery_app import Tokens, make_app
from farm.client.core import BatchHandle, BatchInfo, GroupTracker, ResultReader, Session, arrivals
from farm.config import Settings, from_env, redis_url
from farm.knobs import Knobs, KnobsCache
from farm.protocol.calls import cancel_call, check_batch_id, parse_open, set_estimate_call, sweep_call
from farm.protocol.live import Progress, parse_progress
from farm.protocol.scripts import SOURCES, Call
from farm.results import Result


class AsyncBatch(BatchHandle):
    """One rollout step's requests on the farm (asyncio)."""

    client: "AsyncRewardClient"

    async def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        """As Batch.submit: 'queued', 'finished' or 'duplicate'; raises farm.errors on misuse."""
        c = self.client
        call = c.session.submit(self.info, request_id, payload, group, time.time(), await c.knobs())
        kind, wake = c.session.submitted(call, await c.run(call))
        if wake is not None:
            await c.wake(wake)
        return kind

    async def as_completed(self, timeout: float | None = None) -> AsyncIterator[Result]:
        c = self.client
        reader = ResultReader(c.session, self.id, self.size, timeout, time.monotonic())
        while not reader.done:
            read = reader.next_read(time.monotonic())
            for result in reader.feed(await c.redis.xread({read.key: read.after}, count=read.count,
                                                          block=read.block_ms)):
                yield result
            if reader.ended:
                return
            if reader.sweep_due(time.monotonic()):
                await c.sweep()
                reader.swept(time.monotonic())

    async def gather(self, timeout: float | None = None) -> list[Result]:
        return [r async for r in self.as_completed(timeout)]

    async def completed_groups(self, timeout: float | None = None,
                               on_group_done: Callable[[str, list[Result]], None] | None = None
                               ) -> AsyncIterator[tuple[str, list[Result]]]:
        tracker = GroupTracker(self.group_size, on_group_done)
        async for result in self.as_completed(timeout):
            if tracker.add(result):
                for done in tracker.emit(tracker.ready(await self._arrivals() if tracker.needs_arrivals else None)):
                    yield done
        for done in tracker.emit(tracker.rest()):
            yield done

    async def _arrivals(self) -> dict[str, int] | None:
        c = self.client
        pipe = c.redis.pipeline(transaction=False)
        pipe.hget(c.session.keys.batch(self.id), "arrived")
        pipe.hgetall(c.session.keys.batch(self.id, ":groups"))
        return arrivals(*await pipe.execute(), self.size)

    async def cancel(self) -> str:
        return await self.client.run(cancel_call(self.id, time.time()))

    async def set_estimate(self, estimated_at: float) -> bool:
        return await self.client.run(set_estimate_call(self.id, estimated_at)) == "ok"

    async def progress(self) -> Progress:
        return await self.client.progress(self.id)


class AsyncRewardClient:
    """A trainer's asyncio connection to the farm."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or from_env()
        self.session = Session(self.settings)
        self.redis = aioredis.Redis.from_url(redis_url(self.settings), decode_responses=True)
        self._scripts = {name: self.redis.register_script(src) for name, src in SOURCES.items()}
        self._knobs = KnobsCache()
        self.app = make_app(self.settings)
        self.tokens = Tokens(self.app, self.settings)

    async def run(self, call: Call):
        return await self._scripts[call.script.name](args=self.session.argv(call))

    async def knobs(self) -> Knobs:
        now = time.monotonic()
        if self._knobs.stale(now):
            return self._knobs.update(await self.redis.get(self.session.keys.knobs), now)
        return self._knobs.knobs

    async def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                         group_size: int | None = None) -> AsyncBatch:
        call, batch_id = self.session.open(task, pipeline, size, batch_id, group_size, time.time())
        parse_open(await self.run(call), batch_id, task)
        return await self.batch(batch_id)

    async def batch(self, batch_id: str) -> AsyncBatch:
        return AsyncBatch(self, BatchInfo.of(await self.progress(check_batch_id(batch_id))))

    async def progress(self, batch_id: str) -> Progress:
        return parse_progress(batch_id, await self.redis.hgetall(self.session.keys.batch(batch_id)))

    async def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        return await self.run(set_estimate_call(check_batch_id(batch_id), estimated_at)) == "ok"

    async def wake(self, queue: str, count: int = 1) -> None:
        timeout = registry.stage_timeout(queue, await self.knobs())
        # kombu's publish is a blocking socket write; keep it off the event loop
        await asyncio.to_thread(self.tokens.send, queue, timeout, count)

    async def sweep(self) -> int:
        queues = list(await self.run(sweep_call()))
        if not self.session.lua_tokens:
            for queue in queues:
                await self.wake(queue)
        return len(queues)

    async def close(self) -> None:
        await self.redis.aclose()
        self.app.close()

    async def __aenter__(self) -> "AsyncRewardClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
