"""The trainer client for asyncio trainers: the same API as farm.client.sync, on redis.asyncio.

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
from farm.client.sync import MAX_BLOCK_S, READ_COUNT, GroupTracker, parse_entries, sweep_interval
from farm.config import Settings, from_env, redis_url
from farm.knobs import Knobs, from_json
from farm.pipeline import Pipeline
from farm.protocol.calls import (
    Call,
    cancel_call,
    check_batch_id,
    new_batch_id,
    open_call,
    parse_open,
    parse_submit,
    set_estimate_call,
    submit_call,
    sweep_call,
)
from farm.protocol.keys import Keys
from farm.protocol.live import Progress, parse_progress
from farm.protocol.scripts import EVENTS_MAXLEN, SCRIPTS, lua_tokens
from farm.results import Result


class AsyncBatch:
    """One rollout step's requests on the farm (asyncio)."""

    def __init__(self, client: "AsyncRewardClient", progress: Progress, pipeline: Pipeline) -> None:
        self.client = client
        self.id = progress.batch_id
        self.task = progress.task
        self.pipeline = pipeline
        self.size = progress.size
        self.group_size = progress.group_size

    def __repr__(self) -> str:
        return f"AsyncBatch({self.id!r}, task={self.task!r}, pipeline={self.pipeline.name!r}, size={self.size})"

    async def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        """As Batch.submit: 'queued', 'finished' or 'duplicate'; raises farm.errors on misuse."""
        c = self.client
        call = submit_call(c.settings, self.pipeline, self.id, request_id, payload, group, time.time(),
                           await c.knobs())
        kind = parse_submit(await c.run(call), self.id, request_id)
        if kind == "queued" and not c.lua_tokens:
            await c.wake(call.args[4])
        return kind

    async def as_completed(self, timeout: float | None = None) -> AsyncIterator[Result]:
        c = self.client
        key = c.keys.batch(self.id, ":done")
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = sweep_interval(c.settings)
        next_sweep = time.monotonic() + interval
        last, seen = "0-0", 0
        while seen < self.size:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"batch {self.id!r}: {self.size - seen} of {self.size} results still missing "
                                   f"after {timeout:g} s")
            wait = next_sweep - now if deadline is None else min(next_sweep, deadline) - now
            reply = await c.redis.xread({key: last}, count=READ_COUNT, block=max(1, int(min(wait, MAX_BLOCK_S) * 1000)))
            ended = False
            for _, entries in reply:
                results, ended, last = parse_entries(entries)
                for result in results:
                    seen += 1
                    yield result
            if ended:
                return
            if time.monotonic() >= next_sweep:
                await c.sweep()
                next_sweep = time.monotonic() + interval

    async def gather(self, timeout: float | None = None) -> list[Result]:
        return [r async for r in self.as_completed(timeout)]

    async def completed_groups(self, timeout: float | None = None,
                               on_group_done: Callable[[str, list[Result]], None] | None = None
                               ) -> AsyncIterator[tuple[str, list[Result]]]:
        tracker = GroupTracker(self.group_size)
        async for result in self.as_completed(timeout):
            tracker.add(result)
            if result.group is None:
                continue
            for group, results in tracker.ready(await self._arrived_by_group()):
                if on_group_done:
                    on_group_done(group, results)
                yield group, results
        for group, results in tracker.rest():
            if on_group_done:
                on_group_done(group, results)
            yield group, results

    async def _arrived_by_group(self) -> dict[str, int] | None:
        if self.group_size is not None:
            return None
        c = self.client
        pipe = c.redis.pipeline(transaction=False)
        pipe.hget(c.keys.batch(self.id), "arrived")
        pipe.hgetall(c.keys.batch(self.id, ":groups"))
        arrived, groups = await pipe.execute()
        if int(arrived or 0) < self.size:
            return None
        return {g: int(n) for g, n in groups.items()}

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
        self.keys = Keys(self.settings.namespace)
        self.redis = aioredis.Redis.from_url(redis_url(self.settings), decode_responses=True)
        self._scripts = {name: self.redis.register_script(src) for name, src in SCRIPTS.items()}
        self.app = make_app(self.settings)
        self.tokens = Tokens(self.app, self.settings)
        self._knobs: tuple[float, Knobs] | None = None
        self.lua_tokens = lua_tokens(self.settings)
        self._flag = "1" if self.lua_tokens else "0"

    async def run(self, call: Call):
        return await self._scripts[call.script](args=[self.settings.namespace, EVENTS_MAXLEN, self._flag, *call.args])

    async def knobs(self) -> Knobs:
        now = time.monotonic()
        if self._knobs is None or now - self._knobs[0] > 1.0:
            self._knobs = (now, from_json(await self.redis.get(self.keys.knobs)))
        return self._knobs[1]

    async def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                         group_size: int | None = None) -> AsyncBatch:
        found = registry.get(pipeline)
        batch_id = new_batch_id() if batch_id is None else batch_id
        parse_open(await self.run(open_call(task, found, size, batch_id, group_size, time.time())), batch_id, task)
        return await self.batch(batch_id)

    async def batch(self, batch_id: str) -> AsyncBatch:
        progress = await self.progress(check_batch_id(batch_id))
        return AsyncBatch(self, progress, registry.get(progress.pipeline))

    async def progress(self, batch_id: str) -> Progress:
        return parse_progress(batch_id, await self.redis.hgetall(self.keys.batch(batch_id)))

    async def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        return await self.run(set_estimate_call(check_batch_id(batch_id), estimated_at)) == "ok"

    async def wake(self, queue: str, count: int = 1) -> None:
        timeout = registry.stage_timeout(queue, await self.knobs())
        # kombu's publish is a blocking socket write; keep it off the event loop
        await asyncio.to_thread(self.tokens.send, queue, timeout, count)

    async def sweep(self) -> int:
        queues = list(await self.run(sweep_call()))
        if not self.lua_tokens:
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
