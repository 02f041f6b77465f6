"""Read-only questions the planner daemon and the reports ask of the history, with design.md's metric definitions.

Windows are `[start, end)` in epoch seconds; `None` leaves a side open. A worker that still exists
counts up to `end` (or now when `end` is open).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping, Sequence

import numpy as np
from sqlalchemy import Engine, case, func, select

from farm import registry
from farm.knobs import Knobs
from farm.pipeline import UnknownPipeline
from farm.store.models import Batch, Decision, Request, RequestStage, Task, Worker


@dataclass(frozen=True, eq=False)
class CompletedBatch:
    """A finished batch as the planner reads history: `requests[i] = [r_i, s_i1, ..., s_iM]` in stage order."""

    id: str
    task: str
    size: int | None
    opened_at: float
    completed_at: float
    earliest_at: float | None  # T
    extra_delay_s: float | None  # d
    requests: np.ndarray  # (n, 1+M), the shape of planner.eval.trace.TraceBatch.requests


@dataclass(frozen=True)
class DelaySummary:
    """Extra delay d over the batches that completed in a window (zeros when none did)."""

    batches: int
    mean_s: float
    p95_s: float
    max_s: float


@dataclass(frozen=True)
class StageUsage:
    stage: str  # queue, "<pipeline>.<stage>"
    resource: str  # cpu | gpu | io, or "unknown" for a pipeline this process cannot load
    cost: float
    allocated_s: float  # integral of the workers that exist (starting, idle or busy)
    busy_s: float  # sum of s_ij run in the window, the physical floor

    @property
    def normalised(self) -> float:
        """allocated / busy (1.0 is perfect); inf when workers existed and did nothing."""
        if self.busy_s > 0:
            return self.allocated_s / self.busy_s
        return float("inf") if self.allocated_s > 0 else 1.0


@dataclass(frozen=True)
class WorkerLife:
    name: str
    stage: str
    backend: str | None
    spawned_at: float
    ready_at: float | None
    retired_at: float | None


@dataclass(frozen=True)
class ActiveBatch:
    """A batch opened and neither completed nor cancelled, as far as the store has recorded."""

    id: str
    task: str | None
    size: int | None
    opened_at: float | None
    arrived: int  # requests recorded as arrived
    done: int  # requests with a result
    estimated_at: float | None  # the planner's latest estimate T (the EBF key)


@dataclass(frozen=True)
class DecisionRecord:
    id: int
    at: float
    reason: str
    policy: str
    workers: Mapping[str, int]
    runtime_s: float
    estimates: Mapping[str, float]
    details: Mapping[str, Any] | None


# ---------------------------------------------------------------- previous batches


def _stage_order(engine: Engine, task: str, stages: Sequence[str] | None) -> list[str]:
    if stages is not None:
        return list(stages)

    with engine.connect() as conn:
        pipeline = conn.execute(select(Task.pipeline).where(Task.name == task)).scalar()
    if pipeline is None:
        raise KeyError(f"task {task!r} is not in the history store")
    return list(registry.get(pipeline).queues)


def _columns(stages: Sequence[str]) -> dict[str, int]:
    """Stage column by queue (`synthetic.compile`) and by bare name (`compile`): the store may hold either."""
    columns: dict[str, int] = {}
    for j, stage in enumerate(stages):
        columns[stage] = j
        columns.setdefault(stage.rpartition(".")[2], j)
    return columns


def completed_batches(
    engine: Engine,
    task: str,
    *,
    limit: int = 1,
    before: float | None = None,
    stages: Sequence[str] | None = None,
) -> list[CompletedBatch]:
    """The latest `limit` completed (not cancelled) batches of a task, newest first.

    `stages` fixes the column order (queues or bare names); by default it is the task's pipeline's
    stage order from `farm.registry`. `before` keeps batches completed strictly before that time.
    """
    order = _stage_order(engine, task, stages)
    columns = _columns(order)
    query = select(Batch).where(Batch.task == task, Batch.completed_at.is_not(None), Batch.cancelled_at.is_(None))
    if before is not None:
        query = query.where(Batch.completed_at < before)
    query = query.order_by(Batch.completed_at.desc(), Batch.id.desc()).limit(limit)
    out = []
    with engine.connect() as conn:
        for batch in conn.execute(query).all():
            start = batch.opened_at if batch.opened_at is not None else batch.first_arrival_at
            requests = conn.execute(
                select(Request.request_id, Request.arrived_at)
                .where(Request.batch_id == batch.id, Request.arrived_at.is_not(None))
                .order_by(Request.arrived_at, Request.request_id)
            ).all()
            row_of = {rid: i for i, (rid, _) in enumerate(requests)}
            matrix = np.zeros((len(requests), 1 + len(order)), dtype=np.float64)
            if requests:
                matrix[:, 0] = [max(0.0, arrived - (start if start is not None else arrived)) for _, arrived in requests]
            for rid, stage, started, finished in conn.execute(
                select(RequestStage.request_id, RequestStage.stage, RequestStage.started_at, RequestStage.finished_at)
                .where(RequestStage.batch_id == batch.id)
            ):
                i = row_of.get(rid)
                j = columns.get(stage, columns.get(stage.rpartition(".")[2]))
                if i is None or j is None or started is None or finished is None:
                    continue
                matrix[i, 1 + j] += max(0.0, finished - started)
            matrix.setflags(write=False)
            out.append(CompletedBatch(batch.id, task, batch.size, start if start is not None else batch.completed_at,
                                      batch.completed_at, batch.earliest_at, batch.extra_delay_s, matrix))
    return out


def previous_batch(engine: Engine, task: str, *, before: float | None = None,
                   stages: Sequence[str] | None = None) -> CompletedBatch | None:
    """The task's latest completed batch, or None for a task with no history yet."""
    found = completed_batches(engine, task, limit=1, before=before, stages=stages)
    return found[0] if found else None


# ---------------------------------------------------------------- accounting


def _window(start: float | None, end: float | None) -> tuple[float, float]:
    return (float("-inf") if start is None else start, time.time() if end is None else end)


def worker_lives(engine: Engine, start: float | None = None, end: float | None = None,
                 *, stage: str | None = None) -> list[WorkerLife]:
    """Worker lives that overlap the window, by spawn time."""
    lo, hi = _window(start, end)
    query = select(Worker).where(Worker.spawned_at < hi)
    if start is not None:
        query = query.where((Worker.retired_at.is_(None)) | (Worker.retired_at > lo))
    if stage is not None:
        query = query.where(Worker.stage == stage)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(Worker.spawned_at, Worker.id)).all()
    return [WorkerLife(w.name, w.stage, w.backend, w.spawned_at, w.ready_at, w.retired_at) for w in rows]


def allocated_seconds(engine: Engine, start: float | None = None, end: float | None = None) -> dict[str, float]:
    """Per stage, the integral over the window of the number of workers that exist (spawned, not retired)."""
    lo, hi = _window(start, end)
    out: dict[str, float] = {}
    for life in worker_lives(engine, start, end):
        until = hi if life.retired_at is None else min(hi, life.retired_at)
        out[life.stage] = out.get(life.stage, 0.0) + max(0.0, until - max(lo, life.spawned_at))
    return out


def busy_seconds(engine: Engine, start: float | None = None, end: float | None = None) -> dict[str, float]:
    """Per stage, the seconds requests ran there (sum of s_ij), clipped to the window."""
    lo, hi = _window(start, end)
    s, f = RequestStage.started_at, RequestStage.finished_at
    begin = case((s < lo, lo), else_=s) if start is not None else s
    clipped = case((f > hi, hi), else_=f) - begin
    query = (
        select(RequestStage.stage, func.sum(case((clipped > 0, clipped), else_=0.0)))
        .where(s.is_not(None), f.is_not(None), s < hi)
        .group_by(RequestStage.stage)
    )
    if start is not None:
        query = query.where(f > lo)
    with engine.connect() as conn:
        return {stage: float(total or 0.0) for stage, total in conn.execute(query)}


def stage_usage(engine: Engine, start: float | None = None, end: float | None = None, knobs=None) -> list[StageUsage]:
    """Allocated and busy seconds per stage, with its resource kind and cost (the knob's override first)."""
    allocated = allocated_seconds(engine, start, end)
    busy = busy_seconds(engine, start, end)
    out = []
    for stage in sorted(set(allocated) | set(busy)):
        resource, own = "unknown", SimpleNamespace(queue=stage, cost=1.0)  # a pipeline this process cannot load
        try:
            _, own = registry.stage_by_queue(stage)
            resource = own.resource
        except UnknownPipeline:
            pass
        cost = (knobs or Knobs()).cost_of(own)
        out.append(StageUsage(stage, resource, cost, allocated.get(stage, 0.0), busy.get(stage, 0.0)))
    return out


def resource_seconds(usage: Sequence[StageUsage]) -> dict[str, float]:
    """Allocated worker-seconds per resource kind (cpu-seconds, gpu-seconds, ...)."""
    out: dict[str, float] = {}
    for u in usage:
        out[u.resource] = out.get(u.resource, 0.0) + u.allocated_s
    return out


def consumption(usage: Sequence[StageUsage]) -> float:
    """Resource consumption: sum over stages of C_j x allocated_j."""
    return sum(u.cost * u.allocated_s for u in usage)


# ---------------------------------------------------------------- extra delays, active batches, decisions


def active_batches(engine: Engine) -> list[ActiveBatch]:
    """Batches in flight with their progress (arrived and done out of size), oldest first."""
    arrived = func.count(Request.arrived_at)
    done = func.count(Request.finished_at)
    query = (
        select(Batch.id, Batch.task, Batch.size, Batch.opened_at, arrived, done, Batch.estimated_at)
        .outerjoin(Request, Request.batch_id == Batch.id)
        .where(Batch.completed_at.is_(None), Batch.cancelled_at.is_(None))
        .group_by(Batch.id)
        .order_by(Batch.opened_at, Batch.id)
    )
    with engine.connect() as conn:
        return [ActiveBatch(*row) for row in conn.execute(query)]


def batch_delays(engine: Engine, start: float | None = None, end: float | None = None,
                 *, task: str | None = None) -> list[tuple[str, str | None, float]]:
    """(batch, task, d) of the batches completed in the window, by completion time."""
    query = select(Batch.id, Batch.task, Batch.extra_delay_s).where(Batch.extra_delay_s.is_not(None))
    if start is not None:
        query = query.where(Batch.completed_at >= start)
    if end is not None:
        query = query.where(Batch.completed_at < end)
    if task is not None:
        query = query.where(Batch.task == task)
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(query.order_by(Batch.completed_at, Batch.id))]


def extra_delays(engine: Engine, start: float | None = None, end: float | None = None,
                 *, task: str | None = None) -> DelaySummary:
    delays = np.array([d for _, _, d in batch_delays(engine, start, end, task=task)], dtype=np.float64)
    if delays.size == 0:
        return DelaySummary(0, 0.0, 0.0, 0.0)
    return DelaySummary(int(delays.size), float(delays.mean()), float(np.percentile(delays, 95)), float(delays.max()))


def decisions(engine: Engine, start: float | None = None, end: float | None = None) -> list[DecisionRecord]:
    query = select(Decision)
    if start is not None:
        query = query.where(Decision.at >= start)
    if end is not None:
        query = query.where(Decision.at < end)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(Decision.at, Decision.id)).all()
    return [DecisionRecord(d.id, d.at, d.reason, d.policy, d.workers, d.runtime_s, d.estimates, d.details) for d in rows]
