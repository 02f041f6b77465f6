"""The replay's pure parts: what is replayed, when, with which knobs, and how the report is computed."""

from __future__ import annotations

import numpy as np
import pytest

from farm.knobs import Knobs
from farm.replay import ReplayError, parse_tasks, payload, replay_knobs, schedule, select
from farm.replay_metrics import allocated_seconds, summarize, within
from planner.trace import Trace, TraceBatch, TraceStage

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


def test_a_request_sleeps_its_stage_times_divided_by_the_speed():
    assert payload(np.array([5.0, 40.0, 2.0]), 20.0) == {"times": [2.0, 0.1]}


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
