"""The sweep's first dispatches at once (`quiet_start`) and then one request at a time, against the sweep
from the first request."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rounds import _reference, _stage

from planner.policy.sweep import quiet_start, sweep_ebf, sweep_fcfs

_INF = float("inf")


def _from_quiet_start(arr, srv, grp, groups, free, cut, ebf):
    m, first, heap = quiet_start(np.asarray(arr), np.asarray(srv), np.sort(free), np.asarray(cut))
    fin = first.tolist() + [0.0] * (len(arr) - m)
    if ebf:
        return sweep_ebf(arr + [_INF], srv, grp, groups, heap, cut, m, fin)
    return sweep_fcfs(arr + [_INF], srv, heap, cut, m, fin)


@settings(max_examples=400, deadline=None)
@given(_stage(), st.booleans())
def test_the_sweep_from_its_quiet_start_finishes_and_stops_as_from_the_first_request(stage, ebf):
    assert _from_quiet_start(*stage, ebf) == _reference(*stage, ebf)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([5, 60, 700]), st.booleans())
def test_the_quiet_start_agrees_with_the_sweep_on_a_backlog_then_a_trickle(seed, workers, ebf):
    """Requests queued before now, all started at now if the pool holds them, then arrivals that the pool
    keeps up with for a while and then does not: the planner-runtime case's second stage."""
    rng = np.random.default_rng(seed)
    n = 3000
    backlog = int(rng.integers(0, 2 * workers))
    arr = np.sort(np.concatenate([np.round(rng.uniform(-5, 0, backlog), 1),
                                  np.round(rng.uniform(0, 300, n - backlog) ** 2 / 300, 2)])).tolist()
    srv = np.round(rng.uniform(0.5, 12, n), 2).tolist()
    grp = rng.integers(0, 8, n).tolist()
    free = [0.0] * workers
    cut = np.where(rng.random(n) < 0.001, rng.uniform(0, 400, n), _INF).tolist()
    assert _from_quiet_start(arr, srv, grp, 8, free, cut, ebf) == _reference(arr, srv, grp, 8, free, cut, ebf)


def test_requests_that_never_overlap_all_start_at_once_at_their_arrivals():
    m, first, heap = quiet_start(np.array([0.0, 2.0, 4.0]), np.array([1.0, 1.0, 1.0]), np.array([0.0]),
                                 np.full(3, _INF))
    assert (m, first.tolist(), heap) == (3, [1.0, 3.0, 5.0], [5.0])


def test_a_backlog_beyond_the_pool_is_left_to_the_sweep_which_picks_who_waits():
    m, _, heap = quiet_start(np.array([-2.0, -1.0, -1.0]), np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0]),
                             np.full(3, _INF))
    assert (m, heap) == (0, [0.0, 0.0])


def test_a_prefix_with_a_late_start_is_left_to_the_sweep_which_finds_where_it_stops():
    m, _, _ = quiet_start(np.array([0.0, 2.0]), np.array([1.0, 1.0]), np.array([0.0]), np.array([_INF, 1.0]))
    assert m == 0


def test_a_request_waiting_for_a_busy_worker_ends_the_quiet_start_since_a_more_urgent_one_may_overtake_it():
    # the second request waits for the worker free at 5; the third, more urgent, arrives meanwhile and
    # starts first (at 5); in arrival order it would have waited for the worker free at 7
    stage = ([0.0, 1.0, 2.0, 20.0], [10.0, 3.0, 1.0, 1.0], [1, 1, 0, 1], 2, [0.0, 5.0, 7.0], [_INF] * 4)
    m, _, _ = quiet_start(np.array(stage[0]), np.array(stage[1]), np.array(stage[4]), np.array(stage[5]))
    assert m == 1
    assert _from_quiet_start(*stage, True) == _reference(*stage, True)
