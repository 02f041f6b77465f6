"""Algorithm 2: the estimated requests of every active batch, as one `Workload` for SIMULATE.

Per batch, from the history of its task (the previous batch, `[r_i, s_ij]`):
- *future* requests: the batch size is known, so exactly `size - arrived` of them. They are the latest
  arrivals of the history (matched by rank, so a history of another size still fits), shifted to this
  batch's start; one that history says should have arrived already is taken to arrive now.
- *queued at stage k*: times from stage k on of a history request that visits stage k; they keep their
  real queue time so the simulation orders them as the live queue does.
- *running at stage k*, e seconds in: a history request with s_ik > e, remaining s_ik - e there.
Sampling uses a numpy generator seeded from the `random.Random` passed in: reproducible per seed.

A task without history borrows the pooled history of the pipeline's other tasks (same stages, alike
workload). With no history anywhere (a cold farm), nothing is known of the requests still to come: one
more per batch with requests to come arrives now, so each stage keeps a spare worker for the next
arrival. The arrived ones take their times from the done requests of the pipeline's active batches
(their `served` times) that arrived long enough ago to be done whatever they ran (`_learned`), once
there are `COLD_LEARN` of them; before that, the documented default: each runs to its stages' timeouts
(the worst case), which sizes a first batch's GPU pools for 60 s runs (issue 12: 3x `ideal`).

`oracle=True` (the evaluation's `ideal`) uses each batch's actual requests instead.
"""

from __future__ import annotations

import random

import numpy as np

from planner.policy.snapshot import DONE, RUNNING, ActiveBatch, Snapshot
from planner.policy.workload import Workload

_EPS = 1e-6  # a running request has at least this much left
COLD_LEARN = 32  # done requests a cold pipeline's estimate learns from, at least


def _history_for(snapshot: Snapshot, task: str) -> np.ndarray | None:
    h = snapshot.history.get(task)
    if h is not None and len(h):
        return np.asarray(h, dtype=np.float64)
    others = [np.asarray(v, dtype=np.float64) for t, v in sorted(snapshot.history.items()) if len(v)]
    return np.concatenate(others) if others else None


def _learned(snapshot: Snapshot) -> np.ndarray:
    """With no history anywhere, learn from the pipeline's active batches: the done requests that
    arrived at least the sum of the timeouts ago, as history rows; none until there are `COLD_LEARN`.
    Younger done requests would be the quick ones only (the slow ones of their age are still out), and
    a history of quick ones plans too few workers for the rest; one that old was done whatever it ran,
    unless it waited."""
    since = snapshot.now - float(snapshot.timeouts.sum())
    rows = []
    for b in snapshot.batches:
        if b.served is not None:
            old = (b.state == DONE) & (b.start_s + b.arrival <= since)
            rows.append(np.column_stack([b.arrival[old], b.served[old]]))
    h = np.concatenate(rows) if rows else np.zeros((0, 1 + len(snapshot.stages)))
    return h if len(h) >= COLD_LEARN else h[:0]


def _future(b: ActiveBatch, h: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
    m = b.outstanding
    if m <= 0:
        return np.zeros(0), np.zeros((0, h.shape[1] - 1))
    ranked = h[np.argsort(h[:, 0], kind="stable")]
    ranks = np.arange(b.size - m, b.size)
    rows = ranked[np.minimum((ranks * len(ranked)) // b.size, len(ranked) - 1)]
    return np.maximum(b.start_s + rows[:, 0], now), rows[:, 1:]


def _queued(h: np.ndarray, k: np.ndarray, gen: np.random.Generator, timeouts: np.ndarray) -> np.ndarray:
    """Times from each request's stage k on, sampled from history requests that visit stage k."""
    m = len(timeouts)
    out = np.zeros((len(k), m))
    for stage in np.unique(k):
        sel = np.flatnonzero(k == stage)
        pool = h[h[:, 1 + stage] > 0, 1:]
        if len(pool):
            picked = pool[gen.integers(0, len(pool), len(sel))]
        else:  # no history visits this stage: the worst case, it runs to the timeouts from here on
            picked = np.tile(timeouts, (len(sel), 1))
        picked = picked.copy()
        picked[:, :stage] = 0.0
        out[sel] = picked
    return out


def _running(h: np.ndarray, k: np.ndarray, elapsed: np.ndarray, gen: np.random.Generator,
             timeouts: np.ndarray) -> np.ndarray:
    """Remaining times of running requests: a history request with s_ik > e, minus e at stage k."""
    m = len(timeouts)
    out = np.zeros((len(k), m))
    for stage in np.unique(k):
        sel = np.flatnonzero(k == stage)
        pool = h[h[:, 1 + stage] > 0, 1:]
        pool = pool[np.argsort(pool[:, stage], kind="stable")]
        e = elapsed[sel]
        if len(pool):
            first = np.searchsorted(pool[:, stage], e, side="right")
            have = first < len(pool)
            pick = first + np.floor(gen.random(len(sel)) * (len(pool) - first)).astype(np.int64)
            rows = pool[np.minimum(pick, len(pool) - 1)].copy()
            # ran longer than any history request: worst case, to the timeout (missing data, scale up)
            rows[~have, stage] = np.maximum(timeouts[stage], e[~have] + _EPS)
        else:
            rows = np.tile(timeouts, (len(sel), 1))
            rows[:, stage] = np.maximum(timeouts[stage], e + _EPS)
        rows[:, :stage] = 0.0
        rows[:, stage] = np.maximum(rows[:, stage] - e, _EPS)
        out[sel] = rows
    return out


def estimate(snapshot: Snapshot, rng: random.Random, *, oracle: bool = False) -> tuple[Workload, tuple[str, ...]]:
    """The workload of all active batches and the ids of those estimated with the cold default."""
    now, timeouts = snapshot.now, snapshot.timeouts
    m = len(timeouts)
    gen = np.random.default_rng(rng.getrandbits(64))
    arrivals, times, running, batch, deadlines = [], [], [], [], []
    cold: list[str] = []
    learned: np.ndarray | None = None  # read once, and only for a cold batch
    for bi, b in enumerate(snapshot.batches):
        live = b.state != DONE
        k, state, since = b.stage[live], b.state[live], b.since[live]
        is_run = state == RUNNING
        elapsed = now - since
        t_nominal = -np.inf
        if oracle:
            if b.oracle is None:
                raise ValueError(f"policy 'ideal' needs the actual requests of batch {b.id!r} (evaluation only)")
            actual = b.oracle[: len(b.arrival)][live, 1:]
            cols = np.arange(m)
            t = np.where(cols[None, :] >= k[:, None], actual, 0.0)
            rows = np.flatnonzero(is_run)
            t[rows, k[rows]] = np.maximum(actual[rows, k[rows]] - elapsed[rows], _EPS)
            fut = b.oracle[len(b.arrival):]
            f_arr, f_times = np.maximum(b.start_s + fut[:, 0], now), fut[:, 1:]
            t_nominal = b.start_s + float((b.oracle[:, 0] + b.oracle[:, 1:].sum(axis=1)).max())
        else:
            h = _history_for(snapshot, b.task)
            if h is None:
                cold.append(b.id)
                if learned is None:
                    learned = _learned(snapshot)
            source = h if h is not None else learned
            if not len(source):  # no history and too little learned: the worst case
                t = np.tile(timeouts, (len(k), 1))
                t[np.arange(m)[None, :] < k[:, None]] = 0.0
                rows = np.flatnonzero(is_run)
                t[rows, k[rows]] = np.maximum(timeouts[k[rows]] - elapsed[rows], _EPS)
            else:
                t = np.zeros((len(k), m))
                q = np.flatnonzero(~is_run)
                t[q] = _queued(source, k[q], gen, timeouts)
                r = np.flatnonzero(is_run)
                t[r] = _running(source, k[r], elapsed[r], gen, timeouts)
            if h is not None:
                f_arr, f_times = _future(b, h, now)
            else:  # nothing says when the rest arrive: a spare worker per stage for the next one
                spare = 1 if b.outstanding > 0 else 0
                f_arr, f_times = np.full(spare, now), np.tile(timeouts, (spare, 1))
        arrivals += [np.where(is_run, now, since), f_arr]
        times += [t, f_times]
        running += [is_run, np.zeros(len(f_arr), dtype=bool)]
        batch.append(np.full(len(k) + len(f_arr), bi, dtype=np.int64))
        deadlines.append(t_nominal)
    nb = len(snapshot.batches)
    deadlines = np.asarray(deadlines, dtype=np.float64)
    w = Workload(
        now=now,
        arrival=np.concatenate(arrivals) if arrivals else np.zeros(0),
        times=np.concatenate(times) if times else np.zeros((0, m)),
        running=np.concatenate(running) if running else np.zeros(0, dtype=bool),
        batch=np.concatenate(batch) if batch else np.zeros(0, dtype=np.int64),
        keys=np.zeros(nb), deadlines=np.zeros(nb), timeouts=timeouts,
        workers=[s.workers for s in snapshot.stages], starting=[s.starting for s in snapshot.stages],
        startup_s=snapshot.startup_s,
    )
    # Eq. 1-2 per batch: each request's completion had it never waited (a queued one from when it was
    # queued), so time spent waiting counts against D instead of moving T; `ideal` knows the actual T.
    t_est = np.full(nb, -np.inf)
    np.maximum.at(t_est, w.batch, w.arrival + w.times.sum(axis=1))
    t_b = np.where(np.isfinite(deadlines), deadlines, t_est) if nb else t_est
    t_b = np.where(np.isfinite(t_b), t_b, now)
    return _with_deadlines(w, t_b), tuple(cold)


def _with_deadlines(w: Workload, t: np.ndarray) -> Workload:
    return Workload(now=w.now, arrival=w.arrival, times=w.times, running=w.running, batch=w.batch, keys=t,
                    deadlines=t, timeouts=w.timeouts, workers=w.workers, starting=w.starting, startup_s=w.startup_s)
