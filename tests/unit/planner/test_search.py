"""Algorithm 1: per stage, by cost, the smallest pool that keeps every batch within its limit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_simulate import FIG9_ARRIVALS, FIG9_HISTORY, FIG9_TIMEOUT

from planner.policy.search import PRECISION, _lower_bound, search
from planner.policy.simulate import Simulator, peak_busy
from planner.policy.workload import Workload, single_stage


def test_figure_9_history_alone_gives_two_workers():
    w = single_stage(FIG9_ARRIVALS, FIG9_HISTORY, FIG9_TIMEOUT)
    assert search(w, [1.0], delay_s=0, timeout_aware=False).workers == (2,)


def test_figure_9_the_timeout_aware_search_gives_three_workers():
    w = single_stage(FIG9_ARRIVALS, FIG9_HISTORY, FIG9_TIMEOUT)
    assert search(w, [1.0], delay_s=0, timeout_aware=True).workers == (3,)


def test_the_costlier_stage_is_searched_first():
    w = Workload(now=0.0, arrival=[0.0, 0.0], times=[[1.0, 1.0], [1.0, 1.0]], running=[False, False], batch=[0, 0],
                 keys=[2.0], deadlines=[2.0], timeouts=[60.0, 60.0], workers=[0, 0], starting=[0, 0])
    assert search(w, [1.0, 8.0], delay_s=5).order == (1, 0)


def test_an_already_late_batch_is_judged_from_what_is_still_possible():
    # T says 5 but it is 10 already and 20 requests of 10 s are queued: no pool meets T + D;
    # judged from the earliest completion still possible (20) + D, one worker per request still
    w = Workload(now=10.0, arrival=np.full(20, 3.0), times=np.full((20, 1), 10.0), running=np.zeros(20, bool),
                 batch=np.zeros(20, int), keys=[5.0], deadlines=[5.0], timeouts=[60.0], workers=[0], starting=[0])
    plan = search(w, [1.0], delay_s=2.0, timeout_aware=True)
    assert plan.workers == (20,)
    assert plan.limits[0] == 22.0  # the earliest still possible (20) + D


def test_the_window_counts_only_what_runs_before_the_next_decision():
    # requests arrive at 100 and later; a decision at 0 with a 10 s look-ahead needs no worker yet
    w = single_stage([100.0, 101.0, 102.0], [5.0, 5.0, 5.0], 60.0)
    plan = search(w, [1.0], delay_s=2.0, lookahead_s=10.0)
    assert plan.workers[0] >= 1 and plan.window == (0,)


two_stage = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 6), st.integers(0, 6), st.integers(0, 1)), min_size=1, max_size=16
)


def _two_stage_workload(reqs) -> Workload:
    """Requests (arrival, compile s, execute s, batch) as a workload keyed by each batch's actual T."""
    batch = [b for *_, b in reqs]
    used = sorted(set(batch))
    batch = np.array([used.index(b) for b in batch])
    arrival = np.array([float(a) for a, *_ in reqs])
    times = np.array([[float(c), float(e)] for _, c, e, _ in reqs])
    t = np.full(len(used), -np.inf)
    np.maximum.at(t, batch, arrival + times.sum(axis=1))
    w = Workload(now=0.0, arrival=arrival, times=times, running=np.zeros(len(reqs), bool), batch=batch, keys=t,
                 deadlines=t, timeouts=[6.0, 6.0], workers=[0, 0], starting=[0, 0])
    return w


@settings(max_examples=80, deadline=None)
@given(two_stage, st.sampled_from(["ebf", "fcfs"]), st.booleans(), st.floats(0, 3))
def test_the_answer_keeps_the_constraint_and_one_fewer_at_the_last_stage_searched_does_not(
    reqs, scheduler, timeout_aware, delay
):
    # (pools under 100 workers are searched exactly; larger ones to within PRECISION)
    w = _two_stage_workload(reqs)
    plan = search(w, [1.0, 8.0], scheduler=scheduler, delay_s=delay, timeout_aware=timeout_aware)
    sim = Simulator(w, scheduler=scheduler, delay_s=delay, timeout_aware=timeout_aware, limits=plan.limits)
    assert sim.run(list(plan.workers), stop_early=False).ok
    last = plan.order[-1]
    if plan.workers[last] > 0:
        fewer = list(plan.workers)
        fewer[last] -= 1
        assert not sim.run(fewer, stop_early=False).ok


one_stage = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 8), st.integers(0, 2)), min_size=1, max_size=24)


def _one_stage_workload(reqs) -> Workload:
    batch = [b for *_, b in reqs]
    used = sorted(set(batch))
    return single_stage([float(a) for a, *_ in reqs], [float(s) for _, s, _ in reqs], 10.0,
                        batch=[used.index(b) for b in batch])


@settings(max_examples=80, deadline=None)
@given(one_stage, st.sampled_from(["ebf", "fcfs"]), st.booleans(), st.floats(0, 4))
def test_the_lower_bound_never_exceeds_the_smallest_pool_that_passes(reqs, scheduler, timeout_aware, delay):
    w = _one_stage_workload(reqs)
    sim = Simulator(w, scheduler=scheduler, timeout_aware=timeout_aware, delay_s=delay)
    smallest = next((n for n in range(1, w.size + 1) if sim.run([n]).ok), None)
    if smallest is not None:
        assert _lower_bound(sim, 0) <= smallest


def test_the_energy_bound_counts_work_that_must_fit_between_release_and_deadline():
    # 12 requests of 5 s released at 0, all due by 10 (T = 5, D = 5): 60 s of work in 10 s needs 6
    w = single_stage(np.zeros(12), np.full(12, 5.0), 60.0)
    sim = Simulator(w, timeout_aware=False, delay_s=5.0)
    assert _lower_bound(sim, 0) == 6
    assert search(w, [1.0], delay_s=5.0, timeout_aware=False).workers == (6,)


def test_a_large_pool_is_found_within_the_search_precision():
    # 3000 requests of 10 s over 300 s, D = 2: the smallest pool that passes, to within 1%
    arrival = np.linspace(0.0, 300.0, 3000)
    w = single_stage(arrival, np.full(3000, 10.0), 60.0)
    plan = search(w, [1.0], delay_s=2.0, timeout_aware=False)
    sim = Simulator(w, timeout_aware=False, limits=plan.limits)
    n = plan.workers[0]
    assert sim.run([n]).ok
    assert not sim.run([int(n / (1 + PRECISION)) - 1]).ok


@settings(max_examples=80, deadline=None)
@given(two_stage, st.sampled_from(["ebf", "fcfs"]), st.booleans(), st.floats(0, 3))
def test_no_pool_below_a_stages_lower_bound_passes_even_with_the_other_stage_ample(
    reqs, scheduler, timeout_aware, delay
):
    w = _two_stage_workload(reqs)
    sim = Simulator(w, scheduler=scheduler, timeout_aware=timeout_aware, delay_s=delay)
    for k in range(2):
        bound = _lower_bound(sim, k)
        if bound > 0:
            pools = [w.size, w.size]
            pools[k] = bound - 1
            assert not sim.run(pools, stop_early=False).ok


def _urgent_behind_a_backlog():
    """Two 2.9 s requests of a far batch arrive at 0; a 5 s request of a batch due at 20 (limit 22)
    arrives at 1 and, run to its 60 s timeout, would miss the limit if it waited at all."""
    return single_stage([0, 0, 1], [2.9, 2.9, 5], 60, batch=[0, 0, 1], keys=[100.0, 20.0], deadlines=[100.0, 20.0])


def test_where_a_new_worker_cannot_come_within_d_a_short_wait_needs_no_worker_of_its_own():
    # one worker: the urgent request waits 1.9 s (within D / M = 2 s) for it, then the far batch's second
    plan = search(_urgent_behind_a_backlog(), [8.0], delay_s=2.0, timeout_aware=True, lookahead_s=31.0)
    assert plan.workers == (1,)


def test_where_a_new_worker_comes_within_d_the_timeout_aware_check_counts_every_wait():
    # a worker free the moment it arrives: one for each request at once
    plan = search(_urgent_behind_a_backlog(), [8.0], delay_s=2.0, timeout_aware=True, lookahead_s=1.0)
    assert plan.workers == (3,)


def _energy_by_every_release(sim: Simulator, k: int, grid: int = 16) -> int:
    """`_lower_bound`'s bound, its energy part summed over every request at each release time."""
    w = sim.w
    idx = sim.queued_idx[k]
    if not len(idx):
        return 0
    earliest = np.maximum(w.arrival[idx], w.now) + w.times[idx, :k].sum(axis=1)
    s = w.times[idx, k]
    lim = sim.limits[w.batch[idx]]
    cut = lim - s - sim.rest_after[k][idx]
    if sim.aware[k]:
        entry = w.first_stage()[idx] == k
        bound = np.maximum(np.maximum(w.arrival[idx], sim.floor) + sim.slack, lim - sim.lt[k])
        cut = np.where(entry, np.minimum(cut, bound), cut)
    sure = cut < earliest + s
    best = peak_busy(cut[sure], (earliest + s)[sure])
    due = np.maximum(cut, earliest) + s
    order = np.argsort(due, kind="stable")
    due, s, earliest = due[order], s[order], earliest[order]
    for t1 in np.unique(np.quantile(earliest, np.linspace(0.0, 1.0, grid))):
        released = earliest >= t1
        span = due - t1
        use = released & (span > 0)
        if use.any():
            energy = np.cumsum(np.where(released, s, 0.0))[use] / span[use]
            best = max(best, math.ceil(float(energy.max()) - 1e-9))
    return int(best)


@settings(max_examples=80, deadline=None)
@given(two_stage, st.sampled_from(["ebf", "fcfs"]), st.booleans(), st.floats(0, 4))
def test_the_lower_bound_sums_the_energy_of_every_released_request(reqs, scheduler, timeout_aware, delay):
    w = _two_stage_workload(reqs)
    sim = Simulator(w, scheduler=scheduler, timeout_aware=timeout_aware, delay_s=delay)
    assert [_lower_bound(sim, k) for k in range(2)] == [_energy_by_every_release(sim, k) for k in range(2)]
