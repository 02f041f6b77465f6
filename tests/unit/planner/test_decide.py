"""decide(): the policy entry point shared by the daemon and the evaluation."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.knobs import Knobs
from planner.policy.decide import _band, _reserve, _steady, decide, parse_policy
from planner.policy.snapshot import DONE, QUEUED, RUNNING, ActiveBatch, Need, Snapshot, StageState

STAGES = (StageState("compile", "cpu", 1.0, 120.0, "cuda.compile"), StageState("execute", "gpu", 8.0, 60.0, "cuda.execute"))


def _snapshot(now=150.0, workers=0):
    rng = np.random.default_rng(0)
    r = 100 + rng.gamma(2.0, 30.0, 200)
    history = np.column_stack([r, rng.normal(50, 5, 200).clip(1, 120), rng.normal(3, 1, 200).clip(0.1, 60)])
    batch = ActiveBatch("b1", "t", 0.0, 200, arrival=[101.0, 104.0, 140.0], stage=[1, 0, 0],
                        state=[QUEUED, RUNNING, QUEUED], since=[149.0, 104.0, 140.0])
    stages = tuple(StageState(s.name, s.resource, s.cost, s.timeout_s, s.queue, workers=workers) for s in STAGES)
    return Snapshot(now=now, pipeline="cuda", stages=stages, batches=(batch,), history={"t": history})


def test_decide_is_deterministic_for_a_seed():
    a = decide(_snapshot(), Knobs(), random.Random(5))
    b = decide(_snapshot(), Knobs(), random.Random(5))
    assert a == b


def test_decide_never_reads_the_clock(monkeypatch):
    def clock():
        raise AssertionError("the policy read the clock")

    for name in ("time", "monotonic", "perf_counter", "time_ns"):
        monkeypatch.setattr(time, name, clock)
    decision = decide(_snapshot(), Knobs(), random.Random(1))
    assert set(decision.workers) == {"cuda.compile", "cuda.execute"}
    assert decision.estimates["b1"] > 150.0


def test_workers_are_clamped_to_the_knobs():
    knobs = Knobs().with_stage("cuda.compile", min_workers=3, max_workers=4).with_stage("cuda.execute", max_workers=0)
    decision = decide(_snapshot(now=50.0), knobs, random.Random(1))
    assert decision.workers == {"cuda.compile": 3, "cuda.execute": 0}


def test_no_active_batch_gives_the_minimum_pools():
    snap = Snapshot(now=0.0, pipeline="cuda", stages=STAGES)
    knobs = Knobs().with_stage("cuda.compile", min_workers=2)
    assert decide(snap, knobs, random.Random(1)).workers == {"cuda.compile": 2, "cuda.execute": 0}


def test_static_pools_are_what_the_policy_names():
    decision = decide(_snapshot(), Knobs(policy="static:7,2"), random.Random(1))
    assert decision.workers == {"cuda.compile": 7, "cuda.execute": 2}


def test_zq_dedicated_gives_each_task_its_own_pools():
    decision = decide(_snapshot(), Knobs(policy="zq-dedicated"), random.Random(1))
    assert set(decision.dedicated) == {"t"}
    assert decision.workers == decision.dedicated["t"]


def test_ideal_needs_the_actual_requests():
    with pytest.raises(ValueError, match="ideal"):
        decide(_snapshot(), Knobs(policy="ideal"), random.Random(1))


@pytest.mark.parametrize("name", ["nope", "static:", "static:1,x", "static:1,2,3"])
def test_unknown_policies_are_refused_with_the_list(name):
    with pytest.raises(ValueError, match="polic|pools"):
        parse_policy(name, 2)


def test_the_timeout_aware_policy_never_gives_fewer_workers_than_history_alone():
    snap = _snapshot(now=380.0)
    distrs = decide(snap, Knobs(policy="distrs"), random.Random(2)).workers
    history = decide(snap, Knobs(policy="history"), random.Random(2)).workers
    assert all(distrs[q] >= history[q] for q in distrs)


def test_no_spare_worker_when_the_next_decision_comes_within_d():
    snap = _snapshot(now=380.0)  # the batch is in its end phase: due within the sum of the timeouts
    keys = np.array([400.0])
    assert _reserve(snap, keys, Knobs(delay_s=2.0, tick_s=1.0)).tolist() == [0, 0]


def test_a_batch_in_its_end_phase_gets_a_spare_per_stage_when_the_next_decision_is_further_than_d():
    snap = _snapshot(now=380.0)
    keys = np.array([400.0])
    assert _reserve(snap, keys, Knobs(delay_s=2.0, tick_s=10.0)).tolist() == [1, 1]


def _end_phase(stage, state, outstanding=0, startup_s=30.0):
    """A batch near its end: its arrived requests at `stage` in `state`, `outstanding` still to come."""
    n = len(stage)
    batch = ActiveBatch("b", "t", 0.0, n + outstanding, arrival=[100.0] * n, stage=stage, state=state,
                        since=[370.0] * n)
    history = np.column_stack([np.full(50, 100.0), np.full(50, 50.0), np.full(50, 3.0)])  # compile 50 s, execute 3 s
    return Snapshot(now=380.0, pipeline="cuda", stages=STAGES, batches=(batch,), history={"t": history},
                    startup_s=startup_s)


def test_spares_are_never_more_than_the_requests_that_may_still_reach_the_stage():
    snap = _end_phase(stage=[0, 0], state=[RUNNING, QUEUED])  # two compiles left, nothing more to come
    spares = _reserve(snap, np.array([400.0]), Knobs(delay_s=2.0, tick_s=1.0))
    assert spares.tolist() == [1, 2]  # compile: only the queued one may arrive; execute: either


def test_a_stage_whose_requests_are_short_keeps_few_spares_however_long_a_worker_takes_to_start():
    snap = _end_phase(stage=[0] * 100, state=[QUEUED] * 100, startup_s=30.0)
    spares = _reserve(snap, np.array([400.0]), Knobs(delay_s=2.0, tick_s=1.0))
    # a spare taken at execute (3 s) is free again long before a new worker (30 s) could be ready
    assert spares.tolist() == [31, 4]


def test_without_history_a_spare_counts_as_taken_until_its_replacement_is_ready():
    snap = _end_phase(stage=[0] * 100, state=[QUEUED] * 100, startup_s=30.0)
    cold = Snapshot(now=snap.now, pipeline="cuda", stages=STAGES, batches=snap.batches, startup_s=30.0)
    assert _reserve(cold, np.array([400.0]), Knobs(delay_s=2.0, tick_s=1.0)).tolist() == [31, 31]


def test_a_cold_batch_with_requests_still_to_come_keeps_one_spare_per_stage_for_its_next_arrival():
    snap = _end_phase(stage=[0] * 100, state=[QUEUED] * 100, outstanding=50, startup_s=30.0)
    cold = Snapshot(now=snap.now, pipeline="cuda", stages=STAGES, batches=snap.batches, startup_s=30.0)
    assert _reserve(cold, np.array([400.0]), Knobs(delay_s=2.0, tick_s=1.0), cold=("b",)).tolist() == [1, 1]


def test_a_cold_batch_keeps_its_spares_once_every_request_has_arrived():
    snap = _end_phase(stage=[0] * 100, state=[QUEUED] * 100, outstanding=0, startup_s=30.0)
    cold = Snapshot(now=snap.now, pipeline="cuda", stages=STAGES, batches=snap.batches, startup_s=30.0)
    assert _reserve(cold, np.array([400.0]), Knobs(delay_s=2.0, tick_s=1.0), cold=("b",)).tolist() == [31, 31]


def test_a_cold_farm_holds_no_idle_pool_from_its_first_hint():
    batch = ActiveBatch("b", "t", 0.0, 512)  # opened: nothing arrived, no history anywhere
    snap = Snapshot(now=1.0, pipeline="cuda", stages=STAGES, batches=(batch,), startup_s=30.0)
    workers = decide(snap, Knobs(delay_s=2.0, tick_s=1.0), random.Random(0)).workers
    # the next arrival's compile worker, and a spare at each stage (it may pass compile quickly): not 31 per stage
    assert workers == {"cuda.compile": 2, "cuda.execute": 1}


def test_a_batch_far_from_its_end_gets_no_spare():
    snap = _end_phase(stage=[0] * 10, state=[QUEUED] * 10)
    assert _reserve(snap, np.array([380.0 + 181.0]), Knobs(delay_s=2.0, tick_s=1.0)).tolist() == [0, 0]


def test_with_instant_start_ups_a_pool_under_ten_workers_keeps_no_surplus_worker():
    assert _band(need=5, current=6, startup_s=0.0) == 5


def test_where_a_replacement_takes_a_start_up_a_small_pool_keeps_one_surplus_worker():
    assert _band(need=5, current=6, startup_s=2.0) == 6
    assert _band(need=5, current=7, startup_s=2.0) == 5


def test_a_pool_up_to_ten_percent_over_its_need_is_kept():
    assert _band(need=20, current=22, startup_s=0.0) == 22
    assert _band(need=20, current=23, startup_s=0.0) == 20


def _needs(at_and_execute):
    return tuple(Need(at, {"cuda.compile": 5, "cuda.execute": n}) for at, n in at_and_execute)


def _with_recent(snap, recent, startup_s=30.0):
    return replace(snap, recent=recent, startup_s=startup_s)


def test_a_decision_reports_its_own_need_for_the_next_one():
    decision = decide(_snapshot(), Knobs(), random.Random(1))
    assert decision.need is not None and decision.need.at == 150.0
    assert set(decision.need.workers) == {"cuda.compile", "cuda.execute"}


def test_a_need_seen_at_one_decision_alone_starts_no_worker_where_workers_take_a_start_up():
    snap = _with_recent(_snapshot(), _needs([(148.0, 2), (149.0, 2)]))
    need = {"cuda.compile": 5, "cuda.execute": 300}
    assert _steady(snap, need, tick_s=1.0)["cuda.execute"] == 2


def test_a_need_seen_twice_in_a_row_is_followed():
    snap = _with_recent(_snapshot(), _needs([(148.0, 2), (149.0, 300)]))
    assert _steady(snap, {"cuda.compile": 5, "cuda.execute": 310}, tick_s=1.0)["cuda.execute"] == 300


def test_with_instant_start_ups_every_need_is_followed_at_once():
    snap = _with_recent(_snapshot(), _needs([(148.0, 2), (149.0, 2)]), startup_s=0.0)
    assert _steady(snap, {"cuda.compile": 5, "cuda.execute": 300}, tick_s=1.0)["cuda.execute"] == 300


def test_needs_older_than_a_third_of_a_start_up_do_not_hold_a_pool_back():
    snap = _with_recent(_snapshot(), _needs([(139.0, 2), (139.5, 2)]))  # 30 s start-up: a 10 s window
    assert _steady(snap, {"cuda.compile": 5, "cuda.execute": 300}, tick_s=1.0)["cuda.execute"] == 300


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=2, max_size=12), st.integers(0, 500))
def test_a_steadied_need_lies_between_the_least_and_the_most_of_its_window(past, now_need):
    snap = _with_recent(_snapshot(), _needs([(150.0 - 0.4 * (len(past) - i), n) for i, n in enumerate(past)]))
    window = [*past, now_need]  # all within the last 10 s (a third of the 30 s start-up)
    got = _steady(snap, {"cuda.compile": 5, "cuda.execute": now_need}, tick_s=1.0)["cuda.execute"]
    assert min(window) <= got <= max(window)


def _gap(next_arrival, startup_s=30.0):
    """One execute worker, idle since 140; the batch's next request reaches execute at `next_arrival`."""
    oracle = [[100.0, 0.0, 40.0], [next_arrival, 0.0, 5.0]]
    batch = ActiveBatch("b", "t", 0.0, 2, arrival=[100.0], stage=[1], state=[DONE], since=[140.0], oracle=oracle)
    stages = (STAGES[0], replace(STAGES[1], workers=1))
    return Snapshot(now=150.0, pipeline="cuda", stages=stages, batches=(batch,), startup_s=startup_s)


def test_an_idle_worker_is_kept_through_a_gap_shorter_than_its_replacements_start_up():
    # idle from 150 to 170: 20 s kept cost less than the 30 s a replacement is allocated while it starts
    assert decide(_gap(170.0), Knobs(policy="ideal"), random.Random(1)).workers["cuda.execute"] == 1


def test_an_idle_worker_is_retired_through_a_gap_longer_than_its_replacements_start_up():
    # idle from 150 to 200: a replacement started at 170 is ready in time and costs 30 s, not 50
    assert decide(_gap(200.0), Knobs(policy="ideal"), random.Random(1)).workers["cuda.execute"] == 0
