"""The compiled sweeps (planner/policy/sweep.c) finish and stop as the Python loops do, so a decision is the
same with them or without; and the policy only uses what an edge installed."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rounds import _stage

from farm.knobs import Knobs, StageKnobs
from planner.eval.runtime_case import snapshot
from planner.policy import sweep
from planner.policy.decide import decide
from planner.policy.sweep import sweep_ebf, sweep_fcfs
from planner.runtime import native

_INF = float("inf")


@pytest.fixture(scope="module")
def compiled() -> native.Sweeps:
    found = native.load()
    if found is None:
        pytest.skip("no C compiler here (or FARM_PLANNER_NATIVE=0): the Python loops run")
    return found


@settings(max_examples=500, deadline=None)
@given(_stage(), st.booleans())
def test_the_compiled_sweeps_finish_and_stop_as_the_python_loops(compiled, stage, ebf):
    arr, srv, grp, groups, free, cut = stage
    if ebf:
        expected = sweep_ebf(arr + [_INF], srv, grp, groups, sorted(free), cut)
        got = compiled.ebf(np.asarray(arr), np.asarray(srv), np.asarray(grp), groups, np.sort(free), np.asarray(cut))
    else:
        expected = sweep_fcfs(arr + [_INF], srv, sorted(free), cut)
        got = compiled.fcfs(np.asarray(arr), np.asarray(srv), np.sort(free), np.asarray(cut))
    assert (got[0].tolist(), got[1]) == (list(expected[0]), expected[1])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 7, 300]), st.booleans())
def test_the_compiled_sweeps_agree_on_a_backlog_ties_and_requests_never_served_upstream(compiled, seed, workers, ebf):
    rng = np.random.default_rng(seed)
    n = 2000
    arr = np.sort(np.concatenate([np.round(rng.uniform(-5, 300, n - 50), 0), np.full(50, _INF)]))
    srv = np.round(rng.uniform(0.5, 12, n), 1)
    grp = rng.integers(0, 9, n)
    free = np.sort(np.round(rng.uniform(0, 5, workers), 0))
    cut = np.where(rng.random(n) < 0.002, rng.uniform(0, 400, n), _INF)
    if ebf:
        expected = sweep_ebf(arr.tolist() + [_INF], srv.tolist(), grp.tolist(), 9, free.tolist(), cut.tolist())
        got = compiled.ebf(arr, srv, grp, 9, free, cut)
    else:
        expected = sweep_fcfs(arr.tolist() + [_INF], srv.tolist(), free.tolist(), cut.tolist())
        got = compiled.fcfs(arr, srv, free, cut)
    assert (got[0].tolist(), got[1]) == (list(expected[0]), expected[1])


@pytest.mark.parametrize("requests", [3000, 16000])
def test_a_decision_is_the_same_with_the_compiled_sweeps_and_without(compiled, monkeypatch, requests):
    snap = snapshot(requests, seed=3)
    knobs = Knobs(policy="distrs", stages={s.queue: StageKnobs(max_workers=1_000_000) for s in snap.stages})
    with_them = decide(snap, knobs, random.Random(5))
    monkeypatch.setattr(sweep, "_compiled", [None])
    assert decide(snap, knobs, random.Random(5)) == with_them


def test_the_policy_runs_its_own_loops_until_an_edge_installs_the_compiled_ones(monkeypatch):
    monkeypatch.setattr(sweep, "_compiled", [None])
    monkeypatch.setattr(native, "_loaded", [])
    monkeypatch.setattr(native, "_build_and_load", lambda: pytest.fail("a decision built or loaded the sweeps"))
    snap = snapshot(2000, seed=1)
    knobs = Knobs(policy="distrs", stages={s.queue: StageKnobs(max_workers=1_000_000) for s in snap.stages})
    decide(snap, knobs, random.Random(0))
    assert sweep.compiled() is None


def test_switched_off_the_python_loops_run(monkeypatch):
    monkeypatch.setattr(sweep, "_compiled", [None])
    monkeypatch.setattr(native, "_loaded", [])
    monkeypatch.setenv(native.SWITCH, "0")
    assert native.load() is None and sweep.compiled() is None
