"""The trainer client's control flow, once for the blocking and the asyncio shells: opening and attaching,
sending in chunks with one in flight, restoring a batch the farm lost, the touch/restore/sweep rhythm of a
wait on results, waking stages, riding through a broker outage.

Each operation is a flow (farm.protocol.exchange): a generator that yields what to run and takes the replies.
Besides the protocol's script `Call`s and `Read`s, a client flow yields `Send` and then the `InFlight` (a
chunk sent now, its answer read later), `Wake` (wake-up tokens for a separate broker), `Sleep` (a pause in an
outage) and `Exchange` (one the caller spelled). The shells run them under `Riding` and do nothing but the I/O.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from farm import registry
from farm.client.core import SUBMIT_CHUNK, BatchHandle, BatchInfo, GroupTracker, Outage, ResultReader, Session, \
    arrivals, unpack_requests
from farm.client.keepalive import KeepAlive
from farm.errors import BatchLost, BatchNotFound, FarmError, InvalidInput
from farm.protocol.calls import admit, cancel_call, parse_open, parse_seal, seal_call, set_estimate_call
from farm.protocol import reads
from farm.protocol.exchange import Exchanges
from farm.protocol.flow import Flow, Read, Reads, Steps
from farm.protocol.live import Progress
from farm.protocol.scripts import Call
from farm.results import Result

log = logging.getLogger("farm.client")


@dataclass(frozen=True)
class Send:
    """Send a script call now and read its answer later (yielding the `InFlight` that holds what this gave
    back): the farm runs one chunk while the client encodes the next."""

    call: Call


@dataclass
class InFlight:
    """A chunk of submits on its way: its first request's place, its calls and the one that carries them, and
    the shell's handle on it (None once `reply` is in)."""

    start: int
    calls: list[Call]
    trip: Call
    handle: Any = None
    reply: Any = None


@dataclass(frozen=True)
class Wake:
    """Send `count` wake-up tokens for a stage queue, their hard time limit from `timeout`."""

    queue: str
    timeout: float
    count: int


class Sleep(float):
    """A pause of this many seconds (in an outage, before an operation is run again)."""


@dataclass(frozen=True)
class Exchange:
    """An exchange the caller spelled itself (the shells' `call`): `fn` run as that `call` says."""

    fn: Callable[..., Any]


class Riding(Steps):
    """A flow's steps with each operation ridden through a broker outage: one that fails with a transient error
    is run again after a `Sleep` (backing off as `Outage` says) until the reconnect budget is spent, then the
    flow gets FarmUnavailable. A failed `Send`, or read of an `InFlight`, goes to the flow, which sends the call
    again."""

    def __init__(self, flow: Flow[Any], flows: "Flows") -> None:
        self.flows = flows
        self.outage: Outage | None = None
        self.again: Any = None  # the operation to run again once the `Sleep` now asked for is over
        super().__init__(flow)

    def fail(self, exc: BaseException) -> None:
        if self.again is not None or not isinstance(exc, self.flows.transient) or isinstance(self.op, (Send, InFlight)):
            return super().fail(exc)
        now = self.flows.clock()
        self.outage = self.outage or Outage(self.flows.session.settings, now)
        delay = self.outage.next_delay(now)
        if delay is None:
            error, self.outage = self.outage.unavailable(exc), None
            error.__cause__ = exc
            return super().fail(error)
        log.warning("the farm's Redis did not answer (%s); trying again in %.2f s", exc, delay)
        self.again, self.op = self.op, Sleep(delay)

    def give(self, reply: Any) -> None:
        if self.again is not None:
            self.op, self.again = self.again, None
            return
        if self.outage is not None:
            self.flows.outages += 1  # a reader checks its batch survived each outage
            self.outage = None
        super().give(reply)


class Flows:
    """Every operation of one trainer client as a flow: its session, its cached knobs (`exchanges`), the errors
    it rides through (`transient`), its keep-alive, and the outages it rode through. `wall` stamps what the
    farm records; `clock`, a monotonic one, times waits."""

    def __init__(self, session: Session, exchanges: Exchanges, transient: tuple[type[BaseException], ...],
                 keep_alive: KeepAlive | None, wall: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session, self.exchanges, self.transient, self.keep_alive = session, exchanges, transient, keep_alive
        self.wall, self.clock = wall, clock
        self.outages = 0

    # -- batches

    def open(self, task: Any, pipeline: str, size: Any, batch_id: str | None, group_size: Any) -> Flow[BatchInfo]:
        """Open a batch (attaching to it when it exists); the batch as its handle holds it."""
        call, batch_id = self.session.open(task, pipeline, size, batch_id, group_size, self.wall())
        parse_open((yield call), batch_id, task)
        return (yield from self.attach(batch_id))

    def attach(self, batch_id: str) -> Flow[BatchInfo]:
        """An existing batch (BatchNotFound if there is none), kept alive while it is open."""
        progress = yield from self.progress(batch_id)
        if self.keep_alive is not None and not progress.finished:
            self.keep_alive.hold(progress.batch_id)
        return BatchInfo.of(progress)

    def progress(self, batch_id: str) -> Flow[Progress]:
        return (yield from self.exchanges.progress(self.session.batch_id(batch_id)))

    def let_go(self, batch_id: str) -> None:
        """Keep a batch alive no longer (it ended, or its trainer is done with it)."""
        if self.keep_alive is not None:
            self.keep_alive.release(batch_id)

    def heartbeat(self, batch: BatchHandle) -> Flow[str]:
        [touched] = yield from self.exchanges.touch([batch.id])
        if touched.state == "unknown":  # the farm lost it: open it again with what this handle holds
            yield from self.restore(batch)
            return "open"
        return touched.state_or_raise()

    def cancel(self, batch: BatchHandle) -> Flow[str]:
        self.let_go(batch.id)
        return (yield cancel_call(batch.id, self.wall()))

    def cancel_quietly(self, batch: BatchHandle, exc: BaseException | None) -> Flow[None]:
        """Cancel a batch whose trainer failed, never hiding the failure behind the cancel's own trouble."""
        try:
            state = yield from self.cancel(batch)
        except FarmError as err:
            log.warning("batch %r was left open: cancelling it after %r failed: %s", batch.id, exc, err)
        else:
            log.info("batch %r %s after %r", batch.id, state, exc)

    def seal(self, batch: BatchHandle) -> Flow[str]:
        return parse_seal((yield seal_call(batch.id, self.wall())), batch.id)

    def set_estimate(self, batch_id: str, estimated_at: float) -> Flow[bool]:
        return (yield set_estimate_call(self.session.batch_id(batch_id), estimated_at)) == "ok"

    # -- submitting

    def submit(self, batch: BatchHandle, request_id: Any, payload: Any, group: Any) -> Flow[str]:
        admitted = admit(self.session.settings, batch.pipeline, request_id, payload, group)
        return (yield from self.send(batch, [(request_id, payload, group)], [admitted]))[0]

    def submit_many(self, batch: BatchHandle, requests: Iterable[Any]) -> Flow[list[str]]:
        items = unpack_requests(requests)
        return (yield from self.send(batch, items, self.session.admit_many(batch.info, items)))

    def send(self, batch: BatchHandle, items: list[tuple[Any, Any, Any]], admitted: list,
             restoring: bool = False) -> Flow[list[str]]:
        """Send admitted requests `SUBMIT_CHUNK` at a time, the farm running one chunk while the next is encoded
        here (in order: a chunk goes once the one before it is answered). A refusal by the farm is raised once
        every request before it is in."""
        now, knobs = self.wall(), (yield from self.exchanges.knobs())
        kinds: list[str] = []
        errors: list[InvalidInput] = []
        in_flight = None
        for start in range(0, len(admitted), SUBMIT_CHUNK):
            calls = self.session.calls(batch.info, admitted[start:start + SUBMIT_CHUNK], now, knobs)
            if in_flight is not None:
                kinds += yield from self.settle(batch, items, in_flight, errors, restoring)
                if errors:
                    break
            in_flight = yield from self.dispatched(start, calls, start + SUBMIT_CHUNK < len(admitted))
        else:
            if in_flight is not None:
                kinds += yield from self.settle(batch, items, in_flight, errors, restoring)
        if errors:
            raise errors[0]
        return kinds

    def dispatched(self, start: int, calls: list[Call], soon: bool) -> Flow[InFlight]:
        """A chunk sent; `soon`: its answer read later, so the next chunk can be encoded meanwhile."""
        flight = InFlight(start, calls, self.session.one_trip(calls))
        if soon:
            try:
                flight.handle = yield Send(flight.trip)
                return flight
            except self.transient:
                pass  # sent again, riding through the outage, below
        flight.reply = yield flight.trip
        return flight

    def settle(self, batch: BatchHandle, items: list, flight: InFlight, errors: list,
               restoring: bool) -> Flow[list[str]]:
        """What a chunk's answer means: the requests it took, the tokens they need; a lost batch restored."""
        done, wakes, error = self.session.submitted_many(flight.calls, (yield from self.answer(flight)))
        if isinstance(error, BatchNotFound):
            if restoring:
                raise BatchLost(f"the farm lost batch {batch.id!r} again while it was being restored") from error
            yield from self.restore(batch)  # the farm lost the batch since this handle was made
            done, wakes, error = self.session.submitted_many(flight.calls, (yield flight.trip))
        for (request_id, payload, group), kind in zip(items[flight.start:flight.start + len(flight.calls)], done):
            if kind != "refused":
                batch.submitted.add(request_id, payload, group)
        for queue, count in wakes.items():
            yield from self.wake(queue, count)
        if error is not None:
            errors.append(error)
        return done

    def answer(self, flight: InFlight) -> Flow[Any]:
        """A chunk's answer; a lost connection sends the chunk again (its calls are idempotent)."""
        if flight.handle is None:
            return flight.reply
        try:
            return (yield flight)
        except self.transient:
            return (yield flight.trip)

    def restore(self, batch: BatchHandle) -> Flow[None]:
        """The farm lost this batch (its Redis restarted without persistence): open it again under the same id
        and submit again what this handle holds (request ids are idempotent, so nothing is doubled)."""
        held = batch.submitted.to_restore(batch.id)
        call, _ = self.session.open(batch.task, batch.pipeline.name, batch.size, batch.id, batch.group_size,
                                    self.wall())
        parse_open((yield call), batch.id, batch.task)
        try:
            yield from self.send(batch, held, self.session.admit_many(batch.info, held), restoring=True)
        except InvalidInput as exc:
            raise BatchLost(f"the farm lost batch {batch.id!r} and refused it again: {exc}") from exc

    # -- the farm's upkeep

    def wake(self, queue: str, count: int = 1) -> Flow[None]:
        knobs = yield from self.exchanges.knobs()
        yield Wake(queue, registry.stage_timeout(queue, knobs), count)

    def sweep(self) -> Flow[int]:
        """Give lapsed leases back to their queues (with fresh tokens); how many."""
        if not self.session.sweeps:
            return 0
        queues = yield from self.exchanges.sweep()
        if not self.session.lua_tokens:
            for queue in queues:
                yield from self.wake(queue)
        return len(queues)

    # -- results

    def waiting(self, batch: BatchHandle, timeout: float | None) -> "Waiting":
        return Waiting(self, batch, timeout)

    def completed(self, batch: BatchHandle, tracker: GroupTracker, result: Result
                  ) -> Flow[list[tuple[str, list[Result]]]]:
        """The groups `result` completes; without a group size, completeness needs the batch's arrivals."""
        if not tracker.add(result):
            return []
        arrived = None
        if tracker.needs_arrivals:
            keys = self.session.keys
            head, groups = yield Reads((Read(reads.progress, (keys, batch.id)), Read(reads.groups, (keys, batch.id))))
            arrived = arrivals(head.get("arrived"), groups, batch.size)
        return tracker.ready(arrived)


class Waiting:
    """A wait on a batch's results (`as_completed`), a round at a time: each round reads what has come and ends
    with those results, for the shell to hand out before the next round looks at the batch again: its end, then,
    every half lease or after an outage, the touch (restoring a batch the farm lost) and the sweep."""

    def __init__(self, flows: Flows, batch: BatchHandle, timeout: float | None) -> None:
        self.flows, self.batch = flows, batch
        self.reader = ResultReader(flows.session, batch.id, batch.size, timeout, flows.clock())
        self.outages = flows.outages
        self.over = False
        self._read = False

    def round(self) -> Flow[list[Result]]:
        flows, reader = self.flows, self.reader
        if self._read:
            if reader.ended:
                return self._end()
            if reader.sweep_due(flows.clock()) or flows.outages != self.outages:
                yield from self._upkeep()
        if reader.done:
            return self._end()
        read = reader.next_read(flows.clock())
        self._read = True
        keys, batch_id = flows.session.keys, self.batch.id
        return reader.feed((yield Read(reads.results_after, (keys, batch_id, read.after, read.count, read.block_ms))))

    def _upkeep(self) -> Flow[None]:
        flows = self.flows
        self.outages = flows.outages
        [touched] = yield from flows.exchanges.touch([self.batch.id])  # waiting is a sign of life (before the sweep)
        if touched.state == "unknown":
            yield from flows.restore(self.batch)
            self.reader.restart()
        yield from flows.sweep()
        self.reader.swept(flows.clock())

    def _end(self) -> list[Result]:
        self.over = True
        self.flows.let_go(self.batch.id)
        if self.reader.abandoned is not None:
            raise self.reader.abandoned
        return []
