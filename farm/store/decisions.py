"""The planner daemon's record of each decision: when, why, under which policy, what it chose, how long it took.

One `DecisionRecord` serves both ways: the daemon makes one per decision and the store keeps it
(`save_decision`), and the queries read them back (`farm.store.queries.decisions`) with their `id`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from sqlalchemy import Engine, insert

from farm.store.models import Decision


@dataclass(frozen=True)
class DecisionRecord:
    """One decision as the store keeps it (the `decisions` table's columns); `id` is None until stored."""

    at: float
    reason: str
    policy: str
    workers: Mapping[str, int]  # applied target, by stage queue
    runtime_s: float  # the policy's own time
    estimates: Mapping[str, float]  # batch id -> estimated completion time T
    details: Mapping[str, Any] | None = field(default_factory=dict)
    id: int | None = None


def record_decision(
    engine: Engine,
    *,
    at: float,
    reason: str,
    policy: str,
    workers: Mapping[str, int],
    runtime_s: float,
    estimates: Mapping[str, float],
    details: Mapping[str, Any] | None = None,
) -> int:
    """Store one decision and return its id.

    `workers`: pool size per stage queue; `estimates`: batch id -> the estimated completion time T the
    decision used (the EBF key); `details`: anything else worth keeping (JSON-serialisable).
    """
    for name, value in (("at", at), ("runtime_s", runtime_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, not {value!r}")
    if runtime_s < 0:
        raise ValueError(f"runtime_s must be >= 0, not {runtime_s!r}")
    pools = {str(q): int(n) for q, n in workers.items()}
    if any(n < 0 for n in pools.values()):
        raise ValueError(f"worker counts must be >= 0: {pools}")
    ts = {str(b): float(t) for b, t in estimates.items()}
    with engine.begin() as conn:
        return conn.execute(
            insert(Decision).values(at=float(at), reason=reason, policy=policy, workers=pools,
                                    runtime_s=float(runtime_s), estimates=ts,
                                    details=dict(details) if details is not None else None)
            .returning(Decision.id)
        ).scalar_one()


def save_decision(engine: Engine, record: DecisionRecord) -> int:
    """Store a daemon's record of a decision (its `id` is not used: the store gives one) and return the id."""
    return record_decision(engine, at=record.at, reason=record.reason, policy=record.policy, workers=record.workers,
                           runtime_s=record.runtime_s, estimates=record.estimates, details=record.details)
