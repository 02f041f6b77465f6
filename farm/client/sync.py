"""The blocking trainer client: the I/O shell that runs `farm.client.flows` on redis-py.

Admission runs at the client: a payload its pipeline rejects becomes an `invalid_input` result at once (it
still counts toward the batch); misuse that would break the batch's accounting raises (farm.errors).
A broker outage is ridden through for `Settings.reconnect_s`; a batch the farm lost is restored.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable, Iterable, Iterator, TypeVar

import redis as redis_lib

from farm.celery_app import Tokens, make_app
from farm.client.core import POOL_SIZE, POOL_WAIT_S, BatchHandle, GroupTracker, Session, client_settings
from farm.client.flows import Exchange, Flows, InFlight, Riding, Send, Sleep, Wake
from farm.client.keepalive import KeepAlive
from farm.client.transient import TRANSIENT
from farm.config import Settings
from farm.protocol.dispatch import Dispatch
from farm.protocol.flow import Flow, once, run
from farm.protocol.live import Progress
from farm.protocol.scripts import Call
from farm.results import Result

T = TypeVar("T")


class Batch(BatchHandle):
    """One rollout step's requests on the farm. As a context manager it cancels the batch when the block
    raises, so a trainer that fails mid-step leaves no requests queued behind it."""

    client: "RewardClient"

    def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        """Hand one response to the farm. Returns 'queued', 'finished' (it visits no stage, or its
        payload was refused: an invalid_input result) or 'duplicate' (same id and payload again: a no-op)."""
        return self.client._drive(self.flows.submit(self, request_id, payload, group))

    def submit_many(self, requests: Iterable[Any]) -> list[str]:
        """Hand many responses to the farm, `SUBMIT_CHUNK` per round trip: `(id, payload)` or
        `(id, payload, group)` tuples (or mappings); returns their kinds, as `submit`, in order. A malformed
        request refuses the call before anything is sent; a refusal by the farm (batch full, closed...)
        is raised once every request before it is queued."""
        return self.client._drive(self.flows.submit_many(self, requests))

    def as_completed(self, timeout: float | None = None) -> Iterator[Result]:
        """Results as they finish (those already finished first); TimeoutError says how many are missing."""
        waiting = self.flows.waiting(self, timeout)
        while not waiting.over:
            yield from self.client._drive(waiting.round())

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
            yield from tracker.emit(self.client._drive(self.flows.completed(self, tracker, result)))
        yield from tracker.emit(tracker.rest())

    def heartbeat(self) -> str:
        """A sign of life from this batch's trainer. The farm abandons a batch whose trainer is silent (no submit,
        result wait or heartbeat) for the knob `abandon_after_s`; the client's keep-alive sends these while this
        process lives (unless the client was made with `keep_alive=False`). Returns the batch's state;
        BatchAbandoned once the farm abandoned it."""
        return self.client._drive(self.flows.heartbeat(self))

    def cancel(self) -> str:
        """Drop pending requests and give every unfinished one a `cancelled` result (running stages are
        told to stop). Returns the batch's state: 'cancelled', 'completed' when it was already done, or
        'abandoned' when the farm had ended it (its trainer silent too long)."""
        return self.client._drive(self.flows.cancel(self))

    def seal(self) -> str:
        """Take no more requests: the batch's size becomes what has arrived, for a window that closes by time
        rather than by size. Returns 'sealed' (finishing those), 'completed', or 'cancelled' when none had."""
        return self.client._drive(self.flows.seal(self))

    def set_estimate(self, estimated_at: float) -> bool:
        return self.client._drive(self.flows.set_estimate(self.id, estimated_at))

    def progress(self) -> Progress:
        return self.client._drive(self.flows.progress(self.id))

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.client._drive(self.flows.cancel_quietly(self, exc))


class RewardClient:
    """A trainer's connection to the farm (thread-safe; one per process is enough). Names the farm by
    `settings`, or the environment's (FARM_REDIS_URL, or an embedded farm found through FARM_DATA_DIR), with
    `redis_url`/`namespace` overriding either; refuses to start when no farm is named. While the client is open
    it keeps the batches it opened or attached to alive (`farm.client.keepalive`); `keep_alive=False` leaves
    that to submits, result waits and `Batch.heartbeat()`."""

    def __init__(self, settings: Settings | None = None, *, redis_url: str | None = None,
                 broker_url: str | None = None, namespace: str | None = None, keep_alive: bool = True) -> None:
        self.settings = client_settings(settings, redis_url=redis_url, broker_url=broker_url, namespace=namespace)
        pool = redis_lib.BlockingConnectionPool.from_url(self.settings.redis_url, decode_responses=True,
                                                         max_connections=POOL_SIZE, timeout=POOL_WAIT_S)
        self.dispatch = Dispatch(self.settings, redis=redis_lib.Redis(connection_pool=pool))
        self.keep_alive = KeepAlive(self.dispatch.touch, self.dispatch.knobs) if keep_alive else None
        self.session = Session(self.settings)
        # the flows share the dispatch's knobs cache with the keep-alive
        self.flows = Flows(self.session, self.dispatch.exchanges, TRANSIENT, self.keep_alive)
        self.app = make_app(self.settings)
        self.tokens = Tokens(self.app, self.settings)

    @property
    def outages(self) -> int:
        """Outages ridden through: a reader checks its batch survived each one."""
        return self.flows.outages

    def _drive(self, flow: Flow[T]) -> T:
        """Run a flow here, riding through a broker outage of up to `reconnect_s`."""
        return run(Riding(flow, self.flows), self._do)

    def _do(self, op: Any) -> Any:
        kind = type(op)
        if kind is Call:
            return self.dispatch.run(op)
        if kind is Send:
            return self.dispatch.send(op.call)
        if kind is InFlight:
            return op.handle.result()
        if kind is Wake:
            return self.tokens.send(op.queue, op.timeout, op.count)
        if kind is Sleep:
            return time.sleep(op)
        if kind is Exchange:
            return op.fn()
        return self.dispatch.do(op)  # a read of farm state

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one exchange with the farm, riding through a broker outage of up to `reconnect_s`."""
        return self._drive(once(Exchange(partial(fn, *args, **kwargs))))

    def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                   group_size: int | None = None) -> Batch:
        """Open a batch: the hint that rollout started. Opening the same batch again attaches to it."""
        return Batch(self, self._drive(self.flows.open(task, pipeline, size, batch_id, group_size)))

    def batch(self, batch_id: str) -> Batch:
        """Attach to an existing batch by id (BatchNotFound if there is none)."""
        return Batch(self, self._drive(self.flows.attach(batch_id)))

    def let_go(self, batch_id: str) -> None:
        """Keep a batch alive no longer (it ended, or its trainer is done with it)."""
        self.flows.let_go(batch_id)

    def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        return self._drive(self.flows.set_estimate(batch_id, estimated_at))

    def wake(self, queue: str, count: int = 1) -> None:
        self._drive(self.flows.wake(queue, count))

    def sweep(self) -> int:
        """Give lapsed leases back to their queues (with fresh tokens); returns how many."""
        return self._drive(self.flows.sweep())

    def close(self) -> None:
        if self.keep_alive is not None:
            self.keep_alive.close()
        self.dispatch.close()
        self.app.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
