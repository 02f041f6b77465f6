"""What each tenant's batches cost the farm, against the paper's baseline: per tenant and resource kind, the
worker-seconds allocated (farm.store.accounting.tenant_usage: each stage's, split by the seconds each tenant's
batches ran there), what zero queueing would have held for the same batches, and the seconds they ran (the
physical floor). The farm page's cost table (`/ui/api/cost`).

Zero queueing (the planner's `zq-dedicated`, docs/design.md): per batch and stage, as many workers as the
batch's requests would run there at once if none ever waited, held from the batch's first arrival until it
completes, which with no queueing is its latest request's arrival plus that request's stage times. With no
queueing request i reaches its k-th stage at r_i + s_i1 + ... + s_i(k-1). No look-ahead: the ideal hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
from sqlalchemy import Engine

from farm.knobs import Knobs
from farm.app.metrics.labels import resource_of
from farm.protocol.scope import batch_tenant
from farm.store.accounting import StageRun, stage_runs, tenant_usage
from planner.policy.simulate import peak_busy


@dataclass(frozen=True)
class TenantCost:
    """One tenant's worker-seconds of one resource kind over a window."""

    tenant: str  # `t<id>`, or `-` for batches opened directly on the farm
    resource: str
    allocated_s: float  # what the farm held for it
    zero_queue_s: float  # what zero queueing would have held for the same batches
    busy_s: float  # what its requests ran: the floor


def zero_queue_held(runs: Iterable[StageRun], start: float, end: float) -> dict[tuple[str, str], float]:
    """Per (batch, stage), the worker-seconds zero queueing holds within `[start, end)`: the stage's peak of
    the batch's requests running at once with none waiting, times the part of the batch's span in the window.
    A request counts with the stages it finished: for a batch in flight the hold so far, a lower bound."""
    by_request: dict[tuple[str, str], list[StageRun]] = {}
    for run in runs:
        by_request.setdefault((run.batch_id, run.request_id), []).append(run)
    visits: dict[str, dict[str, tuple[list[float], list[float]]]] = {}  # batch -> stage -> (starts, finishes)
    spans: dict[str, tuple[float, float]] = {}  # batch -> (first arrival, completion with no queueing)
    for (batch, _), request in by_request.items():
        request.sort(key=lambda r: r.started_at)  # its stages ran one after another: the pipeline's order
        first = request[0]
        # a missing arrival event: the request was at its first stage no later than it was queued there
        at = first.arrived_at if first.arrived_at is not None else (
            first.queued_at if first.queued_at is not None else first.started_at)
        lo, hi = spans.get(batch, (at, at))
        lo = min(lo, at)
        stages = visits.setdefault(batch, {})
        for r in request:
            starts, finishes = stages.setdefault(r.stage, ([], []))
            starts.append(at)
            at += max(0.0, r.finished_at - r.started_at)
            finishes.append(at)
        spans[batch] = (lo, max(hi, at))
    out: dict[tuple[str, str], float] = {}
    for batch, stages in visits.items():
        lo, hi = spans[batch]
        held_s = min(hi, end) - max(lo, start)
        if held_s <= 0:
            continue
        for stage, (starts, finishes) in stages.items():
            out[(batch, stage)] = peak_busy(np.array(starts), np.array(finishes)) * held_s
    return out


def tenant_cost(engine: Engine, start: float, end: float, knobs: Knobs | None = None) -> list[TenantCost]:
    """Per tenant and resource kind over `[start, end)`: four SQL reads (tenant_usage's three aggregates and
    the window's stage runs)."""
    cells: dict[tuple[str, str], list[float]] = {}  # (tenant, resource) -> [allocated, zero queue, busy]
    for u in tenant_usage(engine, start, end, knobs):
        cell = cells.setdefault((u.tenant, u.resource), [0.0, 0.0, 0.0])
        cell[0] += u.allocated_s
        cell[2] += u.busy_s
    for (batch, stage), held_s in zero_queue_held(stage_runs(engine, start, end), start, end).items():
        cells.setdefault((batch_tenant(batch), resource_of(stage)), [0.0, 0.0, 0.0])[1] += held_s
    return [TenantCost(t, r, a, z, b) for (t, r), (a, z, b) in sorted(cells.items())]
