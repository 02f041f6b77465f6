"""The rules of a worker's life that every backend keeps, whatever runs its workers (processes, containers,
actors, or a test's fake world): what a spawn checks before it starts anything, how a worker's state
reads, which workers a retire answers with; and, for the real backends (`Observed`), that listing,
spawning and retiring end with an observation that reaps the gone and writes their lives, that a
reconcile announces every adopted worker again, and where retirements are kept when the backend's own
records cannot hold them (`Retirements`).
"""

from __future__ import annotations

import abc
import json
import logging
import threading
from typing import Any, Callable, Iterable, Mapping

from farm.config import Settings
from farm.protocol.keys import Keys
from planner.backends import Backend, Worker, WorkerState, common

log = logging.getLogger(__name__)


def asked(namespace: str, stage: str, n: int, request_id: str | None,
          timeout_for: Callable[[str], float]) -> tuple[list[str], float]:
    """The names of the workers a spawn asks for, and the stage's timeout, once the checks every backend
    makes before it starts anything have passed (`timeout_for` raises for a pipeline or stage not known)."""
    common.check_stage(stage)
    common.check_count(n)
    timeout_s = timeout_for(stage)
    return common.worker_names(namespace, stage, n, request_id), timeout_s


def state_of(*, stopping: bool, ready: bool, placed: bool = True) -> WorkerState:
    """Stopping once retired, whatever else holds; pending until placed on a machine; running once it
    announced itself ready; starting in between."""
    if stopping:
        return WorkerState.STOPPING
    if not placed:
        return WorkerState.PENDING
    return WorkerState.RUNNING if ready else WorkerState.STARTING


def now_stopping(wanted: Iterable[str], workers: Mapping[str, Worker]) -> list[Worker]:
    """What `retire` answers: of the workers asked for (in that order), those now stopping."""
    return [workers[n] for n in wanted if n in workers and workers[n].state is WorkerState.STOPPING]


class Retirements:
    """The workers retiring and when each may be killed (`<namespace>:<backend>:stopping`: name -> since,
    kill_at), kept in the farm's Redis where the backend's own records (container labels, actors) cannot
    say it, so a restarted daemon resumes the stops its predecessor began."""

    def __init__(self, client: Any, namespace: str, backend: str) -> None:
        self._client = client
        self.key = Keys(namespace).stopping(backend)

    def all(self) -> dict[str, dict[str, float]]:
        return {k.decode(): json.loads(v) for k, v in self._client.hgetall(self.key).items()}

    def mark(self, name: str, since: float, wait_s: float) -> None:
        self._client.hset(self.key, name, json.dumps({"since": since, "kill_at": since + wait_s}))

    def drop(self, name: str) -> None:
        self._client.hdel(self.key, name)

    def prune(self, marks: Mapping[str, Any], there: Iterable[str]) -> None:
        """Drop the marks of workers no longer there (gone while no backend watched)."""
        for name in set(marks) - set(there):
            self.drop(name)


class Observed(Backend):
    """A real backend: it observes its workers under `self._lock` (`_observe`: those there now, oldest
    first, reaping the gone) and writes the lives that closed after each observation. A subclass asks
    its workers to stop in `_retire` and may resume, in `_adopt`, what a previous daemon left half done."""

    def __init__(self, settings: Settings, *, grace_s: float, timeout_for: Callable[[str], float] | None) -> None:
        self.settings = settings
        self.namespace = common.check_namespace(settings.namespace)
        self.grace_s = float(grace_s)
        self.timeout_for = common.timeout_lookup(timeout_for)
        self._redis = common.redis_for(settings)
        self._lives = common.Lives(self._redis, self.namespace, self.kind)
        self._readiness = common.Readiness(self._redis, self.namespace)
        self._lock = threading.RLock()

    @abc.abstractmethod
    def _observe(self) -> list[Worker]:
        """The workers there now, oldest first; the gone ones are reaped (`_closed`). Under the lock."""

    @abc.abstractmethod
    def _retire(self, wanted: list[str]) -> None:
        """Ask each named worker that is there and not stopping yet to stop (warm). Under the lock."""

    def list(self, stage: str | None = None) -> list[Worker]:
        workers = list(self._observed().values())
        return [w for w in workers if stage is None or w.stage == stage]

    def retire(self, names: Iterable[str]) -> list[Worker]:
        wanted = list(dict.fromkeys(names))
        with self._lock:
            self._retire(wanted)
            return now_stopping(wanted, self._observed())

    def reconcile(self) -> list[Worker]:
        with self._lock:
            workers = self._observe()
            self._adopt(workers)
            self._lives.flush()
        if workers:
            log.info("%s backend adopted %d worker(s) of namespace %s", self.kind, len(workers), self.namespace)
        return workers

    def _asked(self, stage: str, n: int, request_id: str | None) -> tuple[list[str], float]:
        return asked(self.namespace, stage, n, request_id, self.timeout_for)

    def _observed(self) -> dict[str, Worker]:
        """Observe and write the lives that closed: the workers there, by name (oldest first)."""
        with self._lock:
            workers = {w.name: w for w in self._observe()}
            self._lives.flush()
        return workers

    def _adopt(self, workers: list[Worker]) -> None:
        """Announce the workers a reconcile found again: the recorder upserts by name."""
        for w in workers:
            self._lives.spawned(w.name, w.stage, w.spawned_at)

    def _closed(self, name: str, stage: str, at: float) -> None:
        """A worker is gone: its life closes at `at` (its lease lapses) and its readiness is forgotten."""
        self._lives.retired(name, stage, at)
        self._readiness.forget([name])
