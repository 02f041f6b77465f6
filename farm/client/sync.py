"""The blocking trainer client: the I/O shell around `farm.client.core` on redis-py.

Admission runs here: a payload its pipeline rejects becomes an `invalid_input` result at once (it
still counts toward the batch); misuse that would break the batch's accounting raises (farm.errors).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

from farm import registry
from farm.celery_app import Tokens, make_app
from farm.client.core import BatchHandle, BatchInfo, GroupTracker, ResultReader, Session, arrivals
from farm.config import Settings, from_env
from farm.protocol.calls import cancel_call, check_batch_id, parse_open, set_estimate_call
from farm.protocol.dispatch import Dispatch
from farm.protocol.live import Progress
from farm.results import Result


class Batch(BatchHandle):
    """One rollout step's requests on the farm."""

    client: "RewardClient"

    def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        """Hand one response to the farm. Returns 'queued', 'finished' (it visits no stage, or its
        payload was refused: an invalid_input result) or 'duplicate' (same id and payload again: a no-op)."""
        c = self.client
        call = c.session.submit(self.info, request_id, payload, group, time.time(), c.dispatch.knobs())
        kind, wake = c.session.submitted(call, c.dispatch.run(call))
        if wake is not None:
            c.wake(wake)
        return kind

    def as_completed(self, timeout: float | None = None) -> Iterator[Result]:
        """Results as they finish (those already finished first); TimeoutError says how many are missing."""
        c = self.client
        reader = ResultReader(c.session, self.id, self.size, timeout, time.monotonic())
        while not reader.done:
            read = reader.next_read(time.monotonic())
            yield from reader.feed(c.dispatch.redis.xread({read.key: read.after}, count=read.count,
                                                          block=read.block_ms))
            if reader.ended:
                return
            if reader.sweep_due(time.monotonic()):
                c.sweep()
                reader.swept(time.monotonic())

    def gather(self, timeout: float | None = None) -> list[Result]:
        """Every result of the batch, in completion order (blocks; TimeoutError with how many are missing)."""
        return list(self.as_completed(timeout))

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
        pipe = self.client.dispatch.redis.pipeline(transaction=False)
        pipe.hget(keys.batch(self.id), "arrived")
        pipe.hgetall(keys.batch(self.id, ":groups"))
        return arrivals(*pipe.execute(), self.size)

    def cancel(self) -> str:
        """Drop pending requests and give every unfinished one a `cancelled` result (running stages are
        told to stop). Returns the batch's state: 'cancelled', or 'completed' when it was already done."""
        return self.client.dispatch.run(cancel_call(self.id, time.time()))

    def set_estimate(self, estimated_at: float) -> bool:
        return self.client.dispatch.run(set_estimate_call(self.id, estimated_at)) == "ok"

    def progress(self) -> Progress:
        return self.client.dispatch.progress(self.id)


class RewardClient:
    """A trainer's connection to the farm (thread-safe; one per process is enough)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or from_env()
        self.session = Session(self.settings)
        self.dispatch = Dispatch(self.settings)
        self.app = make_app(self.settings)
        self.tokens = Tokens(self.app, self.settings)

    def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                   group_size: int | None = None) -> Batch:
        """Open a batch: the hint that rollout started. Opening the same batch again attaches to it."""
        call, batch_id = self.session.open(task, pipeline, size, batch_id, group_size, time.time())
        parse_open(self.dispatch.run(call), batch_id, task)
        return self.batch(batch_id)

    def batch(self, batch_id: str) -> Batch:
        """Attach to an existing batch by id (BatchNotFound if there is none)."""
        return Batch(self, BatchInfo.of(self.dispatch.progress(check_batch_id(batch_id))))

    def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        return self.dispatch.set_estimate(batch_id, estimated_at)

    def wake(self, queue: str, count: int = 1) -> None:
        self.tokens.send(queue, registry.stage_timeout(queue, self.dispatch.knobs()), count)

    def sweep(self) -> int:
        """Give lapsed leases back to their queues (with fresh tokens); returns how many."""
        queues = self.dispatch.sweep()
        if not self.dispatch.lua_tokens:
            for queue in queues:
                self.wake(queue)
        return len(queues)

    def close(self) -> None:
        self.dispatch.close()
        self.app.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
