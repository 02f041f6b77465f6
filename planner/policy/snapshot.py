"""What the policy sees (`Snapshot`) and what it answers (`Decision`): frozen data, no I/O.

One snapshot is one pipeline at one instant: its stages share their worker pools across every task that
uses the pipeline. The daemon builds it from the live farm, the replay from a trace; `decide()` is the
same function for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from planner.policy.capacity import UNBOUNDED, Capacity

# ActiveBatch.state codes of an arrived request
QUEUED, RUNNING, DONE = 0, 1, 2


@dataclass(frozen=True)
class StageState:
    """One stage of the pipeline and its pool right now (`workers` counts idle, busy and starting ones)."""

    name: str
    resource: str
    cost: float
    timeout_s: float
    queue: str  # "<pipeline>.<stage>": the key of the stage's knobs
    workers: int = 0
    starting: int = 0  # of `workers`, those not ready yet (ready at the latest `startup_s` from now)

    def __post_init__(self) -> None:
        if not (self.cost > 0 and math.isfinite(self.cost)):
            raise ValueError(f"stage {self.name!r}: cost must be a positive number, not {self.cost!r}")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(f"stage {self.name!r}: timeout_s must be a positive number, not {self.timeout_s!r}")
        if self.workers < 0 or not 0 <= self.starting <= self.workers:
            raise ValueError(f"stage {self.name!r}: need 0 <= starting <= workers, got {self.starting}, {self.workers}")


def _frozen(a, dtype) -> np.ndarray:
    out = np.array(a, dtype=dtype, copy=True).reshape(-1)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class ActiveBatch:
    """A batch that is open and not complete, with its arrived requests as parallel arrays.

    Per arrived request: `arrival` (r_i, offset from `start_s`), `stage` (index of its current stage; any
    value when done), `state` (QUEUED, RUNNING or DONE) and `since` (absolute time it entered that
    stage's queue, started running there, or finished). `size - len(arrival)` requests are still to come.
    `oracle` is for the evaluation's `ideal` policy only: the actual `[r_i, s_i1..s_iM]` of all `size`
    requests, the arrived ones first and in the same order as the arrays. `served` (optional, one row of
    M per arrived request) is the time each spent at every stage it has finished; 0 where it has not
    been (yet, or ever): what a cold pipeline learns from before any batch completes.
    """

    id: str
    task: str
    start_s: float
    size: int
    key: float = math.nan  # the EBF key the live queues use now (nan: none yet)
    arrival: np.ndarray = field(default_factory=lambda: np.zeros(0))
    stage: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    state: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    since: np.ndarray = field(default_factory=lambda: np.zeros(0))
    oracle: np.ndarray | None = None
    served: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name, dtype in (("arrival", np.float64), ("stage", np.int64), ("state", np.int8), ("since", np.float64)):
            object.__setattr__(self, name, _frozen(getattr(self, name), dtype))
        n = len(self.arrival)
        if not (len(self.stage) == len(self.state) == len(self.since) == n):
            raise ValueError(f"batch {self.id!r}: arrival, stage, state and since must have the same length")
        if n > self.size:
            raise ValueError(f"batch {self.id!r}: {n} requests arrived but the batch has only {self.size}")
        if n and not np.isin(self.state, (QUEUED, RUNNING, DONE)).all():
            raise ValueError(f"batch {self.id!r}: state must be QUEUED (0), RUNNING (1) or DONE (2)")
        if self.served is not None:
            served = np.array(self.served, dtype=np.float64, copy=True)
            if served.ndim != 2 or served.shape[0] != n or not (served >= 0).all():
                raise ValueError(f"batch {self.id!r}: served must be one row of times >= 0 per arrived request")
            served.setflags(write=False)
            object.__setattr__(self, "served", served)
        if self.oracle is not None:
            oracle = np.array(self.oracle, dtype=np.float64, copy=True)
            if oracle.ndim != 2 or oracle.shape[0] != self.size:
                raise ValueError(f"batch {self.id!r}: oracle must be a (size, 1+M) array")
            oracle.setflags(write=False)
            object.__setattr__(self, "oracle", oracle)

    @property
    def outstanding(self) -> int:
        """Requests still to come: the batch size is known, whatever history says."""
        return self.size - len(self.arrival)


@dataclass(frozen=True)
class Need:
    """What one decision found each stage needs, before it was steadied against the ones before it."""

    at: float
    workers: Mapping[str, int]


@dataclass(frozen=True)
class Snapshot:
    """One pipeline at `now`: its stages (in pipeline order), active batches, and per-task history."""

    now: float
    pipeline: str
    stages: tuple[StageState, ...]
    batches: tuple[ActiveBatch, ...] = ()
    # task -> its latest completed batch, [r_i, s_i1..s_iM] per request (the paper's R and S)
    history: Mapping[str, np.ndarray] = field(default_factory=dict)
    startup_s: float = 0.0  # how long a new worker takes to be ready (the backend's cold start)
    # the policy's own latest needs for this pipeline (`Decision.need`), oldest first, as the caller kept them
    recent: tuple[Need, ...] = ()
    # the workers of each resource kind this pipeline may have (the daemon's share of the cluster)
    capacity: Capacity = UNBOUNDED

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a snapshot needs at least one stage")
        width = 1 + len(self.stages)
        for task, h in self.history.items():
            if np.ndim(h) != 2 or np.shape(h)[1] != width:
                raise ValueError(f"history of task {task!r} must be an (n, {width}) array of [r_i, s_i1..s_iM]")
        for b in self.batches:
            if b.oracle is not None and b.oracle.shape[1] != width:
                raise ValueError(f"batch {b.id!r}: oracle rows must have {width} numbers")
            if b.served is not None and b.served.shape[1] != width - 1:
                raise ValueError(f"batch {b.id!r}: served rows must have one time per stage ({width - 1})")
        if self.startup_s < 0:
            raise ValueError("startup_s must be >= 0")

    @property
    def timeouts(self) -> np.ndarray:
        return np.array([s.timeout_s for s in self.stages], dtype=np.float64)


@dataclass(frozen=True)
class Binding:
    """A stage that wants more workers than its resource kind's capacity holds (`Decision.binding`).

    `wanted` is the most workers the stage's plan has without the capacity (within the knobs' min and
    max), `held` the most it has within it; the delays are the extra delay C - T the planner now
    expects of the active batches with the held pools (mean and max over batches, from the simulation;
    None where the policy does not simulate), against the knobs' D (`delay_s`).
    """

    queue: str
    resource: str
    wanted: int
    held: int
    delay_mean_s: float | None
    delay_max_s: float | None
    delay_s: float

    @property
    def short(self) -> int:
        """The workers the capacity lacks."""
        return self.wanted - self.held


@dataclass(frozen=True)
class Decision:
    """Workers per stage queue (clamped to the knobs), the new EBF key T per active batch, and why.

    `dedicated` is set only by `zq-dedicated`: task -> queue -> workers of that task's own pools
    (`workers` is then their sum). `need` is what this decision alone found (estimating policies only):
    the caller keeps the latest few and passes them back as `Snapshot.recent`. `binding` names the stages
    the capacity (`Snapshot.capacity`) holds below what they want; empty when it binds nowhere.
    """

    workers: Mapping[str, int]
    estimates: Mapping[str, float]
    reason: str
    dedicated: Mapping[str, Mapping[str, int]] | None = None
    need: Need | None = None
    binding: tuple[Binding, ...] = ()


def from_now(snapshot: Snapshot) -> Snapshot:
    """The same snapshot with every instant in seconds from `now` (`now` 0): the policy's arithmetic then
    resolves what it compares. At an epoch's magnitude (1.8e9 s) a float resolves only 2.4e-7 s, far
    coarser than the policy's tolerances (1e-9 s), and a live farm on a compressed clock (the replay's,
    requests of milliseconds) decided otherwise than the same farm in trace time (issue 36: 11 workers
    where 9 do). Durations (arrivals, served, history, start-up, timeouts) are left as they are."""
    origin = snapshot.now
    batches = tuple(replace(b, start_s=b.start_s - origin, key=b.key - origin, since=b.since - origin)
                    for b in snapshot.batches)
    recent = tuple(Need(r.at - origin, r.workers) for r in snapshot.recent)
    return replace(snapshot, now=0.0, batches=batches, recent=recent)


def at_origin(decision: Decision, origin: float) -> Decision:
    """A decision made on `from_now`'s snapshot with its instants (keys, the need's time) back at `origin`."""
    need = None if decision.need is None else Need(decision.need.at + origin, decision.need.workers)
    return replace(decision, estimates={b: t + origin for b, t in decision.estimates.items()}, need=need)
