"""The farm's exchanges with Redis as flows without I/O, run by whichever executor holds the connection.

A flow is a generator: it yields each operation to run (a script `Call`, or a `Read` of farm state, or several
`Reads` in one round trip), is sent the reply or thrown what running it raised, and returns the exchange's
answer. `Dispatch` runs flows on redis-py; the trainer clients (farm.client) on redis-py or redis.asyncio. So
the protocol's control flow (the cached knobs, a trainer's touch, the sweep, a batch's progress) is written
once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Sequence, TypeVar

from farm.config import Settings
from farm.knobs import Knobs, KnobsCache
from farm.protocol import reads
from farm.protocol.calls import check_batch_id, sweep_call
from farm.protocol.keys import Keys
from farm.protocol.live import Progress, parse_progress
from farm.protocol.scripts import lua_tokens
from farm.protocol.silence import Touched, parse_touch, touch_call

T = TypeVar("T")
Flow = Generator[Any, Any, T]


@dataclass(frozen=True)
class Read:
    """One read of farm state, run later on a Redis client: `fn(redis, *args)`, `fn` one of `farm.protocol.reads`
    (or `live_knobs`), which take the blocking and the asyncio clients and their pipelines alike."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def on(self, redis: Any) -> Any:
        """Send it on `redis`: the reply, or with redis.asyncio an awaitable of it."""
        return self.fn(redis, *self.args)


@dataclass(frozen=True)
class Reads:
    """Reads sent together in one round trip (a pipeline without a transaction): their replies in order."""

    reads: tuple[Read, ...]

    def on(self, redis: Any) -> Any:
        pipe = redis.pipeline(transaction=False)
        for read in self.reads:
            read.on(pipe)
        return pipe.execute()


def live_knobs(redis: Any, keys: Keys) -> Any:
    """The live knobs' Redis copy (`farm.knobs.from_json` reads it)."""
    return redis.get(keys.knobs)


def once(op: Any) -> Flow[Any]:
    """The flow of a single operation: its reply."""
    return (yield op)


class Steps:
    """A flow as its executor runs it: `op` is the operation to run now; `give` the flow its reply, or `fail` it
    with what running it raised (thrown in where the flow yielded it), until it is `done` with its `value`."""

    def __init__(self, flow: Flow[Any]) -> None:
        self.flow, self.op, self.done, self.value = flow, None, False, None
        self._step(flow.send, None)

    def give(self, reply: Any) -> None:
        self._step(self.flow.send, reply)

    def fail(self, exc: BaseException) -> None:
        self._step(self.flow.throw, exc)

    def _step(self, resume: Callable[[Any], Any], what: Any) -> None:
        try:
            self.op = resume(what)
        except StopIteration as stop:
            self.done, self.value = True, stop.value


def run(steps: Steps, do: Callable[[Any], Any]) -> Any:
    """Run a flow to its end, each operation by the blocking executor `do`."""
    while not steps.done:
        try:
            reply = do(steps.op)
        except Exception as exc:
            steps.fail(exc)
        else:
            steps.give(reply)
    return steps.value


class Exchanges:
    """The flows every executor of one farm shares: the live knobs (cached), a batch's progress, a trainer's
    touch and the sweep. Times are a monotonic clock's (`clock`)."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self.lua_tokens = lua_tokens(settings)
        self.cache = KnobsCache()
        self.clock = clock

    def knobs(self, max_age_s: float | None = None) -> Flow[Knobs]:
        """The live knobs, read again at most once a second (or per `max_age_s`)."""
        now = self.clock()
        if self.cache.stale(now, max_age_s):
            return self.cache.update((yield Read(live_knobs, (self.keys,))), now)
        return self.cache.knobs

    def progress(self, batch_id: str) -> Flow[Progress]:
        return parse_progress(batch_id, (yield Read(reads.progress, (self.keys, batch_id))))

    def touch(self, batch_ids: Sequence[str]) -> Flow[list[Touched]]:
        """A sign of life from the trainer of these batches (farm.protocol.silence), in one round trip."""
        ids = [check_batch_id(b) for b in batch_ids]
        return parse_touch((yield touch_call(ids)), ids) if ids else []

    def sweep(self) -> Flow[list[str]]:
        """Give lapsed leases back and abandon the batches whose trainer went silent (the live knob
        `abandon_after_s`); one stage queue per request put back (each needs a token unless `lua_tokens`: then
        the script published them)."""
        after = (yield from self.knobs()).abandon_after()
        return list((yield sweep_call(after)))
