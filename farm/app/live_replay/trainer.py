"""The replayed trainers: one thread per task, opening its batches and submitting their requests on time.

Each has its own client, as separate trainers would, and counts every result it reads per request, so a
lost or duplicated result shows in the report instead of passing unnoticed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import redis

from farm.app.live_replay.plan import PIPELINE, due_together, gather_timeout, payload, schedule
from farm.protocol.scope import Scope
from planner.eval.trace import Trace, TraceBatch


@dataclass
class TaskOutcome:
    """What one trainer saw: its batches' ids, results per request id (a duplicate would show here)."""

    task: str
    batch_ids: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # batch id -> B
    results: dict[tuple[str, str], int] = field(default_factory=dict)  # (batch id, request id) -> times seen
    statuses: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.results.values() if n > 1)


class Trainer(threading.Thread):
    """One task's trainer: opens its batches and submits their requests on the compressed clock."""

    RETRIES = 5  # readings of a batch's results restarted after a broken connection

    def __init__(self, client: Any, trace: Trace, task: str, speed: float, t0: float,
                 on_result: Callable[[str], None], pipeline: str = PIPELINE,
                 tenants: Mapping[str, int] | None = None) -> None:
        """`tenants`: the farm's id of each tenant the trace names (`plan.tenant_ids`)."""
        super().__init__(name=f"trainer-{task}", daemon=True)
        self.client, self.trace, self.task, self.speed, self.t0 = client, trace, task, speed, t0
        self.on_result, self.pipeline, self.tenants = on_result, pipeline, dict(tenants or {})
        self.outcome = TaskOutcome(task)
        self._gatherers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            batches: dict[int, Any] = {}
            events = schedule(self.trace, self.task, self.speed)
            i = 0
            while i < len(events):
                event = events[i]
                delay = self.t0 + event.at - time.time()
                if delay > 0:
                    time.sleep(delay)
                if event.index < 0:
                    handle = self.client.open_batch(self.task, self.pipeline, event.batch.size,
                                                    self.batch_id(event.batch))
                    batches[event.batch.batch] = handle
                    self.outcome.batch_ids.append(str(handle.id))
                    self.outcome.sizes[str(handle.id)] = event.batch.size
                    gatherer = threading.Thread(target=self._gather, args=(handle, event.batch), daemon=True)
                    gatherer.start()
                    self._gatherers.append(gatherer)
                    i += 1
                    continue
                due = due_together(events, i, time.time() - self.t0)
                batches[event.batch.batch].submit_many(
                    [(str(e.index), payload(e.batch.requests[e.index], self.speed)) for e in due])
                i += len(due)
            for gatherer in self._gatherers:
                gatherer.join()
        except Exception as exc:  # reported, never swallowed: the replay fails with it
            self.outcome.error = f"{type(exc).__name__}: {exc}"

    def batch_id(self, batch: TraceBatch) -> str | None:
        """A tenant's batch is opened under its names, `t<id>:` and a fresh id, as its gateway would (the task
        stays the trace's: the planner's history per task is then `farm eval`'s); None: a fresh farm id."""
        tenant = self.tenants.get(batch.tenant) if batch.tenant is not None else None
        return None if tenant is None else Scope(tenant).batch(None)

    def _gather(self, handle: Any, batch: TraceBatch) -> None:
        # A broken connection restarts the reading from the batch's first result: results already
        # counted are skipped, and a request seen twice *within one reading* is a real duplicate.
        deadline = time.monotonic() + gather_timeout(batch, self.speed)
        counted: dict[tuple[str, str], int] = {}
        for attempt in range(self.RETRIES + 1):
            this_pass: dict[tuple[str, str], int] = {}
            try:
                for result in handle.as_completed(timeout=max(1.0, deadline - time.monotonic())):
                    key = (str(result.batch_id), str(result.request_id))
                    this_pass[key] = this_pass.get(key, 0) + 1
                    if this_pass[key] <= counted.get(key, 0):
                        continue  # read again after a reconnect
                    counted[key] = this_pass[key]
                    status = getattr(result.status, "value", str(result.status))
                    with self._lock:
                        self.outcome.results[key] = counted[key]
                        self.outcome.statuses[status] = self.outcome.statuses.get(status, 0) + 1
                    self.on_result(self.task)
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if attempt == self.RETRIES or time.monotonic() > deadline:
                    self._fail(handle, exc)
                    return
            except Exception as exc:
                self._fail(handle, exc)
                return

    def _fail(self, handle: Any, exc: BaseException) -> None:
        with self._lock:
            self.outcome.error = self.outcome.error or f"batch {handle.id}: {type(exc).__name__}: {exc}"
