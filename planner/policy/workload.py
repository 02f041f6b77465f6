"""The estimated requests one decision simulates (Algorithm 2's output), as parallel numpy arrays.

Every request enters the simulation at `arrival` and then visits, in order, the stages whose time is
> 0. A request already queued keeps its real queue time as `arrival` (so the simulation orders it as the
live queue does) and cannot start before `now`; a running request holds a worker at its first visited
stage from `now` for its remaining time there. Times before a request's current stage are 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _ro(a, dtype, ndim) -> np.ndarray:
    out = np.array(a, dtype=dtype, copy=True)
    if out.ndim != ndim:
        raise ValueError(f"expected a {ndim}-d array, got shape {out.shape}")
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Workload:
    now: float
    arrival: np.ndarray  # (n,) when it enters its first visited stage's queue
    times: np.ndarray  # (n, M) remaining running time per stage, 0 = not visited
    running: np.ndarray  # (n,) bool: running at its first visited stage at `now`
    batch: np.ndarray  # (n,) index into keys and deadlines
    keys: np.ndarray  # (nb,) EBF key per batch (its estimated completion time)
    deadlines: np.ndarray  # (nb,) T per batch: the earliest completion the constraint is judged against
    timeouts: np.ndarray  # (M,) T_j
    workers: np.ndarray  # (M,) workers that exist now (idle, busy or starting)
    starting: np.ndarray  # (M,) of those, not ready yet
    startup_s: float = 0.0
    # With an autoscaler (`planner.policy.capacity`): per stage, the pool size up to which a new worker is
    # ready `startup_s` after now; one beyond waits for a new node first, `node_startup_s` more. None: no such limit.
    placeable: np.ndarray | None = None
    node_startup_s: float = 0.0

    def __post_init__(self) -> None:
        for name, dtype, ndim in (
            ("arrival", np.float64, 1), ("times", np.float64, 2), ("running", bool, 1), ("batch", np.int64, 1),
            ("keys", np.float64, 1), ("deadlines", np.float64, 1), ("timeouts", np.float64, 1),
            ("workers", np.int64, 1), ("starting", np.int64, 1),
        ):
            object.__setattr__(self, name, _ro(getattr(self, name), dtype, ndim))
        if self.placeable is not None:
            object.__setattr__(self, "placeable", _ro(self.placeable, np.int64, 1))
        n, m = self.times.shape
        if not (len(self.arrival) == len(self.running) == len(self.batch) == n):
            raise ValueError("arrival, times, running and batch must describe the same requests")
        if not (len(self.timeouts) == len(self.workers) == len(self.starting) == m):
            raise ValueError("timeouts, workers and starting need one value per stage")
        if self.placeable is not None and len(self.placeable) != m:
            raise ValueError("placeable needs one value per stage")
        if len(self.keys) != len(self.deadlines):
            raise ValueError("keys and deadlines need one value per batch")
        if n and (self.batch.min() < 0 or self.batch.max() >= len(self.keys)):
            raise ValueError("a request names a batch that has no key")
        if (self.times < 0).any():
            raise ValueError("stage times must be >= 0")
        if self.running.any() and not (self.times[self.running] > 0).any(axis=1).all():
            raise ValueError("a running request must have time left at some stage")

    @property
    def size(self) -> int:
        return int(self.times.shape[0])

    @property
    def stages(self) -> int:
        return int(self.times.shape[1])

    def first_stage(self) -> np.ndarray:
        """Index of each request's first visited stage; M for a request that visits none. One pass per
        stage, latest first (a reduction along the short stage axis costs several times more)."""
        first = np.full(self.size, self.stages, dtype=np.int64)
        for k in range(self.stages - 1, -1, -1):
            first[self.times[:, k] > 0] = k
        return first


def single_stage(arrival, times, timeout_s: float, *, batch=None, keys=None, deadlines=None, now: float = 0.0) -> Workload:
    """A one-stage workload from plain lists (tests, Figure 9); T defaults to Eq. 1-2 per batch."""
    arrival = np.asarray(arrival, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64).reshape(-1, 1)
    batch = np.zeros(len(arrival), dtype=np.int64) if batch is None else np.asarray(batch, dtype=np.int64)
    nb = int(batch.max()) + 1 if len(batch) else 1
    t = np.full(nb, -np.inf)
    np.maximum.at(t, batch, np.maximum(arrival, now) + times[:, 0])
    deadlines = t if deadlines is None else np.asarray(deadlines, dtype=np.float64)
    return Workload(
        now=now, arrival=arrival, times=times, running=np.zeros(len(arrival), dtype=bool), batch=batch,
        keys=deadlines if keys is None else keys, deadlines=deadlines, timeouts=[timeout_s], workers=[0],
        starting=[0],
    )
