"""The trainer client for asyncio trainers: the I/O shell around `farm.client.core` on redis.asyncio,
with the same API as the blocking client.

    async with AsyncRewardClient() as farm:
        async with farm.open_batch("math-0", "synthetic", size=8) as batch:
            await batch.submit_many([(f"r{i}", {"times": [0.5, 0]}) for i in range(8)])
            results = await batch.gather(timeout=60)   # in submission order

One client serves any number of event loops, one after another or at once (a trainer that calls
`asyncio.run` per step): its Redis connections belong to the loop that made them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Any, AsyncIterator, Awaitable, Callable, Generator, Iterable, TypeVar

import redis.asyncio as aioredis

from farm import registry
from farm.celery_app import Tokens, make_app
from farm.client.core import (
    POOL_SIZE,
    POOL_WAIT_S,
    SUBMIT_CHUNK,
    BatchHandle,
    BatchInfo,
    GroupTracker,
    Outage,
    ResultReader,
    Session,
    Submitted,
    arrivals,
    client_settings,
    log_cancel,
    refused_again,
    unpack_requests,
)
from farm.client.keepalive import KeepAlive
from farm.client.transient import TRANSIENT
from farm.config import Settings
from farm.errors import BatchLost, BatchNotFound, FarmError, InvalidInput
from farm.knobs import Knobs, KnobsCache
from farm.protocol.calls import (
    Admitted,
    admit,
    cancel_call,
    parse_open,
    parse_seal,
    seal_call,
    set_estimate_call,
    sweep_call,
)
from farm.protocol.dispatch import Dispatch
from farm.protocol.live import Progress, parse_progress
from farm.protocol.scripts import SOURCES, Call
from farm.protocol.silence import Touched, parse_touch, touch_call
from farm.results import Result

log = logging.getLogger(__name__)
T = TypeVar("T")


class AsyncBatch(BatchHandle):
    """One rollout step's requests on the farm (asyncio); as an async context manager it cancels the
    batch when the block raises."""

    client: "AsyncRewardClient"

    def __init__(self, client: "AsyncRewardClient", info: BatchInfo) -> None:
        super().__init__(client, info)
        self.submitted = Submitted()

    async def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        """As Batch.submit: 'queued', 'finished' or 'duplicate'; raises farm.errors on misuse."""
        c = self.client
        return (await self._send([(request_id, payload, group)],
                                 [admit(c.settings, self.pipeline, request_id, payload, group)]))[0]

    async def submit_many(self, requests: Iterable[Any]) -> list[str]:
        """As Batch.submit_many: many requests, `SUBMIT_CHUNK` per round trip, their kinds in order."""
        items = unpack_requests(requests)
        return await self._send(items, self.client.session.admit_many(self.info, items))

    async def _send(self, items: list[tuple[Any, Any, Any]], admitted: list[Admitted],
                    restoring: bool = False) -> list[str]:
        """As Batch._send: the farm runs one chunk while the next is encoded here."""
        c = self.client
        now, knobs = time.time(), await c.knobs()
        kinds: list[str] = []
        errors: list[InvalidInput] = []
        in_flight = None
        for start in range(0, len(admitted), SUBMIT_CHUNK):
            calls = c.session.calls(self.info, admitted[start:start + SUBMIT_CHUNK], now, knobs)
            if in_flight is not None:
                kinds += await self._settle(items, *in_flight, errors, restoring)
                if errors:
                    break
            in_flight = (start, calls, asyncio.ensure_future(c.run(c.session.one_trip(calls))))
            await asyncio.sleep(0)  # let the chunk go out before encoding the next one
        else:
            if in_flight is not None:
                kinds += await self._settle(items, *in_flight, errors, restoring)
        if errors:
            raise errors[0]
        return kinds

    async def _settle(self, items, start: int, calls: list[Call], reply: asyncio.Future, errors: list,
                      restoring: bool) -> list[str]:
        c = self.client
        done, wakes, error = c.session.submitted_many(calls, await reply)
        if isinstance(error, BatchNotFound):
            if restoring:
                raise BatchLost(f"the farm lost batch {self.id!r} again while it was being restored") from error
            await self._restore()  # the farm lost the batch since this handle was made
            done, wakes, error = c.session.submitted_many(calls, await c.run(c.session.one_trip(calls)))
        for (request_id, payload, group), kind in zip(items[start:start + len(calls)], done):
            if kind != "refused":
                self.submitted.add(request_id, payload, group)
        for queue, count in wakes.items():
            await c.wake(queue, count)
        if error is not None:
            errors.append(error)
        return done

    async def as_completed(self, timeout: float | None = None) -> AsyncIterator[Result]:
        c = self.client
        reader = ResultReader(c.session, self.id, self.size, timeout, time.monotonic())
        outages = c.outages
        while not reader.done:
            read = reader.next_read(time.monotonic())
            reply = await c.call(lambda r: r.xread({read.key: read.after}, count=read.count, block=read.block_ms))
            for result in reader.feed(reply):
                yield result
            if reader.ended:
                c.let_go(self.id)
                if reader.abandoned is not None:
                    raise reader.abandoned
                return
            if reader.sweep_due(time.monotonic()) or c.outages != outages:
                outages = c.outages
                [touched] = await c.touch([self.id])  # waiting is a sign of life (before the sweep)
                if touched.state == "unknown":
                    await self._restore()
                    reader.restart()
                await c.sweep()
                reader.swept(time.monotonic())
        c.let_go(self.id)

    async def gather(self, timeout: float | None = None) -> list[Result]:
        """Every result in submission order (requests submitted by other handles follow in completion order)."""
        return self.submitted.ordered([r async for r in self.as_completed(timeout)])

    async def results_by_id(self, timeout: float | None = None) -> dict[str, Result]:
        return {r.request_id: r async for r in self.as_completed(timeout)}

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
        keys = self.client.session.keys

        async def read(r):
            pipe = r.pipeline(transaction=False)
            pipe.hget(keys.batch(self.id), "arrived")
            pipe.hgetall(keys.batch(self.id, ":groups"))
            return await pipe.execute()
        return arrivals(*await self.client.call(read), self.size)

    async def _restore(self) -> None:
        """As Batch._restore: open the lost batch again and submit again what this handle holds."""
        c = self.client
        held = self.submitted.to_restore(self.id)
        call, _ = c.session.open(self.task, self.pipeline.name, self.size, self.id, self.group_size, time.time())
        parse_open(await c.run(call), self.id, self.task)
        try:
            await self._send(held, c.session.admit_many(self.info, held), restoring=True)
        except InvalidInput as exc:
            raise refused_again(self.id, exc) from exc

    async def heartbeat(self) -> str:
        """As `Batch.heartbeat`: a sign of life from this batch's trainer; its state, BatchAbandoned once the farm
        abandoned it."""
        [touched] = await self.client.touch([self.id])
        if touched.state == "unknown":  # the farm lost it: open it again with what this handle holds
            await self._restore()
            return "open"
        return touched.state_or_raise()

    async def cancel(self) -> str:
        self.client.let_go(self.id)
        return await self.client.run(cancel_call(self.id, time.time()))

    async def seal(self) -> str:
        """As `Batch.seal`: no more requests, the size becomes what has arrived."""
        return parse_seal(await self.client.run(seal_call(self.id, time.time())), self.id)

    async def set_estimate(self, estimated_at: float) -> bool:
        return await self.client.run(set_estimate_call(self.id, estimated_at)) == "ok"

    async def progress(self) -> Progress:
        return await self.client.progress(self.id)

    async def __aenter__(self) -> "AsyncBatch":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            try:
                state = await self.cancel()
            except FarmError as err:
                log_cancel(self.id, exc, None, err)
            else:
                log_cancel(self.id, exc, state, None)


class Opening:
    """What `open_batch` returns: await it for the batch, or use it as `async with` to also cancel the
    batch when the block raises."""

    def __init__(self, opening: Callable[[], Awaitable[AsyncBatch]]) -> None:
        self._opening = opening
        self._batch: AsyncBatch | None = None

    def __await__(self) -> Generator[Any, None, AsyncBatch]:
        return self._opening().__await__()

    async def __aenter__(self) -> AsyncBatch:
        self._batch = await self._opening()
        return self._batch

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self._batch.__aexit__(exc_type, exc, tb)


class _LoopRedis:
    """One event loop's Redis connections and scripts (redis.asyncio connections cannot cross loops)."""

    def __init__(self, settings: Settings) -> None:
        pool = aioredis.BlockingConnectionPool.from_url(settings.redis_url, decode_responses=True,
                                                        max_connections=POOL_SIZE, timeout=POOL_WAIT_S)
        self.redis = aioredis.Redis(connection_pool=pool)
        self.scripts = {name: self.redis.register_script(src) for name, src in SOURCES.items()}


class AsyncRewardClient:
    """A trainer's asyncio connection to the farm; named as `RewardClient` is, refusing to start when no
    farm is named. Concurrent callers share a bounded pool of connections per event loop. As `RewardClient`, it
    keeps the batches it opened or attached to alive while it is open, unless `keep_alive=False` (the gateway's:
    there the tenant's own calls are its signs of life)."""

    def __init__(self, settings: Settings | None = None, *, redis_url: str | None = None,
                 broker_url: str | None = None, namespace: str | None = None, keep_alive: bool = True) -> None:
        self.settings = client_settings(settings, redis_url=redis_url, broker_url=broker_url, namespace=namespace)
        self.session = Session(self.settings)
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopRedis] = weakref.WeakKeyDictionary()
        self._knobs = KnobsCache()
        self.app = make_app(self.settings)
        self.tokens = Tokens(self.app, self.settings)
        self.outages = 0
        # the keep-alive runs in a thread of its own, on blocking connections: it serves every event loop alike
        self._blocking: Dispatch | None = None
        self.keep_alive = KeepAlive(lambda ids: self._dispatch().touch(ids),
                                    lambda: self._dispatch().knobs()) if keep_alive else None

    def _dispatch(self) -> Dispatch:
        if self._blocking is None:
            self._blocking = Dispatch(self.settings)
        return self._blocking

    def _conn(self) -> _LoopRedis:
        loop = asyncio.get_running_loop()
        conn = self._loops.get(loop)
        if conn is None:
            conn = self._loops[loop] = _LoopRedis(self.settings)
        return conn

    @property
    def redis(self) -> aioredis.Redis:
        """This event loop's Redis client."""
        return self._conn().redis

    async def call(self, fn: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """Run one exchange `fn(redis)` with the farm, riding through a broker outage of up to `reconnect_s`."""
        outage = None
        while True:
            try:
                out = await fn(self.redis)
            except TRANSIENT as exc:
                outage = outage or Outage(self.settings, time.monotonic())
                delay = outage.next_delay(time.monotonic())
                if delay is None:
                    raise outage.unavailable(exc) from exc
                log.warning("the farm's Redis did not answer (%s); trying again in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                continue
            if outage is not None:
                self.outages += 1
            return out

    async def run(self, call: Call):
        args = self.session.argv(call)
        return await self.call(lambda r: self._conn().scripts[call.script.name](args=args))

    async def knobs(self) -> Knobs:
        now = time.monotonic()
        if self._knobs.stale(now):
            return self._knobs.update(await self.call(lambda r: r.get(self.session.keys.knobs)), now)
        return self._knobs.knobs

    def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                   group_size: int | None = None) -> Opening:
        """Open a batch (the hint that rollout started): `await` it, or `async with` it to cancel the batch
        when the block raises. Opening the same batch again attaches to it."""
        async def opening() -> AsyncBatch:
            call, chosen = self.session.open(task, pipeline, size, batch_id, group_size, time.time())
            parse_open(await self.run(call), chosen, task)
            return await self.batch(chosen)
        return Opening(opening)

    async def batch(self, batch_id: str) -> AsyncBatch:
        progress = await self.progress(batch_id)
        if self.keep_alive is not None and not progress.finished:
            self.keep_alive.hold(progress.batch_id)
        return AsyncBatch(self, BatchInfo.of(progress))

    def let_go(self, batch_id: str) -> None:
        """Keep a batch alive no longer (it ended, or its trainer is done with it)."""
        if self.keep_alive is not None:
            self.keep_alive.release(batch_id)

    async def touch(self, batch_ids: list[str]) -> list[Touched]:
        """A sign of life for these batches (farm ids) in one round trip."""
        return parse_touch(await self.run(touch_call(batch_ids)), batch_ids)

    async def progress(self, batch_id: str) -> Progress:
        batch_id = self.session.batch_id(batch_id)
        return parse_progress(batch_id, await self.call(lambda r: r.hgetall(self.session.keys.batch(batch_id))))

    async def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        return await self.run(set_estimate_call(self.session.batch_id(batch_id), estimated_at)) == "ok"

    async def wake(self, queue: str, count: int = 1) -> None:
        timeout = registry.stage_timeout(queue, await self.knobs())
        # kombu's publish is a blocking socket write; keep it off the event loop
        await self.call(lambda _: asyncio.to_thread(self.tokens.send, queue, timeout, count))

    async def sweep(self) -> int:
        if not self.session.sweeps:
            return 0
        queues = list(await self.run(sweep_call((await self.knobs()).abandon_after())))
        if not self.session.lua_tokens:
            for queue in queues:
                await self.wake(queue)
        return len(queues)

    async def close(self) -> None:
        """Close this loop's connections; those of loops already closed went with them."""
        if self.keep_alive is not None:
            self.keep_alive.close()
        if self._blocking is not None:
            self._blocking.close()
        conn = self._loops.pop(asyncio.get_running_loop(), None)
        if conn is not None:
            await conn.redis.aclose()
        self._loops.clear()
        self.app.close()

    async def __aenter__(self) -> "AsyncRewardClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
