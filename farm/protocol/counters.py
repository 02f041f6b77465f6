"""Farm-wide counters kept in Redis, beside the state they count, so any process can expose them and a
restart of the process that counted loses nothing: lease recoveries (counted by the Lua sweep), the
planner's decision runtimes (a histogram) and overflows of the history stream (counted by the recorder).

One hash per namespace (`Keys.counters`); each field is `<what>|<label>`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from farm.protocol.keys import Keys, text

LEASE_RECOVERED = "lease_recovered|"  # + stage queue: leases given back after their worker stopped heartbeating
PREEMPTED = "preempted|"  # + stage queue: running requests stopped and put back for a reserving tenant (preempt.lua)
DECISION_BUCKET = "decision_bucket|"  # + upper bound: decisions whose runtime fell in (previous bound, bound]
DECISION_SUM = "decision_sum_s"
HISTORY_OVERFLOWS = "history_overflows"  # episodes of the stream's cap dropping entries not yet recorded
HISTORY_LOST_AT = "history_lost_at"  # when the last episode began
HISTORY_LOST = "history_lost"  # the ids it dropped: "(recorded offset, oldest entry kept)", both exclusive

# a decision takes milliseconds; a slow one (a large backlog, a loaded machine) a good part of a tick
DECISION_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, math.inf)


def _bound(value: float) -> str:
    return "+Inf" if math.isinf(value) else repr(value)


@dataclass(frozen=True)
class Counters:
    """What the hash holds, read at once."""

    lease_recovered: Mapping[str, int] = field(default_factory=dict)  # stage queue -> count
    preempted: Mapping[str, int] = field(default_factory=dict)  # stage queue -> count
    decision_buckets: tuple[tuple[str, int], ...] = ()  # (upper bound, cumulative count), Prometheus' order
    decision_sum_s: float = 0.0
    history_overflows: int = 0
    history_lost_at: float | None = None
    history_lost: str | None = None

    @property
    def decisions(self) -> int:
        return self.decision_buckets[-1][1] if self.decision_buckets else 0


def observe_decisions(redis: Any, namespace: str, runtimes_s: list[float]) -> None:
    """Count the runtimes of one epoch's decisions (one round trip; none: nothing sent)."""
    if not runtimes_s:
        return
    key = Keys(namespace).counters
    pipe = redis.pipeline(transaction=False)
    for runtime in runtimes_s:
        runtime = max(0.0, float(runtime))
        bound = next(b for b in DECISION_BOUNDS if runtime <= b)
        pipe.hincrby(key, DECISION_BUCKET + _bound(bound), 1)
        pipe.hincrbyfloat(key, DECISION_SUM, runtime)
    pipe.execute()


def record_overflow(redis: Any, namespace: str, *, at: float, lost_before: str | None,
                    lost_after: str | None) -> None:
    """Count one episode of the stream's cap dropping unrecorded entries (the recorder calls this when it
    first sees one), with when and which: entries after the recorder's offset and before the oldest kept."""
    key = Keys(namespace).counters
    span = f"({lost_after or 'unknown'}, {lost_before or 'unknown'})"
    pipe = redis.pipeline(transaction=True)
    pipe.hincrby(key, HISTORY_OVERFLOWS, 1)
    pipe.hset(key, mapping={HISTORY_LOST_AT: repr(float(at)), HISTORY_LOST: span})
    pipe.execute()


def read(redis: Any, namespace: str) -> Counters:
    raw = {text(k): text(v) for k, v in (redis.hgetall(Keys(namespace).counters) or {}).items()}
    recovered = {k[len(LEASE_RECOVERED):]: int(v) for k, v in raw.items() if k.startswith(LEASE_RECOVERED)}
    preempted = {k[len(PREEMPTED):]: int(v) for k, v in raw.items() if k.startswith(PREEMPTED)}
    per_bound = {k[len(DECISION_BUCKET):]: int(v) for k, v in raw.items() if k.startswith(DECISION_BUCKET)}
    buckets, total = [], 0
    for bound in DECISION_BOUNDS:
        total += per_bound.get(_bound(bound), 0)
        buckets.append((_bound(bound), total))
    return Counters(lease_recovered=recovered, preempted=preempted, decision_buckets=tuple(buckets),
                    decision_sum_s=float(raw.get(DECISION_SUM, 0.0)),
                    history_overflows=int(raw.get(HISTORY_OVERFLOWS, 0)),
                    history_lost_at=float(raw[HISTORY_LOST_AT]) if raw.get(HISTORY_LOST_AT) else None,
                    history_lost=raw.get(HISTORY_LOST) or None)
