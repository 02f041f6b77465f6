"""Read-only questions the planner daemon and the reports ask of the history: a task's previous batches,
the batches in flight, the extra delays (docs/design.md's d) and the decisions taken.

Windows are `[start, end)` in epoch seconds; `None` leaves a side open. The workers' accounting
(allocated and busy seconds, consumption) is `farm.store.accounting`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from sqlalchemy import Engine, func, select

from farm import registry
from farm.store.decisions import DecisionRecord
from farm.store.models import Batch, Decision, Request, RequestStage, Task


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
class InFlightBatch:
    """A batch opened and neither completed nor cancelled, as far as the store has recorded (the store's
    progress record; the policy's view of an active batch is `planner.policy.snapshot.ActiveBatch`)."""

    id: str
    task: str | None
    size: int | None
    opened_at: float | None
    arrived: int  # requests recorded as arrived
    done: int  # requests with a result
    estimated_at: float | None  # the planner's latest estimate T (the EBF key)


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


# ---------------------------------------------------------------- batches in flight, extra delays, decisions


def active_batches(engine: Engine) -> list[InFlightBatch]:
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
        return [InFlightBatch(*row) for row in conn.execute(query)]


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
    """Mean, p95 and max of d over the batches completed in the window (of one task, if given)."""
    delays = np.array([d for _, _, d in batch_delays(engine, start, end, task=task)], dtype=np.float64)
    if delays.size == 0:
        return DelaySummary(0, 0.0, 0.0, 0.0)
    return DelaySummary(int(delays.size), float(delays.mean()), float(np.percentile(delays, 95)), float(delays.max()))


def decisions(engine: Engine, start: float | None = None, end: float | None = None) -> list[DecisionRecord]:
    """The planner's decisions taken in the window, in order, each with its id."""
    query = select(Decision)
    if start is not None:
        query = query.where(Decision.at >= start)
    if end is not None:
        query = query.where(Decision.at < end)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(Decision.at, Decision.id)).all()
    return [DecisionRecord(d.at, d.reason, d.policy, d.workers, d.runtime_s, d.estimates, d.details, id=d.id)
            for d in rows]


def batch_labels(engine: Engine, batch_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """batch id -> (task, pipeline) for the batches the store knows (the metrics label by them)."""
    if not batch_ids:
        return {}
    with engine.connect() as conn:
        rows = conn.execute(select(Batch.id, Batch.task, Task.pipeline).join(Task, Task.name == Batch.task)
                            .where(Batch.id.in_(list(batch_ids))))
        return {b: (task, pipeline) for b, task, pipeline in rows}


def completed_delays(engine: Engine, batch_ids: Sequence[str]) -> dict[str, tuple[str, float]]:
    """batch id -> (task, extra delay d) of those of the batches that completed with a d."""
    if not batch_ids:
        return {}
    with engine.connect() as conn:
        rows = conn.execute(select(Batch.id, Batch.task, Batch.extra_delay_s)
                            .where(Batch.id.in_(list(batch_ids)), Batch.extra_delay_s.is_not(None)))
        return {b: (task, float(d)) for b, task, d in rows}
