"""Algorithm 1: stages by cost, descending; per stage a binary search for the smallest N_j that keeps the
constraint, the others held.

Before searching, one run with a worker for every request (no queueing at all; closed form when new
workers are ready at once) gives two things: the upper bound of each search (the most workers that run
at once there, instead of the paper's B) and, per
batch, the earliest completion still possible from now. A batch is judged against T + D while that
earliest completion is within it; a batch already later than that is judged against its earliest
completion + D, otherwise no pool size could satisfy it and the search would run to its upper bound.
(Not `max(T, earliest) + D` throughout: a batch merely behind T, but within T + D, would be granted D
again at every decision and the delays would add up.)

Each search starts from a lower bound (`_lower_bound`: compulsory parts and energy), gallops up from it
(a first step of 25% of it, doubling) until a probe passes, then bisects; it stops once the bracket is within
1% (`PRECISION`: exact below 100 workers, a worker or so above, inside the decision's 10% band). On the
planner-runtime case (16,000 estimated requests, two stages) that is 14 simulations instead of 22.

Within a capacity (`planner.policy.capacity`, given only where the pools the search would want do not
fit it), each stage's upper bound is first cut so that every resource kind's stages share no more than
its `most` (`fit`, in proportion to their queue-free peaks); with an autoscaler, the stage's share of
what is `placeable` now is ready after the start-up, the rest a node start-up later (and the window of
the decision, what the pools keep busy until a new worker can serve, is a node start-up longer: a
worker that needs a node is asked for that much earlier, so that the autoscaler adds it in time). A
batch that these capped pools finish later than its limit is judged against that completion instead:
no pool within the capacity does better, and without it the search would run every stage to its bound,
a stage that is not short of workers too. The timeout-aware check is then off at the stages cut (or waiting for nodes):
requests wait there whatever the pools; it stays on at the others.

The search does not rely on monotonicity for correctness: its answer is always a count that was
simulated and passed (or the upper bound, which passes by construction). With several stages list
scheduling has anomalies (more workers upstream can reorder a downstream queue and delay a batch); then
the answer may not be the smallest feasible count, but it is feasible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from planner.policy.capacity import Capacity, fit
from planner.policy.simulate import Simulator, peak_busy
from planner.policy.workload import Workload

PRECISION = 0.01  # a search stops once its bracket is within 1% (exact below 100 workers)
GALLOP = 0.25  # the first probe above the lower bound, as a fraction of it


@dataclass(frozen=True, eq=False)
class Plan:
    workers: tuple[int, ...]  # N_j: the smallest pools found that keep every batch within its limit
    window: tuple[int, ...]  # per stage, the most workers busy in [now, now + lookahead] with those pools
    limits: np.ndarray  # per batch: T + D, or if that is no longer possible, the earliest still possible + D
    completion: np.ndarray  # per batch, the simulated completion with `workers`
    order: tuple[int, ...]  # stages in the order searched
    probes: int  # SIMULATE calls made


def _unlimited(sim: Simulator) -> list[int]:
    return [int(sim.running_at[k].sum()) + len(sim.queued_idx[k]) for k in range(sim.w.stages)]


def _lower_bound(sim: Simulator, k: int, grid: int = 16) -> int:
    """A lower bound for stage k's pool, from what no pool size can change: a queued request cannot
    start before `earliest` (its arrival plus its earlier stages, and not before now) and must start by
    `cut` (else its batch misses its limit, or, timeout-aware, it waits past LT's bound), so it runs
    inside [earliest, max(cut, earliest) + s]. Then
    - compulsory parts: it surely runs over [cut, earliest + s): the most such that overlap, and
    - energy: the work of the requests released at or after t1 and due by t2 fits in N (t2 - t1),
      for t1 on a grid of release quantiles and every due time t2.
    Running requests and workers still starting only lower the capacity, so both stay lower bounds."""
    w = sim.w
    idx = sim.queued_idx[k]
    if not len(idx):
        return 0
    earliest = np.maximum(w.arrival[idx], w.now) + w.times[idx, :k].sum(axis=1)
    s = w.times[idx, k]
    lim = sim.limits[w.batch[idx]]
    cut = lim - s - sim.rest_after[k][idx]
    if sim.aware[k]:  # at its first stage a request's arrival is known, so is its timeout-aware bound
        entry = w.first_stage()[idx] == k
        bound = np.maximum(np.maximum(w.arrival[idx], sim.floor) + sim.slack, lim - sim.lt[k])
        cut = np.where(entry, np.minimum(cut, bound), cut)
    sure = cut < earliest + s
    best = peak_busy(cut[sure], (earliest + s)[sure])
    due = np.maximum(cut, earliest) + s
    order = np.argsort(due, kind="stable")
    due, s, earliest = due[order], s[order], earliest[order]
    for t1 in np.unique(np.quantile(earliest, np.linspace(0.0, 1.0, grid))):
        # a request due by t1 is not released at t1 (it runs s > 0 after its earliest start): from the
        # first due later on, the same sums
        lo = int(np.searchsorted(due, t1, side="right"))
        released = earliest[lo:] >= t1
        span = due[lo:] - t1
        if released.any():
            energy = np.cumsum(np.where(released, s[lo:], 0.0))[released] / span[released]
            best = max(best, math.ceil(float(energy.max()) - 1e-9))
    return int(best)


def _capped(w: Workload, num: list[int], resources: Sequence[str], capacity: Capacity) -> tuple[list[int], Workload]:
    """The upper bounds cut to the capacity, and the workload whose new workers beyond each stage's share
    of what is placeable now wait for a node (with an autoscaler whose nodes take time)."""
    bound = fit(num, resources, capacity.most)
    if capacity.node_startup_s <= 0:
        return bound, w
    ready = {kind: capacity.ready(kind) for kind in capacity.most}
    placeable = fit(bound, resources, ready)
    if placeable == bound:  # every pool within what is placeable now: no worker waits for a node
        return bound, w
    placeable = [p if kind in ready else np.iinfo(np.int64).max for p, kind in zip(placeable, resources)]
    return bound, replace(w, placeable=placeable, node_startup_s=capacity.node_startup_s)


def search(w: Workload, costs, *, scheduler: str = "ebf", delay_s: float = 2.0, timeout_aware: bool = True,
           lookahead_s: float = math.inf, capacity: Capacity | None = None, resources: Sequence[str] = ()) -> Plan:
    """Algorithm 1 (see the module): the smallest pools that keep every batch within its limit; within
    `capacity` (one resource kind per stage in `resources`) when given."""
    m = w.stages
    if len(costs) != m:
        raise ValueError(f"need one cost per stage ({m}), got {len(costs)}")
    if capacity is not None and len(resources) != m:
        raise ValueError(f"need one resource kind per stage ({m}), got {len(resources)}")
    free = Simulator(w, scheduler=scheduler, timeout_aware=False, limits=np.full(len(w.keys), math.inf))
    unlimited = _unlimited(free)
    ref = free.queue_free()
    on_time = w.deadlines + delay_s
    limits = np.where(ref.completion <= on_time, on_time, ref.completion + delay_s)
    num = [peak_busy(ref.starts[k], ref.finishes[k]) for k in range(m)]
    if capacity is not None:
        peaks = list(num)
        bound, w = _capped(w, num, resources, capacity)
        capped = bound != num or w.placeable is not None
        if capped:
            num = bound
            free = Simulator(w, scheduler=scheduler, timeout_aware=False, limits=np.full(len(w.keys), math.inf))
            # no pool within the capacity finishes a batch before the capped pools do
            limits = np.maximum(limits, free.run(num, stop_early=False).completion)
            unlimited = list(num)  # the fallback below: the most the capacity holds
            # no timeout-aware check where the capacity makes requests wait whatever the pools
            placeable = w.placeable if w.placeable is not None else num
            timeout_aware = [timeout_aware and b >= n and p >= b for b, n, p in zip(bound, peaks, placeable)]
            if w.placeable is not None:  # a worker that waits for a node is asked for a node's start-up ahead
                lookahead_s += w.node_startup_s
    # the timeout-aware check excuses a wait of D / M per stage only where a new worker cannot come within
    # D: there its strict pool would be started ahead and idle, elsewhere it costs only workers that serve
    slack = delay_s / m if lookahead_s > delay_s else 0.0
    sim = Simulator(w, scheduler=scheduler, delay_s=delay_s, timeout_aware=timeout_aware, limits=limits, slack_s=slack)
    probes = 1
    order = tuple(sorted(range(m), key=lambda k: (-costs[k], k)))
    for k in order:
        idx = sim.queued_idx[k]
        if not len(idx):
            num[k] = 0  # nothing will wait here: the running requests keep their workers regardless
            continue
        lo = max(1, _lower_bound(sim, k))
        lo, hi = min(lo, num[k]), num[k]
        prefix = sim.prefix(num, k)
        # the lower bound is usually close: gallop up from it (steps of 25% of it, doubling), then bisect
        step = max(1, math.ceil(GALLOP * lo))
        while prefix is not None and hi - lo > int(PRECISION * lo) and lo + step < hi:
            num[k] = lo + step
            probes += 1
            if sim.run(num, prefix=prefix).ok:
                hi = lo + step
                break
            lo, step = lo + step + 1, step * 2
        while hi - lo > int(PRECISION * lo):
            mid = (lo + hi) // 2
            num[k] = mid
            probes += 1
            if prefix is not None and sim.run(num, prefix=prefix).ok:
                hi = mid
            else:
                lo = mid + 1
        num[k] = hi
    final = sim.run(num, stop_early=False, detail=True)
    if not final.ok:  # the queue-free peak should pass untested; if it did not, a worker per request does
        num = unlimited  # (within a capacity: the capped pools)
        final = sim.run(num, stop_early=False, detail=True)
    probes += 1
    window = [min(num[k], peak_busy(final.starts[k], final.finishes[k], w.now, w.now + lookahead_s)) for k in range(m)]
    return Plan(tuple(num), tuple(window), limits, final.completion, order, probes)
