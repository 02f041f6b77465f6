"""Every stage's pool over a past window, from the history: the farm page's hour of pool samples before its
gateway sampled anything (farm.app.gateway.farm_view), on the live samples' grid and in their shape.

Three reads, one per table over the window (`pool_rows`), then one pure computation over any number of
moments (`pools_at`). At a moment t a worker life is pending from its spawn until it is placed, starting
from its placement until it is ready, running from then until it retires; a request at a stage is queued
from `queued_at` until it starts and busy until it finishes; the target is the pool the latest decision at
or before t asked for. Intervals are half-open, `[from, until)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np
from sqlalchemy import Engine, func, select, union_all

from farm.store.accounting import WorkerLife, worker_lives
from farm.store.models import Decision, RequestStage

INF = float("inf")


@dataclass(frozen=True)
class StagePool:
    """One stage's pool at one moment: the shape of a farm page pool sample, live or from the history."""

    running: int = 0  # placed and ready
    starting: int = 0  # placed, not ready yet
    pending: int = 0  # asked for, waiting for a machine with room
    target: int | None = None  # the pool the planner last asked for; None: no decision seen
    busy: int = 0  # requests running there
    queued: int = 0  # requests waiting in its queue


@dataclass(frozen=True)
class StageVisit:
    """One request at one stage: queued, started, finished (None: not yet, or not known)."""

    batch_id: str
    request_id: str
    stage: str
    queued_at: float | None
    started_at: float | None
    finished_at: float | None


@dataclass(frozen=True)
class Target:
    """One decision's pools by stage queue, at its time."""

    at: float
    workers: Mapping[str, int]


@dataclass(frozen=True)
class PoolRows:
    """What the history says of the pools over a window: the rows `pools_at` counts from."""

    lives: tuple[WorkerLife, ...]
    visits: tuple[StageVisit, ...]
    targets: tuple[Target, ...]


def pool_rows(engine: Engine, start: float, end: float) -> PoolRows:
    """The worker lives, stage visits and decisions that say something of `[start, end)`: three queries."""
    rs = RequestStage
    # a visit overlapping the window; one cut short with no finish time is left out (its end is unknown)
    visits = (select(rs.batch_id, rs.request_id, rs.stage, rs.queued_at, rs.started_at, rs.finished_at)
              .where(rs.finished_at > start, func.coalesce(rs.queued_at, rs.started_at) < end))
    # the decisions in the window, and each pipeline's latest before it (its pools held at the window's start;
    # the daemon records one decision per pipeline and epoch, with every stage of it, and skips a quiet tick)
    pipeline = Decision.details["pipeline"].as_string()
    ranked = (select(Decision.at, Decision.workers,
                     func.row_number().over(partition_by=pipeline, order_by=(Decision.at.desc(), Decision.id.desc()))
                     .label("n"))
              .where(Decision.at < start).subquery())
    decisions = union_all(select(Decision.at, Decision.workers).where(Decision.at >= start, Decision.at < end),
                          select(ranked.c.at, ranked.c.workers).where(ranked.c.n == 1))
    with engine.connect() as conn:
        found = [StageVisit(*row) for row in conn.execute(visits)]
        targets = [Target(float(at), {str(q): int(n) for q, n in (workers or {}).items()})
                   for at, workers in conn.execute(decisions)]
    return PoolRows(tuple(worker_lives(engine, start, end)), tuple(found), tuple(sorted(targets, key=lambda d: d.at)))


def _counts(spans: Sequence[tuple[float, float]], times: np.ndarray) -> np.ndarray:
    """How many of the `[from, until)` spans hold at each time."""
    if not spans:
        return np.zeros(len(times), dtype=np.int64)
    begins = np.sort(np.array([b for b, _ in spans], dtype=np.float64))
    ends = np.sort(np.array([max(b, e) for b, e in spans], dtype=np.float64))
    return np.searchsorted(begins, times, side="right") - np.searchsorted(ends, times, side="right")


def _at(value: float | None) -> float:
    return INF if value is None else value


def pools_at(rows: PoolRows, times: Iterable[float],
             open_visits: Iterable[StageVisit] = ()) -> list[dict[str, StagePool]]:
    """Per moment, every stage's pool. `open_visits`: requests queued or running now, which the history
    records only once they finish a stage (a visit the rows hold already is counted once)."""
    at = np.array(list(times), dtype=np.float64)
    known = {(v.batch_id, v.request_id, v.stage) for v in rows.visits}
    visits = [*rows.visits, *(v for v in open_visits if (v.batch_id, v.request_id, v.stage) not in known)]
    spans: dict[str, dict[str, list[tuple[float, float]]]] = {}

    def add(stage: str, series: str, begin: float | None, end: float) -> None:
        series_spans = spans.setdefault(stage, {}).setdefault(series, [])
        if begin is not None:
            series_spans.append((begin, end))

    for w in rows.lives:
        gone = _at(w.retired_at)
        placed = _at(w.placed_at)
        ready = INF if w.ready_at is None else max(w.ready_at, placed)
        add(w.stage, "pending", w.spawned_at, min(placed, gone))
        add(w.stage, "starting", w.placed_at, min(ready, gone))
        add(w.stage, "running", None if w.ready_at is None else ready, gone)
    for v in visits:
        add(v.stage, "queued", v.queued_at, min(_at(v.started_at), _at(v.finished_at)))
        add(v.stage, "busy", v.started_at, _at(v.finished_at))
    decided: dict[str, tuple[list[float], list[int]]] = {}
    for d in rows.targets:  # in time order
        for q, n in d.workers.items():
            ats, ns = decided.setdefault(q, ([], []))
            ats.append(d.at)
            ns.append(n)
    columns: dict[str, dict[str, list]] = {}
    for q in set(spans) | set(decided):
        columns[q] = {s: _counts(spans.get(q, {}).get(s, []), at).tolist()
                      for s in ("running", "starting", "pending", "busy", "queued")}
        ats, ns = decided.get(q, ([], []))
        latest = np.searchsorted(np.array(ats, dtype=np.float64), at, side="right") - 1
        columns[q]["target"] = [ns[i] if i >= 0 else None for i in latest.tolist()]
    return [{q: StagePool(**{s: c[s][i] for s in c}) for q, c in sorted(columns.items())} for i in range(len(at))]
