"""How the farm's exchanges with Redis are written once for every executor: a flow is a generator that yields each
operation to run (a script `Call`, a `Read` of farm state, or several `Reads` in one round trip), is sent the reply
or thrown what running it raised, and returns the exchange's answer. `run` is the blocking executor; the asyncio
trainer client has its own loop over `Steps`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator, TypeVar

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
