"""The replay's report: docs/design.md's metrics measured from the history store on the compressed clock,
multiplied back by K, with the keys of `farm eval --json`, and the fidelity against the prediction."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from sqlalchemy import func, select

from farm.knobs import Knobs
from farm.protocol.scope import batch_tenant
from farm.store.models import Batch, Decision, Request, RequestStage, Worker
from planner.eval.trace import Trace


class RecordingTimeout(RuntimeError):
    """The recorder did not write the replay's batches in time; the message says how many are missing."""


def allocated_seconds(lives: Iterable[tuple[float, float | None]], start: float, end: float) -> float:
    """∫ number of workers alive over [start, end]: each life (spawned, retired or None) clipped to the window."""
    total = 0.0
    for spawned, retired in lives:
        a, b = max(spawned, start), min(end if retired is None else retired, end)
        total += max(0.0, b - a)
    return total


def summarize(
    *,
    extra_delays: Sequence[float],
    allocated: Mapping[str, float],
    busy: Mapping[str, float],
    resources: Mapping[str, str],
    costs: Mapping[str, float],
    requests: int,
    runtimes: Sequence[float],
    speed: float,
    policy: str,
    scheduler: str,
    delay_s: float,
    startup_s: float,
    duration_s: float,
    tenants: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The keys of `farm eval --json`, every time multiplied back by K (the planner's runtime excepted: it is real).

    `delay_s`, `startup_s` and `duration_s` are given in trace seconds already. `tenants`: each batch's tenant
    (as `extra_delays`); with several, `tenants` gives each one's batches and extra delay, as `farm eval`'s."""
    d = np.asarray(extra_delays, dtype=float) * speed
    stages = {}
    per_resource: dict[str, float] = {}
    cost = 0.0
    for name in allocated:
        alloc, used = allocated[name] * speed, busy.get(name, 0.0) * speed
        stages[name] = {"resource": resources[name], "allocated_s": alloc, "busy_s": used,
                        "normalized": alloc / used if used > 0 else None}
        per_resource[resources[name]] = per_resource.get(resources[name], 0.0) + alloc
        cost += costs[name] * alloc
    out = {
        "policy": policy,
        "scheduler": scheduler,
        "delay_s": delay_s,
        "startup_s": startup_s,
        "batches": int(d.size),
        "requests": int(requests),
        "extra_delay_mean_s": float(d.mean()) if d.size else 0.0,
        "extra_delay_p95_s": float(np.percentile(d, 95)) if d.size else 0.0,
        "extra_delay_max_s": float(d.max()) if d.size else 0.0,
        "stages": stages,
        "resources": per_resource,
        "cost": cost,
        "decisions": len(runtimes),
        "planner_runtime_mean_s": float(np.mean(runtimes)) if len(runtimes) else 0.0,
        "planner_runtime_max_s": float(np.max(runtimes)) if len(runtimes) else 0.0,
        "duration_s": duration_s,
        "speed": speed,
    }
    if tenants is not None and len(set(tenants)) > 1:  # as planner.eval.metrics reports them: only then
        of = np.asarray(tenants)
        out["tenants"] = {t: {"batches": int((of == t).sum()), "extra_delay_mean_s": float(d[of == t].mean()),
                              "extra_delay_max_s": float(d[of == t].max())} for t in sorted(set(tenants))}
    return out


def within(measured: Mapping[str, Any], predicted: Mapping[str, Any], tolerance: float = 0.15) -> dict[str, Any]:
    """Fidelity: the measured mean extra delay and allocated seconds per stage against the prediction, and each
    tenant's mean extra delay where both report several tenants (`tenants.<name>.extra_delay_mean_s`)."""
    out: dict[str, Any] = {}

    def rel(m: float, p: float) -> float:
        return 0.0 if m == p else abs(m - p) / max(abs(p), 1e-9)

    m, p = measured["extra_delay_mean_s"], predicted["extra_delay_mean_s"]
    out["extra_delay_mean_s"] = {"measured": m, "predicted": p, "relative_error": rel(m, p)}
    for name, stage in measured["stages"].items():
        pm = predicted["stages"].get(name, {}).get("allocated_s")
        if pm is not None:
            out[f"{name}.allocated_s"] = {"measured": stage["allocated_s"], "predicted": pm,
                                          "relative_error": rel(stage["allocated_s"], pm)}
    theirs = predicted.get("tenants", {})
    for name, tenant in measured.get("tenants", {}).items():
        if name in theirs:
            m, p = tenant["extra_delay_mean_s"], theirs[name]["extra_delay_mean_s"]
            out[f"tenants.{name}.extra_delay_mean_s"] = {"measured": m, "predicted": p, "relative_error": rel(m, p)}
    out["ok"] = all(v["relative_error"] <= tolerance for v in out.values() if isinstance(v, dict))
    return out


def wait_recorded(engine: Any, batch_ids: Sequence[str], timeout_s: float = 60.0, poll_s: float = 0.2) -> None:
    """Wait until the recorder has written every batch's completion and extra delay to the store."""
    deadline = time.monotonic() + timeout_s
    while True:
        with engine.connect() as conn:
            done = conn.execute(
                select(func.count()).select_from(Batch).where(
                    Batch.id.in_(list(batch_ids)), Batch.extra_delay_s.is_not(None)
                )
            ).scalar_one()
        if done >= len(batch_ids):
            return
        if time.monotonic() > deadline:
            raise RecordingTimeout(
                f"the history store holds the extra delay of {done} of {len(batch_ids)} batches after "
                f"{timeout_s:g} s: is the recorder running?"
            )
        time.sleep(poll_s)


def measure(engine: Any, trace: Trace, batch_ids: Sequence[str], *, start: float, pipeline: str,
            speed: float, knobs: Knobs, startup_s: float = 0.0,
            tenants: Mapping[str, str] | None = None) -> dict[str, Any]:
    """docs/design.md's metrics of the replayed batches, from the store, over [start, last completion].

    `tenants`: the trace's name of each tenant label (`plan.tenant_labels` inverted): each batch counts for
    the tenant its id's prefix names on the farm, under the trace's name, as the prediction reports it."""
    queues = [f"{pipeline}.{s.name}" for s in trace.stages]
    ids = list(batch_ids)
    with engine.connect() as conn:
        rows = conn.execute(select(Batch.id, Batch.extra_delay_s, Batch.completed_at).where(Batch.id.in_(ids))).all()
        end = max(r.completed_at for r in rows)
        requests = conn.execute(select(Request.request_id).where(Request.batch_id.in_(ids))).all()
        busy = {q: 0.0 for q in queues}
        for stage, started, finished in conn.execute(
            select(RequestStage.stage, RequestStage.started_at, RequestStage.finished_at).where(
                RequestStage.batch_id.in_(ids)
            )
        ):
            if stage in busy and started is not None and finished is not None:
                busy[stage] += max(0.0, finished - started)
        allocated = {}
        for q in queues:
            lives = conn.execute(select(Worker.spawned_at, Worker.retired_at).where(Worker.stage == q)).all()
            allocated[q] = allocated_seconds(lives, start, end)
        runtimes = [
            r for (r,) in conn.execute(
                select(Decision.runtime_s).where(Decision.at >= start, Decision.at <= end)
            )
        ]
    names = {f"{pipeline}.{s.name}": s.name for s in trace.stages}
    return summarize(
        extra_delays=[r.extra_delay_s for r in rows],
        allocated={names[q]: v for q, v in allocated.items()},
        busy={names[q]: v for q, v in busy.items()},
        resources={s.name: s.resource for s in trace.stages},
        costs={s.name: s.cost for s in trace.stages},
        requests=len(requests),
        runtimes=runtimes,
        speed=speed,
        policy=knobs.policy,
        scheduler=knobs.scheduler,
        delay_s=knobs.delay_s * speed,
        startup_s=startup_s * speed,
        duration_s=(end - start) * speed,
        tenants=[(tenants or {}).get(batch_tenant(r.id), batch_tenant(r.id)) for r in rows],
    )


def last_completion(engine: Any, batch_ids: Sequence[str]) -> float:
    """When the last of the replayed batches completed (epoch seconds): where the run's window ends."""
    with engine.connect() as conn:
        query = select(func.max(Batch.completed_at)).where(Batch.id.in_(list(batch_ids)))
        return float(conn.execute(query).scalar_one())


def planned_startup(engine: Any, since: float, until: float, pipeline: str) -> float | None:
    """The median start-up (real seconds) the planner's decisions for `pipeline` planned with in [since,
    until], as their records say; None where they do not (decisions of a planner before that record)."""
    with engine.connect() as conn:
        rows = conn.execute(select(Decision.details).where(Decision.at >= since, Decision.at <= until)).scalars()
        told = [float(d["startup_s"]) for d in rows
                if d and d.get("pipeline") == pipeline and d.get("startup_s") is not None]
    return float(np.median(told)) if told else None


def planned_capacity(engine: Any, since: float, until: float, pipeline: str) -> dict[str, int] | None:
    """The cluster the planner's decisions for `pipeline` planned within in [since, until]: per resource
    kind, the most workers of its share (`details.capacity`), as most of those decisions saw it ({}: no
    kind bounded); None where no record says (decisions of a planner before capacities were recorded)."""
    with engine.connect() as conn:
        rows = conn.execute(select(Decision.details).where(Decision.at >= since, Decision.at <= until)).scalars()
        seen = Counter(tuple(sorted((kind, int(c["most"])) for kind, c in d["capacity"].items()))
                       for d in rows if d and d.get("pipeline") == pipeline and d.get("capacity") is not None)
    if not seen:
        return None
    # a fixed cluster's most is the same every epoch; a moment it read otherwise (a node seen late) is outvoted
    return dict(max(seen.items(), key=lambda item: (item[1], item[0]))[0])
