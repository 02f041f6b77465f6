"""The replay's pure parts: what is replayed, when, with which knobs, and how the report is computed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from farm.app.live_replay import ReplayError, ReplayOptions, parse_tasks, predict_result, same_run, select
from farm.app.live_replay.metrics import allocated_seconds, summarize, within
from farm.app.live_replay.physics import dispatch_latencies, exit_lags, fit_startup, startup_samples
from farm.app.live_replay.plan import MIN_LIVE_TICK_S, due_together, payload, replay_knobs, schedule, trace_knobs
from farm.knobs import Knobs
from planner.eval.trace import Trace, TraceBatch, TraceStage
from planner.policy.capacity import UNBOUNDED, Capacity

STAGES = (TraceStage("compile", "cpu", 1.0, 120.0), TraceStage("execute", "gpu", 8.0, 60.0))


def batch(task, k, start, rows):
    return TraceBatch(task, k, start, np.array(rows, dtype=float))


TRACE = Trace(
    STAGES,
    (
        batch("a", 0, 10.0, [[5.0, 40.0, 2.0], [1.0, 0.0, 0.0]]),
        batch("a", 1, 110.0, [[3.0, 50.0, 4.0]]),
        batch("b", 0, 30.0, [[2.0, 120.0, 0.0]]),
    ),
)


def test_select_keeps_the_first_batches_of_the_named_tasks():
    picked = select(TRACE, ["a"], 1)
    assert [(b.task, b.batch) for b in picked.batches] == [("a", 0)]


def test_select_by_count_takes_the_first_tasks_in_name_order():
    assert select(TRACE, 1).tasks == ("a",)


def test_select_names_an_unknown_task_and_lists_the_known_ones():
    with pytest.raises(ReplayError, match="no task 'z'.*a, b"):
        select(TRACE, ["z"])


def test_parse_tasks_reads_a_count_or_names():
    assert parse_tasks("2") == 2
    assert parse_tasks("a, b") == ["a", "b"]
    assert parse_tasks(None) is None


def test_the_schedule_opens_each_batch_before_its_requests_on_the_compressed_clock():
    events = schedule(TRACE, "a", speed=10.0)
    assert [(e.at, e.batch.batch, e.index) for e in events] == [
        (0.0, 0, -1), (0.1, 0, 1), (0.5, 0, 0), (10.0, 1, -1), (10.3, 1, 0),
    ]


CROWDED = Trace(STAGES, (batch("a", 0, 0.0, [[1.0, 1.0, 0.0], [2.0, 1.0, 0.0], [3.0, 1.0, 0.0]]),
                         batch("a", 1, 2.5, [[0.0, 1.0, 0.0]])))


def test_a_trainer_on_time_sends_one_request_per_round_trip():
    events = schedule(CROWDED, "a", speed=1.0)
    assert [(e.batch.batch, e.index) for e in due_together(events, 1, elapsed=1.0)] == [(0, 0)]


def test_a_trainer_behind_its_schedule_sends_every_due_request_of_the_batch_at_once():
    events = schedule(CROWDED, "a", speed=1.0)  # batch 0 opens at 0, its r0 at 1 and r1 at 2; batch 1 at 2.5; r2 at 3
    assert [e.index for e in due_together(events, 1, elapsed=2.2)] == [0, 1]


def test_requests_sent_together_stop_at_the_next_batch_opening():
    events = schedule(CROWDED, "a", speed=1.0)
    due = due_together(events, 1, elapsed=10.0)
    assert [e.index for e in due] == [0, 1] and events[1 + len(due)].index == -1


def test_a_request_sleeps_its_stage_times_divided_by_the_speed():
    assert payload(np.array([5.0, 40.0, 2.0]), 20.0) == {"times": [2.0, 0.1]}


def test_a_compressed_run_decides_no_more_often_than_the_live_floor_and_its_prediction_knows():
    knobs = trace_knobs(Knobs(tick_s=1.0), TRACE, ReplayOptions(speed=20.0, pipeline="synthetic"))
    assert knobs.tick_s == pytest.approx(MIN_LIVE_TICK_S * 20.0)
    assert replay_knobs(knobs, TRACE, "synthetic", 20.0).tick_s == pytest.approx(MIN_LIVE_TICK_S)


def test_a_run_slow_enough_keeps_the_knobs_tick():
    assert trace_knobs(Knobs(tick_s=1.0), TRACE, ReplayOptions(speed=1.0, pipeline="synthetic")).tick_s == 1.0


def test_replay_knobs_divide_timeouts_delay_and_tick_by_the_speed_and_take_the_trace_costs():
    knobs = replay_knobs(Knobs(delay_s=2.0, tick_s=10.0), TRACE, "synthetic", 20.0)
    assert knobs.delay_s == pytest.approx(0.1) and knobs.tick_s == pytest.approx(0.5)
    assert knobs.stage("synthetic.compile").timeout_s == pytest.approx(6.0)
    assert knobs.stage("synthetic.execute").cost == 8.0


def test_allocated_seconds_clip_each_life_to_the_window_and_count_a_live_worker_to_its_end():
    lives = [(0.0, 5.0), (8.0, None), (20.0, 30.0), (2.0, 12.0)]
    assert allocated_seconds(lives, start=4.0, end=15.0) == pytest.approx(1.0 + 7.0 + 0.0 + 8.0)


def test_the_summary_scales_times_back_by_the_speed_and_weights_the_cost_by_stage():
    report = summarize(
        extra_delays=[0.1, 0.3], allocated={"compile": 10.0, "execute": 2.0}, busy={"compile": 5.0, "execute": 0.0},
        resources={"compile": "cpu", "execute": "gpu"}, costs={"compile": 1.0, "execute": 8.0}, requests=7,
        runtimes=[0.01, 0.03], speed=10.0, policy="distrs", scheduler="ebf", delay_s=2.0, startup_s=20.0,
        duration_s=300.0,
    )
    assert report["extra_delay_mean_s"] == pytest.approx(2.0) and report["extra_delay_max_s"] == pytest.approx(3.0)
    assert report["stages"]["compile"] == {"resource": "cpu", "allocated_s": 100.0, "busy_s": 50.0, "normalized": 2.0}
    assert report["stages"]["execute"]["normalized"] is None
    assert report["resources"] == {"cpu": 100.0, "gpu": 20.0} and report["cost"] == pytest.approx(260.0)
    assert report["planner_runtime_max_s"] == pytest.approx(0.03)
    assert report["batches"] == 2 and report["requests"] == 7


def test_fidelity_fails_when_one_stage_is_off_by_more_than_the_tolerance():
    stages = {"compile": {"allocated_s": 100.0}, "execute": {"allocated_s": 10.0}}
    predicted = {"extra_delay_mean_s": 1.0, "stages": {"compile": {"allocated_s": 110.0}, "execute": {"allocated_s": 10.0}}}
    assert within({"extra_delay_mean_s": 1.1, "stages": stages}, predicted)["ok"]
    stages["execute"]["allocated_s"] = 12.0
    assert not within({"extra_delay_mean_s": 1.1, "stages": stages}, predicted)["ok"]


# ---------------------------------------------------------------- the run's worker physics, for the prediction


def test_start_ups_count_from_their_decision_and_rank_after_those_under_way():
    spawns = [(10.0, {"s.compile": 2, "s.execute": 1}), (11.0, {"s.compile": 1}), (12.0, {})]
    lives = [("s.compile", 10.1, 11.5), ("s.compile", 10.2, 11.8), ("s.execute", 10.3, 12.0),
             ("s.compile", 11.1, 13.0)]
    # the fourth: asked at 11.0, when all three of the first decision were still starting
    assert startup_samples(spawns, lives) == [(1, pytest.approx(1.5)), (2, pytest.approx(1.8)),
                                              (3, pytest.approx(2.0)), (4, pytest.approx(2.0))]


def test_a_worker_no_decision_spawned_is_not_a_start_up_sample():
    assert startup_samples([(10.0, {"s.execute": 1})], [("s.compile", 10.1, 11.0), ("s.execute", 9.0, 9.5)]) == []


def test_the_start_up_fit_recovers_a_base_and_a_per_start_increment():
    samples = [(n, 0.4 + 0.1 * n) for n in (1, 2, 3, 4, 1, 2)]
    base, per, count = fit_startup(samples)
    assert (base, per, count) == (pytest.approx(0.4), pytest.approx(0.1), 6)


def test_the_start_up_fit_is_the_median_when_load_does_not_matter_and_none_without_samples():
    assert fit_startup([(1, 1.0), (1, 2.0), (1, 4.0)]) == (2.0, 0.0, 3)
    assert fit_startup([(1, 2.0), (2, 1.5), (3, 1.0)])[1] == 0.0  # faster under load: no per-start term
    assert fit_startup([(1, 1.0), (2, 1.5)]) is None


def test_an_exit_lag_counts_from_the_retirement_or_the_end_of_the_last_request():
    assert exit_lags([(10.0, None, 10.6), (10.0, 12.0, 12.5), (10.0, 8.0, 10.7), (10.0, None, 9.0)]) == [
        pytest.approx(0.6), pytest.approx(0.5), pytest.approx(0.7)]


def test_dispatch_latency_counts_from_when_both_the_request_and_its_worker_were_free():
    stages = [("w1", 0.0, 1.1, 2.0), ("w1", 1.5, 2.05, 3.0), ("w1", 4.0, 4.02, 5.0), ("w2", 0.0, 0.5, 1.0)]
    # w1 ready at 1.0; w2's ready time is unknown: its first request is no sample
    assert dispatch_latencies(stages, {"w1": 1.0, "w2": None}) == [
        pytest.approx(0.1), pytest.approx(0.05), pytest.approx(0.02)]


def test_the_prediction_takes_the_runs_physics_times_the_speed(monkeypatch):
    import planner.eval.loop

    seen = {}
    monkeypatch.setattr(planner.eval.loop, "evaluate", lambda trace, knobs, **kw: seen.update(kw))
    report = {"startup_s": 1.5, "physics": {"startup_s": 0.5, "startup_per_start_s": 0.1, "retire_s": 0.6,
                                            "dispatch_s": 0.02}}
    options = same_run(ReplayOptions(speed=10.0, startup_s=1.0), report)
    predict_result(TRACE, Knobs(), options)
    assert seen["startup_s"] == pytest.approx(5.0) and seen["startup_per_start_s"] == pytest.approx(1.0)
    assert seen["retire_s"] == pytest.approx(6.0) and seen["dispatch_s"] == pytest.approx(0.2)
    assert seen["policy_startup_s"] == pytest.approx(15.0)  # told the larger of configured and observed


def test_the_prediction_plans_with_the_start_up_the_live_decisions_planned_with(monkeypatch):
    import planner.eval.loop

    seen = {}
    monkeypatch.setattr(planner.eval.loop, "evaluate", lambda trace, knobs, **kw: seen.update(kw))
    report = {"startup_s": 1.5, "policy_startup_s": 2.5,
              "physics": {"startup_s": 0.5, "startup_per_start_s": 0.1, "retire_s": 0.6, "dispatch_s": 0.02}}
    predict_result(TRACE, Knobs(), same_run(ReplayOptions(speed=10.0, startup_s=1.0), report))
    assert seen["policy_startup_s"] == pytest.approx(25.0)


PHYSICS = {"startup_s": 0.5, "startup_per_start_s": 0.1, "retire_s": 0.6, "dispatch_s": 0.02}


def test_the_prediction_replays_on_the_cluster_the_live_decisions_planned_within(monkeypatch):
    import planner.eval.loop

    seen = {}
    monkeypatch.setattr(planner.eval.loop, "evaluate", lambda trace, knobs, **kw: seen.update(kw))
    report = {"startup_s": 1.5, "capacity": {"gpu": 2, "cpu": 12}, "physics": PHYSICS}
    predict_result(TRACE, Knobs(), same_run(ReplayOptions(speed=10.0), report))
    assert seen["capacity"] == Capacity(placeable={"gpu": 2, "cpu": 12}, most={"gpu": 2, "cpu": 12})


def test_a_run_whose_decisions_record_no_capacity_is_predicted_on_the_options_cluster():
    report = {"startup_s": 1.5, "capacity": None, "physics": PHYSICS}
    assert same_run(ReplayOptions(speed=10.0), report).capacity == UNBOUNDED
    assert same_run(ReplayOptions(speed=10.0), {**report, "capacity": {}}).capacity == UNBOUNDED


def test_the_prediction_on_a_smaller_cluster_holds_its_gpu_workers_within_it():
    wide = Trace(STAGES, tuple(batch("a", k, 10.0 + 300.0 * k, [[float(i), 5.0, 30.0] for i in range(8)])
                               for k in range(2)))
    options = ReplayOptions(speed=10.0, startup_s=0.0, capacity=Capacity(placeable={"gpu": 1}, most={"gpu": 1}))
    small = predict_result(wide, Knobs(), options)
    free = predict_result(wide, Knobs(), replace(options, capacity=UNBOUNDED))
    assert small.summary()["capacity"] == {"gpu": 1}
    assert max(pools[1] for _, pools in small.timeline) == 1  # execute's pool, at every change
    assert small.summary()["extra_delay_mean_s"] > free.summary()["extra_delay_mean_s"]


def test_the_replay_options_refuse_a_negative_physics_parameter():
    with pytest.raises(ReplayError, match="retire_s"):
        ReplayOptions(retire_s=-0.5)
