"""SIMULATE: the Figure 9 case by hand, dispatch as the live queues do it, and its invariants."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.policy.simulate import Simulator, peak_busy, simulate
from planner.policy.workload import Workload, single_stage

# Figure 9 of the paper: one stage, five requests, D = 0. The history's times (a) and this batch's (b),
# where request 2 runs to the 7 s timeout.
FIG9_ARRIVALS = [0, 0, 1, 2, 6]
FIG9_HISTORY = [2, 2, 2, 1, 2]
FIG9_ACTUAL = [2, 2, 7, 1, 2]
FIG9_TIMEOUT = 7.0


def test_figure_9_history_says_two_workers_suffice():
    w = single_stage(FIG9_ARRIVALS, FIG9_HISTORY, FIG9_TIMEOUT)
    assert not simulate(w, [1], delay_s=0, timeout_aware=False).ok
    assert simulate(w, [2], delay_s=0, timeout_aware=False).ok


def test_figure_9_the_long_request_needs_three_workers():
    w = single_stage(FIG9_ARRIVALS, FIG9_ACTUAL, FIG9_TIMEOUT)
    assert not simulate(w, [2], delay_s=0, timeout_aware=False).ok
    assert simulate(w, [3], delay_s=0, timeout_aware=False).ok


def test_figure_9_the_timeout_aware_check_refuses_two_workers_on_history():
    w = single_stage(FIG9_ARRIVALS, FIG9_HISTORY, FIG9_TIMEOUT)
    assert not simulate(w, [2], delay_s=0, timeout_aware=True).ok
    assert simulate(w, [3], delay_s=0, timeout_aware=True).ok


def test_a_later_batch_with_an_earlier_deadline_is_served_first():
    # one worker busy until 5; batch 0 (key 100) queued at 1, batch 1 (key 10) queued at 2
    w = single_stage([0, 1, 2], [5, 1, 1], 60, batch=[0, 0, 1], keys=[100.0, 10.0], deadlines=[100.0, 10.0])
    ebf = simulate(w, [1], scheduler="ebf", stop_early=False)
    fcfs = simulate(w, [1], scheduler="fcfs", stop_early=False)
    assert ebf.completion[1] == 6.0 and ebf.completion[0] == 7.0
    assert fcfs.completion[0] == 6.0 and fcfs.completion[1] == 7.0


def test_a_running_request_keeps_its_worker():
    # at now = 10 one request runs 5 s more; an urgent one queued at 10 must wait for it with one worker
    w = Workload(now=10.0, arrival=[10.0, 10.0], times=[[5.0], [1.0]], running=[True, False], batch=[0, 1],
                 keys=[50.0, 11.0], deadlines=[50.0, 11.0], timeouts=[60.0], workers=[1], starting=[0])
    out = simulate(w, [1], stop_early=False)
    assert out.completion[1] == 16.0


def test_new_workers_serve_only_after_their_startup():
    w = Workload(now=0.0, arrival=[0.0], times=[[1.0]], running=[False], batch=[0], keys=[1.0], deadlines=[1.0],
                 timeouts=[60.0], workers=[0], starting=[0], startup_s=4.0)
    assert simulate(w, [1], stop_early=False).completion[0] == 5.0


def test_a_request_that_visits_no_stage_finishes_on_arrival():
    w = Workload(now=0.0, arrival=[3.0, 0.0], times=[[0.0, 0.0], [1.0, 1.0]], running=[False, False], batch=[0, 0],
                 keys=[3.0], deadlines=[3.0], timeouts=[60.0, 60.0], workers=[0, 0], starting=[0, 0])
    out = simulate(w, [1, 1], stop_early=False)
    assert out.ok and out.completion[0] == 3.0


def test_zero_workers_never_serve_a_waiting_request():
    w = single_stage([0.0], [1.0], 60)
    assert not simulate(w, [0], stop_early=False).ok


requests = st.lists(
    st.tuples(st.integers(0, 30), st.integers(1, 12), st.integers(0, 2)), min_size=1, max_size=25
)


def _workload(reqs):
    arrival = [float(a) for a, _, _ in reqs]
    times = [float(s) for _, s, _ in reqs]
    batch = [b for _, _, b in reqs]
    used = sorted(set(batch))
    batch = [used.index(b) for b in batch]
    return single_stage(arrival, times, 60.0, batch=batch)


@settings(max_examples=150, deadline=None)
@given(requests, st.integers(1, 6))
def test_one_stage_fcfs_more_workers_never_increase_any_extra_delay(reqs, n):
    w = _workload(reqs)
    fewer = simulate(w, [n], scheduler="fcfs", stop_early=False).completion
    more = simulate(w, [n + 1], scheduler="fcfs", stop_early=False).completion
    assert np.all(more <= fewer + 1e-9)


@settings(max_examples=150, deadline=None)
@given(requests, st.integers(1, 6))
def test_with_one_batch_ebf_and_fcfs_agree(reqs, n):
    w = _workload([(a, s, 0) for a, s, _ in reqs])
    ebf = simulate(w, [n], scheduler="ebf", stop_early=False, detail=True)
    fcfs = simulate(w, [n], scheduler="fcfs", stop_early=False, detail=True)
    assert np.allclose(ebf.starts[0], fcfs.starts[0])


@settings(max_examples=100, deadline=None)
@given(requests, st.integers(1, 6), st.sampled_from(["ebf", "fcfs"]), st.booleans())
def test_stopping_early_never_changes_the_answer(reqs, n, scheduler, timeout_aware):
    w = _workload(reqs)
    quick = simulate(w, [n], scheduler=scheduler, delay_s=1.0, timeout_aware=timeout_aware)
    full = simulate(w, [n], scheduler=scheduler, delay_s=1.0, timeout_aware=timeout_aware, stop_early=False)
    assert quick.ok == full.ok


@settings(max_examples=100, deadline=None)
@given(requests, st.lists(st.integers(1, 6), min_size=1, max_size=6), st.sampled_from(["ebf", "fcfs"]), st.booleans())
def test_a_run_after_probes_is_the_run_of_a_fresh_simulator(reqs, probes, scheduler, timeout_aware):
    w = _workload(reqs)
    args = dict(scheduler=scheduler, delay_s=1.0, timeout_aware=timeout_aware)
    sim = Simulator(w, **args)
    for n in probes:  # the sweeps a probe ran to the end are kept, and the last run reuses them
        sim.run([n])
    last = sim.run([probes[-1]], stop_early=False, detail=True)
    fresh = Simulator(w, **args).run([probes[-1]], stop_early=False, detail=True)
    assert last.ok == fresh.ok
    assert last.completion.tolist() == fresh.completion.tolist()
    assert np.array_equal(last.starts[0], fresh.starts[0], equal_nan=True)


def test_two_stages_show_list_scheduling_anomalies():
    # found by random search: a third compile worker reorders the execute queue and batch 1 finishes later
    w = Workload(now=0.0, arrival=[5.0, 1.0, 0.0, 5.0, 0.0, 3.0],
                 times=[[1, 2], [3, 3], [3, 1], [1, 1], [1, 4], [3, 4]], running=np.zeros(6, bool),
                 batch=[0, 1, 1, 0, 0, 1], keys=[8.0, 12.0], deadlines=[8.0, 12.0], timeouts=[9.0, 9.0],
                 workers=[0, 0], starting=[0, 0])
    two = simulate(w, [2, 1], scheduler="fcfs", stop_early=False).completion
    three = simulate(w, [3, 1], scheduler="fcfs", stop_early=False).completion
    assert list(two) == [16.0, 15.0] and list(three) == [12.0, 16.0]


queued_or_running = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 6), st.integers(0, 6), st.integers(0, 2), st.booleans()),
    min_size=1, max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(queued_or_running, st.sampled_from(["ebf", "fcfs"]), st.integers(0, 8))
def test_the_queue_free_run_equals_the_event_loop_with_a_worker_per_request(reqs, scheduler, now):
    times = np.array([[float(c), float(e)] for _, c, e, _, _ in reqs])
    running = np.array([r and (t > 0).any() for (*_, r), t in zip(reqs, times)])
    arrival = np.array([float(a) for a, *_ in reqs])
    arrival[running] = float(now)
    batch = np.array([b for *_, b, _ in reqs])
    keys = np.array([30.0, 10.0, 20.0])
    w = Workload(now=float(now), arrival=arrival, times=times, running=running, batch=batch, keys=keys,
                 deadlines=keys, timeouts=[6.0, 6.0], workers=[0, 0], starting=[0, 0])
    sim = Simulator(w, scheduler=scheduler, timeout_aware=False, limits=np.full(3, np.inf))
    fast = sim.queue_free()
    first = w.first_stage()
    loop = sim.run([int((first == k).sum() + ((times[:, k] > 0) & (first != k)).sum()) for k in range(2)],
                   stop_early=False, detail=True)
    assert np.allclose(fast.completion, loop.completion)
    for a, b in zip(fast.starts, loop.starts):
        assert np.allclose(a, b, equal_nan=True)


def _near_its_end(service):
    """Two workers busy until `service` with another batch's requests; a 5 s request of a batch due at 20
    (D 2, limit 22) arrives at 1. Run to its 60 s timeout it would miss the limit whenever it waits."""
    return single_stage([0, 0, 1], [service, service, 5], 60, batch=[0, 0, 1], keys=[100.0, 20.0],
                        deadlines=[100.0, 20.0])


def test_a_wait_of_up_to_d_over_the_stages_is_excused_by_the_timeout_aware_check():
    # one stage: the urgent request may wait up to D = 2 s, which adds at most D to its batch
    assert simulate(_near_its_end(2.9), [2], delay_s=2.0, timeout_aware=True, stop_early=False).ok
    assert simulate(_near_its_end(2.9), [2], delay_s=2.0, timeout_aware=True).ok


def test_a_longer_wait_of_a_request_near_its_batchs_end_still_fails_the_timeout_aware_check():
    assert not simulate(_near_its_end(3.5), [2], delay_s=2.0, timeout_aware=True, stop_early=False).ok
    assert not simulate(_near_its_end(3.5), [2], delay_s=2.0, timeout_aware=True).ok
    assert simulate(_near_its_end(3.5), [3], delay_s=2.0, timeout_aware=True).ok
    assert simulate(_near_its_end(3.5), [2], delay_s=2.0, timeout_aware=False).ok  # history alone lets it wait


def _peak_by_events(starts, finishes, lo, hi):
    """peak_busy as a walk over the start (+1) and finish (-1) events in time order, finishes first."""
    mask = ~np.isnan(starts) & (finishes > lo) & (starts <= hi)
    s, f = starts[mask], finishes[mask]
    if not len(s):
        return 0
    times = np.concatenate([np.maximum(s, lo), f])
    delta = np.concatenate([np.ones(len(s), dtype=np.int64), -np.ones(len(f), dtype=np.int64)])
    return int(np.cumsum(delta[np.lexsort((delta, times))]).max())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 20)), st.integers(0, 8)), max_size=40),
       st.sampled_from([-np.inf, 3.0, 5.5]), st.sampled_from([np.inf, 6.0, 9.0]))
def test_the_peak_of_busy_workers_is_the_walk_over_their_events(intervals, lo, hi):
    starts = np.array([np.nan if a is None else a / 2 for a, _ in intervals], dtype=np.float64)
    finishes = starts + np.array([d / 2 for _, d in intervals], dtype=np.float64)
    assert peak_busy(starts, finishes, lo, hi) == _peak_by_events(starts, finishes, lo, hi)
