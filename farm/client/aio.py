"""The trainer client for asyncio trainers: the I/O shell that runs `farm.client.flows` on redis.asyncio,
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
import weakref
from typing import Any, AsyncIterator, Awaitable, Callable, Generator, Iterable, TypeVar

import redis.asyncio as aioredis

from farm.celery_app import Tokens, make_app
from farm.client.core import POOL_SIZE, POOL_WAIT_S, BatchHandle, GroupTracker, Session, client_settings
from farm.client.flows import Exchange, Flows, InFlight, Riding, Send, Sleep, Wake
from farm.client.keepalive import KeepAlive
from farm.client.transient import TRANSIENT
from farm.config import Settings
from farm.knobs import Knobs
from farm.protocol.dispatch import Dispatch
from farm.protocol.exchange import Exchanges
from farm.protocol.flow import Flow, once
from farm.protocol.live import Progress
from farm.protocol.scripts import SOURCES, Call
from farm.protocol.silence import Touched
from farm.results import Result

T = TypeVar("T")


class AsyncBatch(BatchHandle):
    """One rollout step's requests on the farm (asyncio); as an async context manager it cancels the
    batch when the block raises."""

    client: "AsyncRewardClient"

    async def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        """As Batch.submit: 'queued', 'finished' or 'duplicate'; raises farm.errors on misuse."""
        return await self.client._drive(self.flows.submit(self, request_id, payload, group))

    async def submit_many(self, requests: Iterable[Any]) -> list[str]:
        """As Batch.submit_many: many requests, `SUBMIT_CHUNK` per round trip, their kinds in order."""
        return await self.client._drive(self.flows.submit_many(self, requests))

    async def as_completed(self, timeout: float | None = None) -> AsyncIterator[Result]:
        waiting = self.flows.waiting(self, timeout)
        while not waiting.over:
            for result in await self.client._drive(waiting.round()):
                yield result

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
            for done in tracker.emit(await self.client._drive(self.flows.completed(self, tracker, result))):
                yield done
        for done in tracker.emit(tracker.rest()):
            yield done

    async def heartbeat(self) -> str:
        """As `Batch.heartbeat`: a sign of life from this batch's trainer; its state, BatchAbandoned once the farm
        abandoned it."""
        return await self.client._drive(self.flows.heartbeat(self))

    async def cancel(self) -> str:
        return await self.client._drive(self.flows.cancel(self))

    async def seal(self) -> str:
        """As `Batch.seal`: no more requests, the size becomes what has arrived."""
        return await self.client._drive(self.flows.seal(self))

    async def set_estimate(self, estimated_at: float) -> bool:
        return await self.client._drive(self.flows.set_estimate(self.id, estimated_at))

    async def progress(self) -> Progress:
        return await self.client._drive(self.flows.progress(self.id))

    async def __aenter__(self) -> "AsyncBatch":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            await self.client._drive(self.flows.cancel_quietly(self, exc))


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
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopRedis] = weakref.WeakKeyDictionary()
        # the keep-alive runs in a thread of its own, on blocking connections: it serves every event loop alike
        self._blocking: Dispatch | None = None
        self.keep_alive = KeepAlive(lambda ids: self._dispatch().touch(ids),
                                    lambda: self._dispatch().knobs()) if keep_alive else None
        self.session = Session(self.settings)
        self.flows = Flows(self.session, Exchanges(self.settings), TRANSIENT, self.keep_alive)
        self.app = make_app(self.settings)
        self.tokens = Tokens(self.app, self.settings)

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

    @property
    def outages(self) -> int:
        """Outages ridden through: a reader checks its batch survived each one."""
        return self.flows.outages

    async def _drive(self, flow: Flow[T]) -> T:
        """Run a flow on this event loop's connections, riding through a broker outage of up to `reconnect_s`."""
        steps = Riding(flow, self.flows)
        while not steps.done:
            try:
                reply = await self._do(steps.op)
            except Exception as exc:
                steps.fail(exc)
            else:
                steps.give(reply)
        return steps.value

    async def _do(self, op: Any) -> Any:
        kind = type(op)
        if kind is Call:
            return await self._conn().scripts[op.script.name](args=self.session.argv(op))
        if kind is Send:
            sent = asyncio.ensure_future(self._drive(once(op.call)))
            await asyncio.sleep(0)  # let the chunk go out before encoding the next one
            return sent
        if kind is InFlight:
            return await op.handle
        if kind is Wake:  # kombu's publish is a blocking socket write; keep it off the event loop
            return await asyncio.to_thread(self.tokens.send, op.queue, op.timeout, op.count)
        if kind is Sleep:
            return await asyncio.sleep(op)
        if kind is Exchange:
            return await op.fn(self.redis)
        return await op.on(self.redis)  # a read of farm state

    async def call(self, fn: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """Run one exchange `fn(redis)` with the farm, riding through a broker outage of up to `reconnect_s`."""
        return await self._drive(once(Exchange(fn)))

    async def run(self, call: Call):
        return await self._drive(once(call))

    async def knobs(self) -> Knobs:
        return await self._drive(self.flows.exchanges.knobs())

    def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                   group_size: int | None = None) -> Opening:
        """Open a batch (the hint that rollout started): `await` it, or `async with` it to cancel the batch
        when the block raises. Opening the same batch again attaches to it."""
        async def opening() -> AsyncBatch:
            return AsyncBatch(self, await self._drive(self.flows.open(task, pipeline, size, batch_id, group_size)))
        return Opening(opening)

    async def batch(self, batch_id: str) -> AsyncBatch:
        return AsyncBatch(self, await self._drive(self.flows.attach(batch_id)))

    def let_go(self, batch_id: str) -> None:
        """Keep a batch alive no longer (it ended, or its trainer is done with it)."""
        self.flows.let_go(batch_id)

    async def touch(self, batch_ids: list[str]) -> list[Touched]:
        """A sign of life for these batches (farm ids) in one round trip."""
        return await self._drive(self.flows.exchanges.touch(batch_ids))

    async def progress(self, batch_id: str) -> Progress:
        return await self._drive(self.flows.progress(batch_id))

    async def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        return await self._drive(self.flows.set_estimate(batch_id, estimated_at))

    async def wake(self, queue: str, count: int = 1) -> None:
        await self._drive(self.flows.wake(queue, count))

    async def sweep(self) -> int:
        return await self._drive(self.flows.sweep())

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
