"""SIMULATE: does every batch finish within T + D with N_j workers per stage?

The stages form a tandem network without feedback and every stage's dispatch depends only on what
reaches that stage (arrival order, the batches' fixed EBF keys, its own workers). So the simulation
sweeps the stages in pipeline order, one array-based event loop each (`planner.policy.sweep`; in
vectorised rounds, `planner.policy.rounds`, where a stage has many workers free before any is back), and
that is exact: a request's finish at stage j is its arrival at its next visited stage. It also lets
Algorithm 1 keep the stages before the one it searches (`Prefix`) and exit at the first violation.

Dispatch is modelled as the live farm does it: a free worker takes the most urgent waiting request
(EBF: smallest batch key, then earliest arrival at the stage; FCFS: earliest arrival); a running request
keeps its worker (never preempted); new workers are ready `startup_s` after the decision; when the pool
shrinks below its busy workers, each busy worker leaves when it finishes (the first to finish, first).

The timeout-aware check (§5.1): a request that had to wait at stage k fails the simulation as soon as it
could not finish by T + D if it ran to the timeouts of its remaining stages, LT = ts + sum_{j>=k} T_j.
A wait that no pool size can avoid (until `now + startup_s`, when new workers can first be ready) is
not counted: that is what is still possible. Nor is a wait of up to `slack_s` at a stage, D / M unless
told (M stages): a request's waits are all it can add to its batch's extra delay, whatever it runs
(C - T is at most the longest total wait of a request, since a request that runs long moves T with it),
so waits of D / M per stage keep its batch within D. Counted, even the moment a busy pool takes to free
a worker fails a request of a batch near its end, and the only pool that passes is one that drains the
whole backlog at once: hundreds of workers, which with start-ups must be started ahead and sit idle
(`docs/design.md` §14, trap 5; `search` excuses the wait only there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from farm.knobs import SCHEDULERS
from planner.policy.rounds import fifos, pays, sweep_rounds
from planner.policy.sweep import QUIET_FROM, compiled, quiet_start, slots, sweep_ebf, sweep_fcfs
from planner.policy.workload import Workload

_INF = float("inf")


@dataclass(frozen=True, eq=False)
class SimResult:
    """The result of one simulation; per-stage start/finish only when asked for (`detail=True`)."""

    ok: bool
    completion: np.ndarray | None = None  # (nb,) per batch; None when the run stopped early
    starts: tuple[np.ndarray, ...] = ()  # per stage, (n,) start time (nan: not visited there)
    finishes: tuple[np.ndarray, ...] = ()


@dataclass(frozen=True, eq=False)
class Prefix:
    """The state after the first `stage` stages: when each request is ready for the next one."""

    stage: int
    ready: np.ndarray


@dataclass(eq=False)
class _Stage:
    """One stage's queued requests in arrival order (`sel` into the workload): arrival, time there, key
    rank (None: FCFS) and the batch's limit; per mode (stop early or not) the latest start that passes,
    and per pool size the finish times of a sweep that ran to the end (a cut changes nothing then)."""

    sel: np.ndarray
    arr: np.ndarray
    srv: np.ndarray
    grp: np.ndarray | None
    groups: int
    lim_s: np.ndarray
    cuts: dict = field(default_factory=dict)
    cut_lists: dict = field(default_factory=dict)
    swept: dict = field(default_factory=dict)
    _lists: tuple | None = None
    _fifos: tuple | None = None

    def lists(self, stop_early: bool) -> tuple:
        """The sweep's inputs as plain lists (its loops run faster on them), computed once per mode: `arr`
        ends with an inf sentinel; the cut is the mode's (`cuts`, set before)."""
        if self._lists is None:
            grp = self.grp.tolist() if self.grp is not None else []
            self._lists = (self.arr.tolist() + [_INF], self.srv.tolist(), grp)
        cut = self.cut_lists.get(stop_early)
        if cut is None:
            cut = self.cut_lists[stop_early] = self.cuts[stop_early].tolist()
        return (*self._lists, cut)

    def fifos(self) -> tuple[np.ndarray, list[int]]:
        """The requests by FIFO (`rounds.fifos`), computed once."""
        if self._fifos is None:
            self._fifos = fifos(self.grp, self.groups, len(self.arr))
        return self._fifos


class Simulator:
    """SIMULATE over one workload, reusable across the probes of Algorithm 1."""

    def __init__(self, w: Workload, *, scheduler: str = "ebf", delay_s: float = 0.0,
                 timeout_aware: bool | Sequence[bool] = True, limits: np.ndarray | None = None,
                 slack_s: float | None = None) -> None:
        if scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {SCHEDULERS}, not {scheduler!r}")
        n, m = w.times.shape
        # the timeout-aware check per stage (off where a capacity makes requests wait whatever the pools)
        self.aware = [bool(a) for a in np.broadcast_to(np.asarray(timeout_aware, dtype=bool), (m,))]
        self.w, self.scheduler, self.timeout_aware = w, scheduler, any(self.aware)
        self.visits = w.times > 0
        first = w.first_stage()
        self.running_at = [w.running & (first == k) for k in range(m)]
        self.queued_at = [self.visits[:, k] & ~self.running_at[k] for k in range(m)]
        self.queued_idx = [np.flatnonzero(q) for q in self.queued_at]
        # remaining time after stage k (its own later stages at least) and LT's sum of timeouts from k on
        self.rest_after = [w.times[:, k + 1:].sum(axis=1) for k in range(m)]
        self.lt = np.cumsum(w.timeouts[::-1])[::-1]
        self.floor = w.now + w.startup_s
        # timeout-aware: the avoidable wait at one stage that a request may take whatever it runs: D / M,
        # so that its waits at all its stages add at most D to its batch
        self.slack = delay_s / m if slack_s is None else float(slack_s)
        self.ready0 = w.arrival.copy()
        # EBF ranks: batches with equal keys share one FIFO (the live order: key, then arrival)
        self.rank = np.unique(w.keys, return_inverse=True)[1].reshape(-1) if len(w.keys) else np.zeros(0, np.int64)
        self.groups = int(self.rank.max()) + 1 if len(self.rank) else 0
        self.keys = w.keys
        self._cache: dict = {}
        self._by_batch = np.argsort(w.batch, kind="stable")
        sorted_batch = w.batch[self._by_batch]
        self._present = np.unique(sorted_batch)
        self._cuts = np.searchsorted(sorted_batch, self._present)
        # lim_b = T_b + D; the caller may pass limits already judged from what is still possible
        self.limits = (w.deadlines + delay_s) if limits is None else np.asarray(limits, dtype=np.float64)

    def queue_free(self) -> SimResult:
        """The run with a worker for every request (none ever waits): each starts at stage k when it is
        ready there, and not before now. Closed form when new workers are ready at once
        (`startup_s == 0`); otherwise the event loop with that many workers (who gets the idle ones
        before the new ones are ready is then a matter of dispatch order)."""
        w = self.w
        m = w.stages
        unlimited = [int(self.running_at[k].sum()) + len(self.queued_idx[k]) for k in range(m)]
        if w.startup_s > 0:
            return self.run(unlimited, stop_early=False, detail=True)
        ready = self.ready0.copy()
        starts = []
        for k in range(m):
            start = np.full(w.size, np.nan)
            run_mask = self.running_at[k]
            start[run_mask] = w.now
            idx = self.queued_idx[k]
            start[idx] = np.maximum(ready[idx], w.now)
            here = run_mask | self.queued_at[k]
            ready[here] = start[here] + w.times[here, k]
            starts.append(start)
        completion = np.full(len(self.keys), -_INF)
        if len(self._present):
            completion[self._present] = np.maximum.reduceat(np.maximum(ready, w.now)[self._by_batch], self._cuts)
        ok = bool((completion <= self.limits + 1e-9).all())
        finishes = tuple(np.where(self.visits[:, k], starts[k] + w.times[:, k], np.nan) for k in range(m))
        return SimResult(ok, completion, tuple(starts), finishes)

    def prefix(self, workers, stage: int, base: Prefix | None = None) -> Prefix | None:
        """Run stages [base.stage, stage) and keep the ready times; None if they already violate."""
        start = base.stage if base is not None else 0
        ready = (base.ready if base is not None else self.ready0).copy()
        for k in range(start, stage):
            if not self._stage(k, int(workers[k]), ready, True, None):
                return None
        return Prefix(stage, ready)

    def run(self, workers, *, prefix: Prefix | None = None, stop_early: bool = True, detail: bool = False) -> SimResult:
        w = self.w
        m = w.stages
        if len(workers) != m:
            raise ValueError(f"need one worker count per stage ({m}), got {len(workers)}")
        start = prefix.stage if prefix is not None else 0
        ready = (prefix.ready if prefix is not None else self.ready0).copy()
        starts: list[np.ndarray] | None = [np.full(w.size, np.nan) for _ in range(m)] if detail else None
        ok = True
        for k in range(start, m):
            if not self._stage(k, int(workers[k]), ready, stop_early, starts):
                ok = False
                if stop_early:
                    return SimResult(False)
        completion = np.full(len(self.keys), -_INF)
        if len(self._present):
            done = np.maximum(ready, w.now)[self._by_batch]
            completion[self._present] = np.maximum.reduceat(done, self._cuts)
        ok = ok and bool((completion <= self.limits + 1e-9).all())
        if not detail:
            return SimResult(ok, completion)
        finishes = tuple(np.where(self.visits[:, k], starts[k] + w.times[:, k], np.nan) for k in range(m))
        return SimResult(ok, completion, tuple(starts), finishes)

    def _prepared(self, k: int, idx: np.ndarray, arr_all: np.ndarray) -> _Stage:
        """The stage's requests in arrival order, cached while their arrivals do not change (the first
        stage's never do across the probes of a search)."""
        cached = self._cache.get(k)
        if cached is not None and np.array_equal(cached[0], arr_all):
            return cached[1]
        w = self.w
        order = np.argsort(arr_all, kind="stable")
        sel = idx[order]
        grp = self.rank[w.batch[sel]] if self.scheduler == "ebf" else None
        prepared = _Stage(sel, arr_all[order], w.times[sel, k], grp, self.groups, self.limits[w.batch[sel]])
        self._cache[k] = (arr_all.copy(), prepared)
        return prepared

    def _cut(self, k: int, prepared: _Stage, stop_early: bool) -> np.ndarray:
        """The latest start of each request that passes: past it, its batch misses its limit once its own
        later stages run, or (timeout-aware) it waited, beyond what no pool avoids, until LT > limit.
        Without stopping early, none (the run goes on to the end)."""
        cut = prepared.cuts.get(stop_early)
        if cut is None:
            cut = np.full(len(prepared.sel), _INF)
            if stop_early:
                cut = prepared.lim_s - prepared.srv - self.rest_after[k][prepared.sel] + 1e-9
                if self.aware[k]:
                    cut = np.minimum(cut, np.maximum(self._excused(prepared.arr), prepared.lim_s - float(self.lt[k])))
            prepared.cuts[stop_early] = cut
        return cut

    def _sweep(self, k: int, prepared: _Stage, n_workers: int, free: np.ndarray,
               stop_early: bool) -> tuple[np.ndarray, int]:
        """Finish times of the stage's requests in arrival order, and the first to start after its cut
        (-1: none): in vectorised rounds where they pay (`planner.policy.rounds`), else one at a time.
        `free`: when each worker is first free, earliest first."""
        srv = prepared.srv
        if not len(free):
            return np.full(len(srv), _INF), 0
        done = prepared.swept.get(n_workers)
        if done is not None:
            return done, -1
        cut = self._cut(k, prepared, stop_early)
        sweeps = compiled()
        if sweeps is not None:  # the same steps as the loops below, compiled: rounds and a quiet start cost more
            if prepared.grp is None:
                fin, bad = sweeps.fcfs(prepared.arr, srv, free, cut)
            else:
                fin, bad = sweeps.ebf(prepared.arr, srv, prepared.grp, self.groups, free, cut)
        elif pays(len(free), srv):
            fin, bad = sweep_rounds(prepared.arr, srv, prepared.fifos(), free, cut)
        else:
            arr, srv_l, grp, cut_l = prepared.lists(stop_early)
            if len(free) >= QUIET_FROM:
                m, first, heap = quiet_start(prepared.arr, srv, free, cut)  # a sorted list is a heap
                fin = first.tolist() + [0.0] * (len(srv) - m)
            else:
                m, fin, heap = 0, None, free.tolist()
            if prepared.grp is None:
                fin, bad = sweep_fcfs(arr, srv_l, heap, cut_l, m, fin)
            else:
                fin, bad = sweep_ebf(arr, srv_l, grp, self.groups, heap, cut_l, m, fin)
            fin = np.asarray(fin)
        if bad < 0:
            prepared.swept[n_workers] = fin
        return fin, bad

    def _excused(self, arrival: np.ndarray) -> np.ndarray:
        """The latest start that the timeout-aware check never fails: the request's arrival at the stage
        (or when new workers can first be ready, if later) plus the slack."""
        return np.maximum(arrival, self.floor) + self.slack

    def _stage(self, k: int, n_workers: int, ready: np.ndarray, stop_early: bool, starts) -> bool:
        """Advance `ready` through stage k in place; False on a violation."""
        w = self.w
        run_mask = self.running_at[k]
        run_finish = w.now + w.times[run_mask, k]
        ready[run_mask] = run_finish
        if starts is not None:
            starts[k][run_mask] = w.now
        idx = self.queued_idx[k]
        ok = True
        if len(idx):
            free = slots(w, k, n_workers, run_finish)
            arr_all = ready[idx]
            prepared = self._prepared(k, idx, arr_all)
            sel, lim_s = prepared.sel, prepared.lim_s
            lt = float(self.lt[k])
            fin_a, bad = self._sweep(k, prepared, n_workers, free, stop_early)
            if bad >= 0 and stop_early:
                return False
            st = fin_a - prepared.srv
            if self.aware[k] and not stop_early:
                arr_a = prepared.arr
                waited = (st > arr_a + 1e-9) & (st > self._excused(arr_a) + 1e-9) & (st + lt > lim_s)
                ok = not waited.any()
            ready[sel] = fin_a
            if starts is not None:
                starts[k][sel] = st
        if stop_early and len(idx) == 0 and run_mask.any():
            # running requests alone: past their batch's limit once their later stages run
            late = ready[run_mask] + self.rest_after[k][run_mask] > self.limits[w.batch[run_mask]] + 1e-9
            if late.any():
                return False
        return ok


def simulate(w: Workload, workers, *, scheduler: str = "ebf", delay_s: float = 0.0, timeout_aware: bool = True,
             stop_early: bool = True, detail: bool = False) -> SimResult:
    """One SIMULATE(Num, R, S, D) call: `ok` when every batch completes within T + D (and, timeout-aware,
    no request waits where running to its timeouts would break that)."""
    return Simulator(w, scheduler=scheduler, delay_s=delay_s, timeout_aware=timeout_aware).run(
        workers, stop_early=stop_early, detail=detail)


def peak_busy(starts: np.ndarray, finishes: np.ndarray, lo: float = -_INF, hi: float = _INF) -> int:
    """Most workers busy at once over [lo, hi] (a worker freed at t can start another request at t)."""
    mask = ~np.isnan(starts) & (finishes > lo) & (starts <= hi)
    s, f = starts[mask], finishes[mask]
    if not len(s):
        return 0
    # the count rises only at a start: the starts so far less the finishes at or before it
    s = np.sort(np.maximum(s, lo))
    f = np.sort(f)
    return int((np.arange(1, len(s) + 1) - np.searchsorted(f, s, side="right")).max())
