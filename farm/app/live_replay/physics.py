"""The run's worker physics: how long this farm's workers took to start, to exit and to take a request.

`farm eval` predicts a run only as well as it models these; measured on the same run, from the store, they
let the prediction be compared with what the farm did rather than with an idealised machine.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

import numpy as np
from sqlalchemy import func, select

from farm.store.models import Decision, RequestStage, Worker

MIN_SAMPLES = 3  # fewer measured start-ups or exits than this: the run shows nothing to fit


@dataclass(frozen=True)
class WorkerPhysics:
    """How this farm's workers came and went in one run, in real seconds, for the prediction of that run.

    A new worker was ready `startup_s + startup_per_start_s x n` after the decision that asked for it, n
    the workers still starting then plus its rank among that decision's spawns; a retired one exited
    `retire_s` after its retirement was asked (or after its last request, if it was busy then), on
    average; a request started `dispatch_s` after both it and a worker of its stage were free (queued,
    and the worker ready or done with its previous request), on average."""

    startup_s: float
    startup_per_start_s: float
    retire_s: float
    startup_samples: int = 0
    retire_samples: int = 0
    startup_median_s: float | None = None  # median of the start-ups, each from its decision
    dispatch_s: float = 0.0
    dispatch_samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def startup_samples(spawns: Iterable[tuple[float, Mapping[str, int]]],
                    lives: Iterable[tuple[str, float, float | None]]) -> list[tuple[int, float]]:
    """(n, seconds from decision to ready) per worker that became ready.

    `spawns`: each decision's time and the workers it spawned per stage; `lives`: (stage, spawned at,
    ready at or None). A worker was asked for by the latest decision at or before its spawn that spawned
    in its stage (a burst's spawns follow its decision, before the next one); n is its rank among that
    decision's spawns (all stages, by spawn time, from 1) plus the workers asked for earlier and not ready
    at that decision."""
    decisions = sorted((float(at), {q: int(c) for q, c in (spawned or {}).items() if int(c) > 0})
                       for at, spawned in spawns)
    decisions = [(at, sp) for at, sp in decisions if sp]
    asked = []  # (asked at, ready at or None, decision index, spawned at)
    for stage, spawned_at, ready_at in sorted(lives, key=lambda life: life[1]):
        index = max((k for k, (at, sp) in enumerate(decisions) if at <= spawned_at and stage in sp), default=None)
        if index is not None:
            asked.append((decisions[index][0], ready_at, index))
    out = []
    rank: dict[int, int] = {}
    for at, ready_at, index in asked:  # in spawn order
        rank[index] = rank.get(index, 0) + 1
        if ready_at is None or ready_at < at:
            continue
        under_way = sum(1 for a, r, _ in asked if a < at and (r is None or r > at))
        out.append((rank[index] + under_way, ready_at - at))
    return out


def fit_startup(samples: Iterable[tuple[float, float]]) -> tuple[float, float, int] | None:
    """(base, per start, samples) of start-up = base + per x n by least squares over (n, start-up)
    samples; base and per >= 0. None with fewer than MIN_SAMPLES; per 0 (base: the median start-up)
    when n never varies or the start-ups do not grow with it."""
    pairs = [(float(n), float(d)) for n, d in samples]
    if len(pairs) < MIN_SAMPLES:
        return None
    n = np.array([p[0] for p in pairs])
    delays = np.array([p[1] for p in pairs])
    median = float(np.median(delays))
    if np.ptp(n) == 0:
        return median, 0.0, len(pairs)
    per, base = np.polyfit(n, delays, 1)
    if per <= 0:
        return median, 0.0, len(pairs)
    if base < 0:  # through the origin: no start-up is faster than instant
        base, per = 0.0, float(np.dot(n, delays) / np.dot(n, n))
    return float(base), float(per), len(pairs)


def exit_lags(retirements: Iterable[tuple[float, float | None, float]]) -> list[float]:
    """Per retired worker (asked at, its last request's end or None, exited at): the seconds it still existed
    after it had nothing left to do: from the later of the request and its last request's end."""
    out = []
    for asked, last_finish, exited in retirements:
        since = asked if last_finish is None else max(asked, last_finish)
        if exited >= since:
            out.append(exited - since)
    return out


def dispatch_latencies(stages: Iterable[tuple[str, float | None, float | None, float | None]],
                       ready: Mapping[str, float | None]) -> list[float]:
    """Per request stage (worker, queued at, started at, finished at) a worker took: seconds from the moment
    both were free (the request queued; its worker ready, or done with its previous request) to its start.
    `ready`: each worker's ready time (None: unknown, its first request is not counted)."""
    by_worker: dict[str, list[tuple[float, float, float | None]]] = {}
    for worker, queued, started, finished in stages:
        if worker is not None and queued is not None and started is not None:
            by_worker.setdefault(worker, []).append((started, queued, finished))
    out = []
    for worker, taken in by_worker.items():
        free = ready.get(worker)
        for started, queued, finished in sorted(taken):
            if free is not None and started >= max(queued, free):
                out.append(started - max(queued, free))
            free = finished  # None: its end is unknown, the next one is not counted
    return out


def worker_physics(engine: Any, since: float, until: float | None = None, *, startup_s: float = 0.0,
                   startup_per_start_s: float = 0.0, retire_s: float = 0.0, dispatch_s: float = 0.0) -> WorkerPhysics:
    """The start-up and exit of the workers the planner spawned or retired in [since, until] (epoch
    seconds; until: the run's last completion, so the farm's teardown after the run is not counted),
    from the store: the planner's decisions (what each spawned and retired, when), the worker lives
    (spawned, ready, retired) and the request stages each worker ran. The given values stand in for
    what the run does not show (fewer than MIN_SAMPLES)."""
    hi = math.inf if until is None else until
    with engine.connect() as conn:
        lives = conn.execute(select(Worker.name, Worker.stage, Worker.spawned_at, Worker.ready_at, Worker.retired_at)
                             .where(Worker.spawned_at >= since)).all()
        rows = conn.execute(select(Decision.at, Decision.details).where(Decision.at >= since)
                            .order_by(Decision.at)).all()
        asked: dict[str, float] = {}
        for at, details in rows:
            if at <= hi:
                for name in (details or {}).get("retired") or ():
                    asked.setdefault(name, float(at))  # the first request; a repeated one changes nothing
        names = [life.name for life in lives if life.name in asked and life.retired_at is not None]
        ready = {life.name: life.ready_at for life in lives}
        stages = conn.execute(select(RequestStage.worker, RequestStage.queued_at, RequestStage.started_at,
                                     RequestStage.finished_at).where(RequestStage.worker.in_(list(ready)),
                                                                     RequestStage.started_at <= hi)).all() \
            if ready else []
        last = dict(conn.execute(select(RequestStage.worker, func.max(RequestStage.finished_at))
                                 .where(RequestStage.worker.in_(names)).group_by(RequestStage.worker)).all()) \
            if names else {}
    samples = startup_samples(((at, (details or {}).get("spawned") or {}) for at, details in rows if at <= hi),
                              ((life.stage, life.spawned_at, life.ready_at) for life in lives if life.spawned_at <= hi))
    fit = fit_startup(samples)
    lags = exit_lags((asked[life.name], last.get(life.name), life.retired_at) for life in lives
                     if life.name in asked and life.retired_at is not None)
    base, per, n_start = fit if fit is not None else (startup_s, startup_per_start_s, 0)
    measured_lag = len(lags) >= MIN_SAMPLES
    latencies = dispatch_latencies(stages, ready)
    measured_dispatch = len(latencies) >= MIN_SAMPLES
    return WorkerPhysics(
        startup_s=base, startup_per_start_s=per,
        retire_s=float(np.mean(lags)) if measured_lag else retire_s,
        startup_samples=n_start, retire_samples=len(lags) if measured_lag else 0,
        startup_median_s=float(np.median([d for _, d in samples])) if fit is not None else None,
        dispatch_s=float(np.mean(latencies)) if measured_dispatch else dispatch_s,
        dispatch_samples=len(latencies) if measured_dispatch else 0,
    )
