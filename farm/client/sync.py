"""The blocking trainer client: the I/O shell around `farm.client.core` on redis-py.

Admission runs here: a payload its pipeline rejects becomes an `invalid_input` result at once (it
still counts toward the batch); misuse that would break the batch's accounting raises (farm.errors).
A broker outage is ridden through for `Settings.reconnect_s`; a batch the farm lost is restored.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, Iterator, TypeVar

import redis as redis_lib

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
from farm.protocol.calls import (
    Admitted,
    admit,
    cancel_call,
    parse_open,
    parse_seal,
    seal_call,
    set_estimate_call,
)
from farm.protocol.dispatch import Dispatch, Pending
from farm.protocol.live import Progress
from farm.protocol.scripts import Call
from farm.results import Result

log = logging.getLogger(__name__)
T = TypeVar("T")


class Batch(BatchHandle):
    """One rollout step's requests on the farm. As a context manager it cancels the batch when the block
    raises, so a trainer that fails mid-step leaves no requests queued behind it."""

    client: "RewardClient"

    def __init__(self, client: "RewardClient", info: BatchInfo) -> None:
        super().__init__(client, info)
        self.submitted = Submitted()

    def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        """Hand one response to the farm. Returns 'queued', 'finished' (it visits no stage, or its
        payload was refused: an invalid_input result) or 'duplicate' (same id and payload again: a no-op)."""
        c = self.client
        return self._send([(request_id, payload, group)],
                          [admit(c.settings, self.pipeline, request_id, payload, group)])[0]

    def submit_many(self, requests: Iterable[Any]) -> list[str]:
        """Hand many responses to the farm, `SUBMIT_CHUNK` per round trip: `(id, payload)` or
        `(id, payload, group)` tuples (or mappings); returns their kinds, as `submit`, in order. A malformed
        request refuses the call before anything is sent; a refusal by the farm (batch full, closed...)
        is raised once every request before it is queued."""
        items = unpack_requests(requests)
        return self._send(items, self.client.session.admit_many(self.info, items))

    def _send(self, items: list[tuple[Any, Any, Any]], admitted: list[Admitted], restoring: bool = False) -> list[str]:
        """Send admitted requests chunk by chunk, the farm running one chunk while the next is encoded here
        (in order: a chunk goes once the one before it is answered)."""
        c = self.client
        now, knobs = time.time(), c.call(c.dispatch.knobs)
        kinds: list[str] = []
        errors: list[InvalidInput] = []
        in_flight = None
        for start in range(0, len(admitted), SUBMIT_CHUNK):
            calls = c.session.calls(self.info, admitted[start:start + SUBMIT_CHUNK], now, knobs)
            if in_flight is not None:
                kinds += self._settle(items, *in_flight, errors, restoring)
                if errors:
                    break
            trip = c.session.one_trip(calls)
            in_flight = (start, calls, trip, c.send(trip, soon=start + SUBMIT_CHUNK < len(admitted)))
        else:
            if in_flight is not None:
                kinds += self._settle(items, *in_flight, errors, restoring)
        if errors:
            raise errors[0]
        return kinds

    def _settle(self, items, start: int, calls: list, trip: Call, sent: "Pending | list", errors: list,
                restoring: bool) -> list[str]:
        c = self.client
        done, wakes, error = c.session.submitted_many(calls, c.answer(trip, sent))
        if isinstance(error, BatchNotFound):
            if restoring:
                raise BatchLost(f"the farm lost batch {self.id!r} again while it was being restored") from error
            self._restore()  # the farm lost the batch since this handle was made
            done, wakes, error = c.session.submitted_many(calls, c.send(trip))
        for (request_id, payload, group), kind in zip(items[start:start + len(calls)], done):
            if kind != "refused":
                self.submitted.add(request_id, payload, group)
        for queue, count in wakes.items():
            c.wake(queue, count)
        if error is not None:
            errors.append(error)
        return done

    def as_completed(self, timeout: float | None = None) -> Iterator[Result]:
        """Results as they finish (those already finished first); TimeoutError says how many are missing."""
        c = self.client
        reader = ResultReader(c.session, self.id, self.size, timeout, time.monotonic())
        outages = c.outages
        while not reader.done:
            read = reader.next_read(time.monotonic())
            yield from reader.feed(c.call(c.dispatch.redis.xread, {read.key: read.after}, count=read.count,
                                          block=read.block_ms))
            if reader.ended:
                c.let_go(self.id)
                if reader.abandoned is not None:
                    raise reader.abandoned
                return
            if reader.sweep_due(time.monotonic()) or c.outages != outages:
                outages = c.outages
                [touched] = c.call(c.dispatch.touch, [self.id])  # waiting is a sign of life (before the sweep)
                if touched.state == "unknown":
                    self._restore()
                    reader.restart()
                c.sweep()
                reader.swept(time.monotonic())
        c.let_go(self.id)

    def gather(self, timeout: float | None = None) -> list[Result]:
        """Every result of the batch in submission order (requests submitted by other handles follow in
        completion order); blocks; TimeoutError says how many are missing."""
        return self.submitted.ordered(list(self.as_completed(timeout)))

    def results_by_id(self, timeout: float | None = None) -> dict[str, Result]:
        """Every result of the batch, by request id."""
        return {r.request_id: r for r in self.as_completed(timeout)}

    def completed_groups(self, timeout: float | None = None,
                         on_group_done: Callable[[str, list[Result]], None] | None = None
                         ) -> Iterator[tuple[str, list[Result]]]:
        """(group, results) as each group completes; a group completes at `group_size` results, or, when
        the batch was opened without one, once every request has arrived and the group's are all done."""
        tracker = GroupTracker(self.group_size, on_group_done)
        for result in self.as_completed(timeout):
            if tracker.add(result):
                yield from tracker.emit(tracker.ready(self._arrivals() if tracker.needs_arrivals else None))
        yield from tracker.emit(tracker.rest())

    def _arrivals(self) -> dict[str, int] | None:
        keys = self.client.session.keys

        def read():
            pipe = self.client.dispatch.redis.pipeline(transaction=False)
            pipe.hget(keys.batch(self.id), "arrived")
            pipe.hgetall(keys.batch(self.id, ":groups"))
            return pipe.execute()
        return arrivals(*self.client.call(read), self.size)

    def _restore(self) -> None:
        """The farm lost this batch (its Redis restarted without persistence): open it again under the same
        id and submit again what this handle holds (request ids are idempotent, so nothing is doubled)."""
        c = self.client
        held = self.submitted.to_restore(self.id)
        call, _ = c.session.open(self.task, self.pipeline.name, self.size, self.id, self.group_size, time.time())
        parse_open(c.call(c.dispatch.run, call), self.id, self.task)
        try:
            self._send(held, c.session.admit_many(self.info, held), restoring=True)
        except InvalidInput as exc:
            raise refused_again(self.id, exc) from exc

    def heartbeat(self) -> str:
        """A sign of life from this batch's trainer. The farm abandons a batch whose trainer is silent (no submit,
        result wait or heartbeat) for the knob `abandon_after_s`; the client's keep-alive sends these while this
        process lives (unless the client was made with `keep_alive=False`). Returns the batch's state;
        BatchAbandoned once the farm abandoned it."""
        [touched] = self.client.call(self.client.dispatch.touch, [self.id])
        if touched.state == "unknown":  # the farm lost it: open it again with what this handle holds
            self._restore()
            return "open"
        return touched.state_or_raise()

    def cancel(self) -> str:
        """Drop pending requests and give every unfinished one a `cancelled` result (running stages are
        told to stop). Returns the batch's state: 'cancelled', 'completed' when it was already done, or
        'abandoned' when the farm had ended it (its trainer silent too long)."""
        self.client.let_go(self.id)
        return self.client.call(self.client.dispatch.run, cancel_call(self.id, time.time()))

    def seal(self) -> str:
        """Take no more requests: the batch's size becomes what has arrived, for a window that closes by time
        rather than by size. Returns 'sealed' (finishing those), 'completed', or 'cancelled' when none had."""
        return parse_seal(self.client.call(self.client.dispatch.run, seal_call(self.id, time.time())), self.id)

    def set_estimate(self, estimated_at: float) -> bool:
        return self.client.call(self.client.dispatch.run, set_estimate_call(self.id, estimated_at)) == "ok"

    def progress(self) -> Progress:
        return self.client.call(self.client.dispatch.progress, self.id)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            cancel_quietly(self, exc)


def cancel_quietly(batch: Batch, exc: BaseException | None) -> None:
    """Cancel a batch whose trainer failed, never hiding the failure behind the cancel's own trouble."""
    try:
        state = batch.cancel()
    except FarmError as err:
        log_cancel(batch.id, exc, None, err)
    else:
        log_cancel(batch.id, exc, state, None)


class RewardClient:
    """A trainer's connection to the farm (thread-safe; one per process is enough). Names the farm by
    `settings`, or the environment's (FARM_REDIS_URL, or an embedded farm found through FARM_DATA_DIR), with
    `redis_url`/`namespace` overriding either; refuses to start when no farm is named. While the client is open
    it keeps the batches it opened or attached to alive (`farm.client.keepalive`); `keep_alive=False` leaves
    that to submits, result waits and `Batch.heartbeat()`."""

    def __init__(self, settings: Settings | None = None, *, redis_url: str | None = None,
                 broker_url: str | None = None, namespace: str | None = None, keep_alive: bool = True) -> None:
        self.settings = client_settings(settings, redis_url=redis_url, broker_url=broker_url, namespace=namespace)
        self.session = Session(self.settings)
        pool = redis_lib.BlockingConnectionPool.from_url(self.settings.redis_url, decode_responses=True,
                                                         max_connections=POOL_SIZE, timeout=POOL_WAIT_S)
        self.dispatch = Dispatch(self.settings, redis=redis_lib.Redis(connection_pool=pool))
        self.app = make_app(self.settings)
        self.tokens = Tokens(self.app, self.settings)
        self.outages = 0  # outages ridden through: a reader checks its batch survived each one
        self.keep_alive = KeepAlive(self.dispatch.touch, self.dispatch.knobs) if keep_alive else None

    def send(self, call: Call, soon: bool = False) -> "list | Pending":
        """Run a script call; `soon`: send it now and read the answer later (`Pending`), so the caller can
        prepare the next call meanwhile."""
        if soon:
            try:
                return self.dispatch.send(call)
            except TRANSIENT:
                pass  # sent again, riding through the outage, below
        return self.call(self.dispatch.run, call)

    def answer(self, call: Call, sent: "list | Pending"):
        """The answer to `send(call, soon=True)`; a lost connection sends the call again (it is idempotent)."""
        if not isinstance(sent, Pending):
            return sent
        try:
            return sent.result()
        except TRANSIENT:
            return self.call(self.dispatch.run, call)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one exchange with the farm, riding through a broker outage of up to `reconnect_s`."""
        outage = None
        while True:
            try:
                out = fn(*args, **kwargs)
            except TRANSIENT as exc:
                outage = outage or Outage(self.settings, time.monotonic())
                delay = outage.next_delay(time.monotonic())
                if delay is None:
                    raise outage.unavailable(exc) from exc
                log.warning("the farm's Redis did not answer (%s); trying again in %.2f s", exc, delay)
                time.sleep(delay)
                continue
            if outage is not None:
                self.outages += 1
            return out

    def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                   group_size: int | None = None) -> Batch:
        """Open a batch: the hint that rollout started. Opening the same batch again attaches to it."""
        call, batch_id = self.session.open(task, pipeline, size, batch_id, group_size, time.time())
        parse_open(self.call(self.dispatch.run, call), batch_id, task)
        return self.batch(batch_id)

    def batch(self, batch_id: str) -> Batch:
        """Attach to an existing batch by id (BatchNotFound if there is none)."""
        progress = self.call(self.dispatch.progress, self.session.batch_id(batch_id))
        if self.keep_alive is not None and not progress.finished:
            self.keep_alive.hold(progress.batch_id)
        return Batch(self, BatchInfo.of(progress))

    def let_go(self, batch_id: str) -> None:
        """Keep a batch alive no longer (it ended, or its trainer is done with it)."""
        if self.keep_alive is not None:
            self.keep_alive.release(batch_id)

    def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        return self.call(self.dispatch.set_estimate, self.session.batch_id(batch_id), estimated_at)

    def wake(self, queue: str, count: int = 1) -> None:
        self.call(self.tokens.send, queue, registry.stage_timeout(queue, self.call(self.dispatch.knobs)), count)

    def sweep(self) -> int:
        """Give lapsed leases back to their queues (with fresh tokens); returns how many."""
        if not self.session.sweeps:
            return 0
        queues = self.call(self.dispatch.sweep)
        if not self.dispatch.lua_tokens:
            for queue in queues:
                self.wake(queue)
        return len(queues)

    def close(self) -> None:
        if self.keep_alive is not None:
            self.keep_alive.close()
        self.dispatch.close()
        self.app.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
