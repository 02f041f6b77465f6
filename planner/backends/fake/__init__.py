"""An in-memory backend for the daemon's unit tests: the same contract as the real ones, no processes.

The `FakeWorld` plays the machine: it outlives a backend (a new `FakeBackend` on the same world is a
restarted daemon and re-adopts), keeps time with an injectable clock, and lets a test say which workers
are busy. A worker is `starting` for `ready_after_s`, then `running`; a retired worker that is busy stays
`stopping` until the test frees it (warm shutdown) or its stage timeout plus grace passes (killed); an
idle one is gone at the next observation. Worker-life events are kept in `world.events`, decoded. Its
capacity is the world's (`world.capacity`, set by a test), else what `max_resources` allow local workers.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from farm import events
from farm.config import Settings
from planner.backends import Backend, Worker, common
from planner.backends.capacity import LOCAL_SIZES, limited
from planner.backends.lifecycle import asked, now_stopping, state_of
from planner.policy.capacity import Capacity


@dataclass
class FakeProcess:
    name: str
    stage: str
    spawned_at: float
    busy: bool = False
    stopping_since: float | None = None
    kill_at: float | None = None
    exited_at: float | None = None  # set when it leaves; the backend reaps it on its next observation
    killed: bool = False


class FakeWorld:
    def __init__(self, clock: Callable[[], float] = time.time, ready_after_s: float = 0.0) -> None:
        self.clock = clock
        self.ready_after_s = float(ready_after_s)
        self.processes: dict[str, FakeProcess] = {}
        self.events: list[dict[str, Any]] = []
        self.lock = threading.RLock()
        self.capacity: Capacity | None = None  # what every backend on this world reports (None: its limits)

    def set_busy(self, name: str, busy: bool = True) -> None:
        """A busy worker holds a request; freeing a stopping one lets it leave (its request done)."""
        with self.lock:
            p = self.processes[name]
            p.busy = busy
            if not busy and p.stopping_since is not None and p.exited_at is None:
                p.exited_at = self.clock()

    def crash(self, name: str) -> None:
        """The worker dies on its own (kill -9, OOM): gone without being retired."""
        with self.lock:
            self.processes[name].exited_at = self.clock()

    def lives(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind]


class FakeBackend(Backend):
    kind = "fake"

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        world: FakeWorld | None = None,
        grace_s: float = common.DEFAULT_GRACE_S,
        timeout_for: Callable[[str], float] | None = None,
        max_resources: Mapping[str, float] | None = None,
    ) -> None:
        self.namespace = common.check_namespace(settings.namespace if settings else "farm")
        self.world = world or FakeWorld()
        self.max_resources = dict(max_resources or {})  # {"GPU": n, "CPU": n}, read as the local backend does
        self.grace_s = float(grace_s)
        self.timeout_for = common.timeout_lookup(timeout_for)

    def list(self, stage: str | None = None) -> list[Worker]:
        with self.world.lock:
            workers = self._observe()
        return [w for w in workers if stage is None or w.stage == stage]

    def spawn(self, stage: str, n: int, *, request_id: str | None = None) -> list[Worker]:
        names, _ = asked(self.namespace, stage, n, request_id, self.timeout_for)
        with self.world.lock:
            now = self.world.clock()
            for name in names:
                if name not in self.world.processes:
                    self.world.processes[name] = FakeProcess(name, stage, now)
                    self._emit("worker_spawned", worker=name, stage=stage, backend=self.kind, at=now)
            by_name = {w.name: w for w in self._observe()}
        return [by_name[x] for x in names if x in by_name]

    def retire(self, names: Iterable[str]) -> list[Worker]:
        wanted = list(dict.fromkeys(names))
        with self.world.lock:
            now = self.world.clock()
            for name in wanted:
                p = self.world.processes.get(name)
                if p is None or p.exited_at is not None or p.stopping_since is not None:
                    continue
                p.stopping_since = now
                p.kill_at = now + self.timeout_for(p.stage) + self.grace_s
                if not p.busy:
                    p.exited_at = now  # SIGTERM to an idle Celery worker: it leaves at once
            # retiring does not reap: like the real backends, the worker is seen stopping first
            workers = {p.name: self._worker(p, now) for p in self._mine()}
        return now_stopping(wanted, workers)

    def capacity(self) -> Capacity:
        with self.world.lock:
            return self.world.capacity or limited(LOCAL_SIZES, self.max_resources)

    def reconcile(self) -> list[Worker]:
        with self.world.lock:
            workers = self._observe()
            for w in workers:
                self._emit("worker_spawned", worker=w.name, stage=w.stage, backend=self.kind, at=w.spawned_at)
        return workers

    def _emit(self, kind: str, **fields: Any) -> None:
        events.encode(kind, **fields)  # the same contract check as the real stream
        self.world.events.append({"kind": kind, **fields})

    def _mine(self) -> list[FakeProcess]:
        """This farm's processes: a world may hold several namespaces, like one Docker engine."""
        return [p for p in self.world.processes.values() if p.name.startswith(self.namespace + ".")]

    def _observe(self) -> list[Worker]:
        now = self.world.clock()
        for p in self._mine():
            if p.exited_at is None and p.kill_at is not None and now >= p.kill_at:
                p.exited_at, p.killed = p.kill_at, True
            if p.exited_at is not None:
                del self.world.processes[p.name]
                self._emit("worker_retired", worker=p.name, stage=p.stage, at=p.exited_at)
        ordered = sorted(self._mine(), key=lambda p: (p.spawned_at, p.name))
        return [self._worker(p, now) for p in ordered]

    def _worker(self, p: FakeProcess, now: float) -> Worker:
        ready_at = p.spawned_at + self.world.ready_after_s
        state = state_of(stopping=p.stopping_since is not None, ready=now >= ready_at)
        return Worker(p.name, p.stage, state, p.spawned_at, self.kind, p.name,
                      ready_at if now >= ready_at else None, p.stopping_since)
