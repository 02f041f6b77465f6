"""Accounting of the farm's workers from the history: their lives, the seconds they were allocated and
busy per stage, and what that cost per resource kind, with docs/design.md's definitions.

Windows are `[start, end)` in epoch seconds; `None` leaves a side open. A worker that still exists
counts up to `end` (or now when `end` is open).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Sequence

from sqlalchemy import Engine, case, func, select

from farm import registry
from farm.knobs import Knobs
from farm.pipeline import UnknownPipeline
from farm.store.models import Request, RequestStage, Worker


@dataclass(frozen=True)
class WorkerLife:
    """One worker from its spawn to its retirement (None: it still exists), as the recorder wrote it."""

    name: str
    stage: str
    backend: str | None
    spawned_at: float
    ready_at: float | None
    retired_at: float | None
    placed_at: float | None = None  # None: pending all its life (a cluster with no room), never allocated


@dataclass(frozen=True)
class StageUsage:
    """One stage's allocated and busy worker-seconds over a window, with its resource kind and cost."""

    stage: str  # queue, "<pipeline>.<stage>"
    resource: str  # cpu | gpu | io, or "unknown" for a pipeline this process cannot load
    cost: float
    allocated_s: float  # integral of the workers placed on a machine (starting, idle or busy; not pending)
    busy_s: float  # sum of s_ij run in the window, the physical floor

    @property
    def normalised(self) -> float:
        """allocated / busy (1.0 is perfect); inf when workers existed and did nothing."""
        if self.busy_s > 0:
            return self.allocated_s / self.busy_s
        return float("inf") if self.allocated_s > 0 else 1.0


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
    return [WorkerLife(w.name, w.stage, w.backend, w.spawned_at, w.ready_at, w.retired_at, w.placed_at) for w in rows]


def allocated_seconds(engine: Engine, start: float | None = None, end: float | None = None) -> dict[str, float]:
    """Per stage, the integral over the window of the number of workers that hold a machine's resources
    (placed, not retired): a worker pending for room costs nothing until it is placed."""
    lo, hi = _window(start, end)
    out: dict[str, float] = {}
    for life in worker_lives(engine, start, end):
        until = hi if life.retired_at is None else min(hi, life.retired_at)
        since = life.placed_at
        out[life.stage] = out.get(life.stage, 0.0) + (0.0 if since is None else max(0.0, until - max(lo, since)))
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


def stage_usage(engine: Engine, start: float | None = None, end: float | None = None,
                knobs: Knobs | None = None) -> list[StageUsage]:
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


def allocated_totals(engine: Engine, now: float) -> dict[str, float]:
    """Per stage, the worker-seconds allocated from the first life up to `now`, in one aggregate (the metrics
    scrape it: a counter, never decreasing while lives are kept). As `allocated_seconds`, from placement."""
    until = func.coalesce(func.least(Worker.retired_at, now), now) if engine.dialect.name == "postgresql" \
        else func.coalesce(func.min(Worker.retired_at, now), now)
    span = until - Worker.placed_at
    query = (select(Worker.stage, func.sum(case((span > 0, span), else_=0.0)))
             .where(Worker.placed_at.is_not(None)).group_by(Worker.stage))
    with engine.connect() as conn:
        return {stage: float(total or 0.0) for stage, total in conn.execute(query)}


@dataclass(frozen=True)
class TenantUsage:
    """One tenant's share of one resource kind over a window: the worker-seconds allocated to the stages its
    batches ran at, split between tenants by the seconds each ran there, and those seconds (sum of s_ij: the
    physical floor). What zero queueing would have held for the same batches: farm.app.cost."""

    tenant: str  # `t<id>`, or `-` for batches opened directly on the farm
    resource: str
    allocated_s: float
    busy_s: float


def tenant_usage(engine: Engine, start: float, end: float, knobs: Knobs | None = None) -> list[TenantUsage]:
    """Per tenant and resource kind, over `[start, end)` (three queries: the farm page reads it through farm.app.cost)."""
    from farm.protocol.scope import batch_tenant

    lo, hi = _window(start, end)
    s, f = RequestStage.started_at, RequestStage.finished_at
    clipped = case((f > hi, hi), else_=f) - case((s < lo, lo), else_=s)
    query = (select(RequestStage.batch_id, RequestStage.stage, func.sum(case((clipped > 0, clipped), else_=0.0)))
             .where(s.is_not(None), f.is_not(None), s < hi, f > lo)
             .group_by(RequestStage.batch_id, RequestStage.stage))
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    busy: dict[tuple[str, str], float] = {}  # (stage, tenant) -> seconds run
    for batch_id, stage, seconds in rows:
        key = (stage, batch_tenant(batch_id))
        busy[key] = busy.get(key, 0.0) + float(seconds or 0.0)
    stages = {u.stage: u for u in stage_usage(engine, start, end, knobs)}
    out: dict[tuple[str, str], list[float]] = {}
    for (stage, tenant), seconds in busy.items():
        usage = stages.get(stage)
        if usage is None or usage.busy_s <= 0:
            continue
        share = usage.allocated_s * seconds / usage.busy_s
        cell = out.setdefault((tenant, usage.resource), [0.0, 0.0])
        cell[0] += share
        cell[1] += seconds
    return [TenantUsage(t, r, a, b) for (t, r), (a, b) in sorted(out.items())]


@dataclass(frozen=True)
class StageRun:
    """One request's finished run at one stage, with the request's arrival (None: its event is missing)."""

    batch_id: str
    request_id: str
    stage: str
    arrived_at: float | None
    queued_at: float | None
    started_at: float
    finished_at: float


def stage_runs(engine: Engine, start: float, end: float) -> list[StageRun]:
    """Every finished stage run, whenever it ran, of the batches that had a request at a stage (queued or
    running) during `[start, end)`, with its request's arrival: what zero queueing's hold of those batches is
    computed from (one query; zero queueing ends a batch no later than its last run, so no other batch's
    hold reaches into the window)."""
    rs = RequestStage
    ran = select(rs.batch_id).where(rs.finished_at > start,
                                    func.coalesce(rs.queued_at, rs.started_at) < end).distinct()
    query = (select(rs.batch_id, rs.request_id, rs.stage, Request.arrived_at, rs.queued_at, rs.started_at,
                    rs.finished_at)
             .outerjoin(Request, (Request.batch_id == rs.batch_id) & (Request.request_id == rs.request_id))
             .where(rs.batch_id.in_(ran), rs.started_at.is_not(None), rs.finished_at.is_not(None)))
    with engine.connect() as conn:
        return [StageRun(*row) for row in conn.execute(query)]
