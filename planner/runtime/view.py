"""One pipeline at a decision epoch: what the daemon reads of it (a `PipelineView`, the policy's snapshot
plus what applying a decision needs) and what it takes from the policy's decision for it (the workers per
stage queue, raised to the operator's floor for cold batches, and the completion times T for EBF).

`planner.runtime.live.LiveFarm` builds the views from Redis and the history store; the tests build them by
hand, and check each rule here on a hand-made decision, apart from the daemon's I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from farm.knobs import Knobs
from farm.protocol.heartbeat import Bound, KindCapacity
from planner.policy.capacity import Capacity


@dataclass(frozen=True)
class PipelineView:
    """One pipeline of the live farm as the policy needs it, plus what applying a decision needs."""

    pipeline: str
    stages: tuple[str, ...]  # stage queues "<pipeline>.<stage>", in pipeline order
    snapshot: Any  # the policy's Snapshot
    batch_sizes: Mapping[str, int] = field(default_factory=dict)  # active batch id -> B
    cold: tuple[str, ...] = ()  # active batches with no history anywhere in their pipeline
    busy: Mapping[str, float] = field(default_factory=dict)  # worker name -> when its request started
    # workers per kind the tenants with open batches could use at most: the sum of their caps, for a kind
    # each of them caps (farm.protocol.shares.caps_bound); the planner asks for no more
    caps: Mapping[str, int] = field(default_factory=dict)


class LiveView(Protocol):
    def read(self, now: float, knobs: Knobs, workers: Sequence[Any]) -> Sequence[PipelineView]:
        """One view per pipeline to decide for; `workers` are the backend's (the pools)."""


def decision_workers(decision: Any, stages: Sequence[str]) -> dict[str, int]:
    """The policy's workers per stage queue (`planner.policy.snapshot.Decision.workers`), every stage present."""
    missing = [q for q in stages if q not in decision.workers]
    if missing:
        raise ValueError(f"the decision names no workers for stage {', '.join(missing)}: {dict(decision.workers)}")
    return {q: int(decision.workers[q]) for q in stages}


def decision_estimates(decision: Any) -> dict[str, float]:
    """Each batch's estimated completion time T, the finite ones (the EBF keys to write)."""
    return {str(b): float(t) for b, t in decision.estimates.items() if t is not None and math.isfinite(t)}


def decision_binding(decision: Any) -> dict[str, Bound]:
    """The stages the capacity holds below their want (`planner.policy.snapshot.Decision.binding`), by queue."""
    return {b.queue: Bound(b.resource, int(b.wanted), int(b.held), b.delay_mean_s, b.delay_max_s, float(b.delay_s))
            for b in getattr(decision, "binding", ()) or ()}


def capacity_report(capacity: Capacity) -> dict[str, KindCapacity]:
    """Per bounded kind, what is placeable now and at most (an unbounded kind is absent)."""
    return {kind: KindCapacity(capacity.placeable.get(kind, 0), most) for kind, most in sorted(capacity.most.items())}


def cold_floor(view: PipelineView, knobs: Knobs, cold_workers: int) -> dict[str, int]:
    """The operator's floor for cold batches: `cold_workers` per stage, within max_workers and the batch size."""
    if not view.cold or cold_workers <= 0:
        return {}
    size = max(view.batch_sizes.get(b, 1) for b in view.cold)
    return {q: min(cold_workers, size, knobs.stage(q).max_workers) for q in view.stages}
