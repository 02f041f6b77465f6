"""decide() with SIMULATE's stages in vectorised rounds, or its sweep one request at a time from its quiet
start, decides as with the sweep one request at a time from the first request."""

from __future__ import annotations

import random
from dataclasses import replace
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from farm.knobs import Knobs, StageKnobs
from planner.eval.runtime_case import snapshot
from planner.policy.capacity import Capacity
from planner.policy.decide import decide


def _decide_with(rounds: bool, snap, knobs, seed):
    """The decision with rounds at every stage (`rounds`), or at none: `pays` picks the path."""
    with mock.patch("planner.policy.simulate.pays", lambda n_workers, srv: rounds):
        return decide(snap, knobs, random.Random(seed))


def _decide_one_at_a_time(quiet: bool, snap, knobs, seed):
    """The decision with the sweep one request at a time at every stage, from its quiet start whatever
    the pool (`quiet`) or from the first request."""
    with mock.patch("planner.policy.simulate.pays", lambda n_workers, srv: False), \
            mock.patch("planner.policy.simulate.QUIET_FROM", 0 if quiet else 10**9):
        return decide(snap, knobs, random.Random(seed))


@st.composite
def _case(draw):
    snap = snapshot(draw(st.integers(100, 2500)), seed=draw(st.integers(0, 10_000)), workers=draw(st.integers(0, 60)))
    snap = replace(snap, now=snap.now + draw(st.sampled_from([0.0, 7.5, 40.0])),
                   startup_s=draw(st.sampled_from([0.0, 1.0, 30.0])))
    if draw(st.booleans()):  # a fixed cluster, or an autoscaler whose nodes take time, that may bind
        gpus = draw(st.integers(1, 40))
        capacity = Capacity(placeable={"gpu": gpus}, most={"gpu": gpus + draw(st.integers(0, 20))},
                            node_startup_s=draw(st.sampled_from([0.0, 60.0])))
        snap = replace(snap, capacity=capacity)
    knobs = Knobs(policy=draw(st.sampled_from(["distrs", "history"])), scheduler=draw(st.sampled_from(["ebf", "fcfs"])),
                  delay_s=draw(st.sampled_from([0.5, 2.0, 10.0])), tick_s=draw(st.sampled_from([1.0, 5.0])),
                  stages={s.queue: StageKnobs(max_workers=1_000_000) for s in snap.stages})
    return snap, knobs, draw(st.integers(0, 100))


@settings(max_examples=30, deadline=None)
@given(_case())
def test_rounds_and_the_one_at_a_time_sweep_decide_the_same(case):
    snap, knobs, seed = case
    assert _decide_with(True, snap, knobs, seed) == _decide_with(False, snap, knobs, seed)


@settings(max_examples=30, deadline=None)
@given(_case())
def test_the_sweep_from_its_quiet_start_and_from_the_first_request_decide_the_same(case):
    snap, knobs, seed = case
    assert _decide_one_at_a_time(True, snap, knobs, seed) == _decide_one_at_a_time(False, snap, knobs, seed)
