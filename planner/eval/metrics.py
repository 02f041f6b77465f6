"""The evaluation's metrics, with docs/design.md's definitions (the same in simulation, live replay and reports).

- extra delay of a batch: d = C - T, C when its last request finished its last stage, T = Eq. 1-2 on
  its actual r_i, s_ij; mean, p95 and max over batches.
- allocated worker-seconds per stage: the integral of the workers that exist (starting, idle, busy);
  per resource kind too; resource consumption = sum_j C_j x allocated_j.
- busy worker-seconds per stage: sum_i s_ij; normalised = allocated / busy (1.0 is perfect).
- planner runtime per decision, with the number of requests it estimated.
- on a fixed-size cluster (`farm eval --capacity`): the capacity, and the decisions it held below what
  they wanted (reported only then, so a replay without one prints what it always did).
- with some tenant's share reserved: the running requests stopped per stage for a reserving tenant (preemption;
  reported only then, as the live farm's `preempted` counters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.policy.capacity import UNBOUNDED, Capacity


@dataclass(frozen=True, eq=False)
class EvalResult:
    """What one evaluation of a trace measured, per batch and per stage; `summary()` is what `farm eval` prints."""

    policy: str
    scheduler: str
    delay_s: float
    startup_s: float  # the start-up's median (the constant one, without jitter)
    stage_names: tuple[str, ...]
    resources: tuple[str, ...]
    costs: tuple[float, ...]
    batch_ids: tuple[str, ...]
    tasks: tuple[str, ...]
    earliest: np.ndarray  # T per batch
    completed: np.ndarray  # C per batch
    requests: int
    allocated_s: np.ndarray  # per stage
    busy_s: np.ndarray  # per stage
    timeline: tuple[tuple[float, tuple[int, ...]], ...]  # (time, workers per stage) at every change
    decisions: np.ndarray  # (d, 3): time, runtime s, estimated requests
    end_s: float
    startup: str = ""  # the start-up as `farm eval --startup-s` writes it (a distribution's spec)
    capacity: Capacity = UNBOUNDED  # the fixed-size cluster replayed on
    bound: int = 0  # decisions that the capacity held below what they wanted
    tenants: tuple[str, ...] = ()  # per batch, its tenant (fair shares; '-' for none)
    preempted: tuple[int, ...] | None = None  # per stage, requests stopped for a reserving tenant (None: none reserves)

    @classmethod
    def build(cls, trace, knobs, startup, batches, alloc, busy_s, timeline, decisions, end,
              capacity: Capacity = UNBOUNDED, bound: int = 0,
              preempted: tuple[int, ...] | None = None) -> "EvalResult":
        return cls(
            policy=knobs.policy, scheduler=knobs.scheduler, delay_s=knobs.delay_s,
            startup_s=startup.quantile(0.5), startup=startup.describe(),
            stage_names=tuple(s.name for s in trace.stages), resources=tuple(s.resource for s in trace.stages),
            costs=tuple(s.cost for s in trace.stages), batch_ids=tuple(b.id for b in batches),
            tasks=tuple(b.tb.task for b in batches), tenants=tuple(b.tb.tenant or "-" for b in batches),
            earliest=np.array([b.earliest for b in batches]), completed=np.array([b.completed_at for b in batches]),
            requests=sum(b.size for b in batches), allocated_s=np.asarray(alloc, dtype=np.float64),
            busy_s=np.asarray(busy_s, dtype=np.float64), timeline=tuple(timeline),
            decisions=np.array(decisions, dtype=np.float64).reshape(-1, 3), end_s=float(end),
            capacity=capacity, bound=bound, preempted=preempted,
        )

    @property
    def extra_delay(self) -> np.ndarray:
        # C >= T in exact arithmetic; clip float noise of a few ulps
        return np.maximum(self.completed - self.earliest, 0.0)

    @property
    def normalized(self) -> np.ndarray:
        return np.divide(self.allocated_s, self.busy_s, out=np.full(len(self.busy_s), np.nan), where=self.busy_s > 0)

    def resource_seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, a in zip(self.resources, self.allocated_s):
            out[kind] = out.get(kind, 0.0) + float(a)
        return out

    def summary(self) -> dict[str, Any]:
        d = self.extra_delay
        runtime = self.decisions[:, 1] if len(self.decisions) else np.zeros(1)
        norm = self.normalized
        out = {
            "policy": self.policy,
            "scheduler": self.scheduler,
            "delay_s": self.delay_s,
            "startup_s": self.startup_s,
            "startup": self.startup,
            "batches": len(self.batch_ids),
            "requests": self.requests,
            "extra_delay_mean_s": float(d.mean()),
            "extra_delay_p95_s": float(np.percentile(d, 95)),
            "extra_delay_max_s": float(d.max()),
            "stages": {
                name: {"resource": kind, "allocated_s": float(a), "busy_s": float(b),
                       "normalized": None if np.isnan(x) else float(x)}
                for name, kind, a, b, x in zip(self.stage_names, self.resources, self.allocated_s, self.busy_s, norm)
            },
            "resources": self.resource_seconds(),
            "cost": float(np.dot(self.costs, self.allocated_s)),
            "decisions": int(len(self.decisions)),
            "planner_runtime_mean_s": float(runtime.mean()),
            "planner_runtime_max_s": float(runtime.max()),
            "duration_s": self.end_s,
        }
        if not self.capacity.unbounded:
            out["capacity"] = dict(self.capacity.most)
            out["capacity_bound_decisions"] = self.bound
        if self.preempted is not None:
            out["preempted"] = dict(zip(self.stage_names, self.preempted))
        if len(set(self.tenants)) > 1:  # reported only then, so a trace of one tenant prints what it always did
            out["tenants"] = self.by_tenant()
        return out

    def by_tenant(self) -> dict[str, dict[str, float]]:
        """Each tenant's batches and their extra delay (mean and max), as `farm status` shows a live farm's."""
        d, tenants = self.extra_delay, np.asarray(self.tenants)
        return {t: {"batches": int((tenants == t).sum()), "extra_delay_mean_s": float(d[tenants == t].mean()),
                    "extra_delay_max_s": float(d[tenants == t].max())} for t in sorted(set(self.tenants))}
