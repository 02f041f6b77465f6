"""SIMULATE's stage in vectorised rounds (`planner.policy.rounds`) against the sweep one request at a time."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.policy.rounds import _picks, fifos, pays, sweep_rounds
from planner.policy.sweep import sweep_ebf, sweep_fcfs

_INF = float("inf")

# times on a coarse grid, so that arrivals, free times and finishes tie often
_time = st.integers(0, 40).map(lambda x: x / 4)
_service = st.integers(1, 24).map(lambda x: x / 4)


@st.composite
def _stage(draw):
    """A stage's requests in arrival order (some never served upstream: inf), its free workers and cuts."""
    n = draw(st.integers(1, 60))
    arr = sorted(draw(st.lists(_time, min_size=n, max_size=n)))
    unserved = min(draw(st.integers(0, 2)), n) if draw(st.booleans()) else 0
    arr = arr[: n - unserved] + [_INF] * unserved
    srv = draw(st.lists(_service, min_size=n, max_size=n))
    groups = draw(st.integers(1, 5))
    grp = draw(st.lists(st.integers(0, groups - 1), min_size=n, max_size=n))
    free = draw(st.lists(_time, min_size=1, max_size=30))
    cuts = st.lists(st.integers(0, 80).map(lambda x: x / 4), min_size=n, max_size=n)
    cut = draw(st.one_of(st.just([_INF] * n), cuts))
    return arr, srv, grp, groups, free, cut


def _reference(arr, srv, grp, groups, free, cut, ebf):
    heap = list(free)
    heapq.heapify(heap)
    if ebf:
        return sweep_ebf(arr + [_INF], srv, grp, groups, heap, cut)
    return sweep_fcfs(arr + [_INF], srv, heap, cut)


def _rounds(arr, srv, grp, groups, free, cut, ebf):
    ranks = np.asarray(grp, dtype=np.int64) if ebf else None
    fifo = fifos(ranks, groups, len(arr))
    return sweep_rounds(np.asarray(arr), np.asarray(srv), fifo, np.sort(free), np.asarray(cut))


@settings(max_examples=400, deadline=None)
@given(_stage(), st.booleans())
def test_rounds_finish_every_request_when_the_sweep_does_and_stop_where_it_stops(stage, ebf):
    fin, bad = _reference(*stage, ebf)
    fin_r, bad_r = _rounds(*stage, ebf)
    assert bad_r == bad
    assert fin_r.tolist() == fin


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([3, 40, 400]), st.booleans())
def test_rounds_agree_with_the_sweep_on_a_large_pool_of_long_requests(seed, workers, ebf):
    rng = np.random.default_rng(seed)
    n = 3000
    arr = np.sort(np.round(rng.uniform(0, 200, n), 1)).tolist()
    srv = np.round(rng.uniform(5, 60, n), 2).tolist()
    grp = rng.integers(0, 6, n).tolist()
    free = np.round(rng.uniform(0, 30, workers), 1).tolist()
    cut = [_INF] * n
    fin, bad = _reference(arr, srv, grp, 6, free, cut, ebf)
    fin_r, bad_r = _rounds(arr, srv, grp, 6, free, cut, ebf)
    assert (fin_r.tolist(), bad_r) == (fin, bad)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 14), st.sampled_from([300, 2000, 6000]))
def test_rounds_agree_with_the_sweep_where_several_fifos_wait_with_backlogs(seed, groups, workers):
    """A backlog in every FIFO at the first dispatch (queued before now) and a trickle after it: rounds
    whose dispatches the most urgent FIFOs share, as at the planner-runtime case's first stage."""
    rng = np.random.default_rng(seed)
    n = 4000
    backlog = int(rng.integers(0, n))
    arr = np.sort(np.concatenate([np.zeros(backlog), np.round(rng.uniform(0, 300, n - backlog), 1)])).tolist()
    srv = np.round(rng.uniform(20, 80, n), 1).tolist()
    grp = rng.integers(0, groups, n).tolist()
    free = [0.0] * workers
    cut = np.where(rng.random(n) < 0.001, rng.uniform(0, 400, n), _INF).tolist()
    fin, bad = _reference(arr, srv, grp, groups, free, cut, True)
    fin_r, bad_r = _rounds(arr, srv, grp, groups, free, cut, True)
    assert (fin_r.tolist(), bad_r) == (fin, bad)


def test_rounds_pay_only_for_many_workers_free_before_any_is_back():
    long = np.full(100, 50.0)
    assert pays(2000, long)
    assert not pays(100, long)
    assert not pays(2000, np.array([0.5, 50.0, 50.0]))


@st.composite
def _round(draw):
    """A round's dispatch times and its FIFOs' arrivals (most urgent first), some taken already; the round
    ends at the first dispatch at which no FIFO has a request arrived (a round never has one)."""
    t = np.sort(np.asarray(draw(st.lists(_time, min_size=1, max_size=40))))
    fifos = [sorted(draw(st.lists(_time, max_size=25))) for _ in range(draw(st.integers(1, 6)))]
    taken = [draw(st.integers(0, len(a))) for a in fifos]
    nxt = list(taken)
    for k in range(len(t)):
        ready = [g for g, a in enumerate(fifos) if nxt[g] < len(a) and a[nxt[g]] <= t[k]]
        if not ready:
            t = t[:k]
            break
        nxt[ready[0]] += 1
    return t, [np.asarray(a) for a in fifos], taken


def _picks_one_at_a_time(t, arrivals, taken, starts):
    nxt = list(taken)
    picks, slots = [], [[] for _ in arrivals]
    for k, at in enumerate(t):
        g = next(g for g, a in enumerate(arrivals) if nxt[g] < len(a) and a[nxt[g]] <= at)
        picks.append(starts[g] + nxt[g] - taken[g])
        slots[g].append(k)
        nxt[g] += 1
    return picks, slots


@settings(max_examples=400, deadline=None)
@given(_round())
def test_each_dispatch_of_a_round_goes_to_the_most_urgent_fifo_with_a_request_arrived(case):
    t, arrivals, taken = case
    assume(len(t) > 0)
    starts = [100 * (g + 1) for g in range(len(arrivals))]  # where each FIFO's next request sits in `order`
    order = np.arange(100 * (len(arrivals) + 2))
    p, slots = _picks(t, arrivals, taken, order, starts)
    picks, expected = _picks_one_at_a_time(t, arrivals, taken, starts)
    assert p.tolist() == picks
    assert [s.tolist() for s in slots] == expected
