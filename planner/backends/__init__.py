"""Backends: where stage workers live (local processes, Docker containers, Ray actors across a cluster).

One small interface (this module), one package per backend (`local/`, `docker/`, `ray/`, and `fake/` for
the daemon's tests), and the rules of a worker's life they all keep in one place (`lifecycle`, beside
`common`). The daemon owns the policy and asks a backend only four things: which workers exist (`list`),
to start some for a stage (`spawn`), to let given ones go (`retire`), and how many of each resource kind
it can run (`capacity`, every epoch). Assumptions every backend states and every caller must live with:

- Eventually consistent. `list` reports what the backend last observed; a worker just spawned may be
  `pending` (a cluster has no room for it yet) or `starting` for seconds, a retired one `stopping` until
  its current request is done. Observing reaps: a worker found gone is dropped from the list and its
  `worker_retired` event is emitted then.
- Idempotent. `spawn(stage, n, request_id=...)` with a request id already used while those workers
  exist starts nothing new; `retire` of a worker already stopping or gone is a no-op.
- Warm shutdown. Retiring sends SIGTERM (a Celery worker finishes its current request, then exits);
  a worker is killed only after the stage's timeout plus a grace period, never before - except one that
  never became ready, which holds no request and may be killed soon after (local: `STARTING_KILL_S`).
- Restart safe. A fresh backend on the same namespace re-adopts what a previous one spawned
  (`reconcile`, from labels or process records): no orphans, no duplicates.
- Worker lives are history: `worker_spawned` (and again for each worker adopted by `reconcile`) and
  `worker_retired` go to the namespace's event stream at least once; the recorder upserts by worker name.
  The worker itself emits `worker_ready`, which turns `starting` into `running`.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Iterable

from planner.policy.capacity import Capacity

class WorkerState(str, Enum):
    PENDING = "pending"  # asked for, waiting for a machine with room (a cluster's scheduler or autoscaler)
    STARTING = "starting"  # spawned, not yet taking requests
    RUNNING = "running"  # consuming its stage's queue
    STOPPING = "stopping"  # asked to leave; finishing its current request


@dataclass(frozen=True)
class Worker:
    """One stage worker as a backend sees it."""

    name: str  # unique in the farm; the worker's Celery name and the history's worker id
    stage: str  # the stage's queue, "<pipeline>.<stage>"
    state: WorkerState
    spawned_at: float  # epoch seconds
    backend: str  # "local", "docker", "fake", ...
    ref: str = ""  # the backend's own handle: a pid, a container id, a pod name
    ready_at: float | None = None
    stopping_since: float | None = None
    node: str = ""  # the machine it runs on, where the backend spans several ("" where it does not say)

    @property
    def alive(self) -> bool:
        """Counts toward the pool (pending, starting or running); a stopping worker no longer does.

        A pending worker counts so that a pool waiting for room is not asked for again and again."""
        return self.state is not WorkerState.STOPPING


class BackendError(RuntimeError):
    """The backend could not do what was asked; the message says what and why."""


class Backend(abc.ABC):
    """The interface the planner daemon drives. Implementations are thread-safe."""

    kind: ClassVar[str]

    @abc.abstractmethod
    def list(self, stage: str | None = None) -> list[Worker]:
        """The workers of this farm (namespace) that exist now, optionally of one stage, oldest first."""

    @abc.abstractmethod
    def spawn(self, stage: str, n: int, *, request_id: str | None = None) -> list[Worker]:
        """Start `n` workers for `stage`; returns the workers of this request (new or already there).

        With a `request_id`, the workers' names derive from it, so a retried call starts nothing twice."""

    @abc.abstractmethod
    def retire(self, names: Iterable[str]) -> list[Worker]:
        """Warm-shut-down the named workers; returns those now stopping. Unknown or gone names are skipped."""

    @abc.abstractmethod
    def capacity(self) -> Capacity:
        """Workers of each resource kind ("cpu", "gpu", "io") it can run now and at most, this farm's own
        placed workers included (planner.backends.capacity converts resources; FARM_MAX_GPUS / FARM_MAX_CPUS
        bound every backend). A kind absent is one it sees no limit for."""

    def unplaceable(self, stages: Iterable[str]) -> set[str]:
        """Of `stages`, those whose workers no node could ever hold (what the stage asks for exceeds every
        node there and every node the cluster may add). A backend that cannot tell names none."""
        return set()

    def reconcile(self) -> list[Worker]:
        """Adopt what a previous daemon left running and reap what died meanwhile; call once on start."""
        return self.list()

    def shutdown(self) -> list[Worker]:
        """Retire every worker of this farm (warm); returns those now stopping."""
        return self.retire(w.name for w in self.list())

    def close(self) -> None:
        """Release the backend's own resources; workers keep running (a later backend re-adopts them)."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# kind -> "module:class"; imported on use so the local backend does not pay for the docker SDK
KINDS = {
    "local": "planner.backends.local:LocalBackend",
    "docker": "planner.backends.docker:DockerBackend",
    "fake": "planner.backends.fake:FakeBackend",
    "ray": "planner.backends.ray:RayBackend",
}


# How long a new worker takes to take requests, per backend, until the workers' own lives show it
# (planner.runtime.live reads the observed median and plans with the longer of the two); the policy starts
# workers this much ahead of need. local: a worker forked by the launcher is ready in 0.2-0.6 s on an
# idle 2-core machine, a burst of 24 in 1.5-2.5 s (bench/fidelity.py's runs); docker: a container start;
# ray: an actor's worker process on a warm node, then `farm worker` exec'd (1-1.6 s on a warm local cluster).
STARTUP_S = {"local": 1.0, "docker": 5.0, "ray": 2.0, "fake": 0.0}


def create(kind: str, settings: Any, **options: Any) -> Backend:
    """A backend by name, e.g. `create("docker", settings, image="reward-farm-worker:0.1")`."""
    target = KINDS.get(kind)
    if target is None:
        raise ValueError(f"unknown backend {kind!r}; known: {', '.join(sorted(KINDS))}")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)(settings, **options)


__all__ = ["Backend", "BackendError", "Capacity", "KINDS", "STARTUP_S", "Worker", "WorkerState", "create"]
