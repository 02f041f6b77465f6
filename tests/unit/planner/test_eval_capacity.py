"""`farm eval --capacity`: the replay on a fixed-size cluster, and the policy planning within it (issue 36)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from click.testing import CliRunner

from farm.app.cli import main
from farm.knobs import Knobs, StageKnobs
from farm.pipeline import RESOURCES
from planner.eval import trace as tr
from planner.eval.handlers import HANDLERS
from planner.eval.loop import evaluate
from planner.eval.startup import Startup
from planner.eval.state import FINISH, FarmState
from planner.policy.capacity import Capacity, parse_capacity
from planner.policy.snapshot import Decision

RUNTIME_ONLY = ("planner_runtime_mean_s", "planner_runtime_max_s")


def _replay(*args: str) -> dict:
    result = CliRunner().invoke(main, ["eval", "demo", "--json", *args])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    for key in RUNTIME_ONLY:
        out.pop(key)
    return out


def test_a_capacity_names_workers_per_resource_kind():
    capacity = parse_capacity("gpu=2, cpu=16", RESOURCES)
    assert capacity.limit("gpu") == capacity.ready("gpu") == 2 and capacity.limit("cpu") == 16
    assert capacity.limit("io") is None


@pytest.mark.parametrize("text, says", [
    ("gpu=-1", "whole number"), ("gpu=1.5", "whole number"), ("gpu", "KIND=WORKERS"), ("=2", "one of cpu, gpu, io"),
    ("tpu=2", "one of cpu, gpu, io"), ("gpu=2,gpu=3", "named twice"), ("", "KIND=WORKERS"), ("gpu=2,", "KIND=WORKERS"),
])
def test_a_capacity_that_does_not_parse_is_refused_with_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says):
        parse_capacity(text, RESOURCES)


def test_eval_refuses_a_malformed_capacity_naming_the_option():
    result = CliRunner().invoke(main, ["eval", "demo", "--capacity", "gpu=-1"])
    assert result.exit_code != 0 and "--capacity" in result.output and "whole number" in result.output


def test_eval_refuses_a_capacity_that_leaves_a_stage_no_worker():
    result = CliRunner().invoke(main, ["eval", "demo", "--capacity", "gpu=0"])
    assert result.exit_code != 0 and "'execute' runs on gpu workers" in result.output


@pytest.mark.parametrize("policy", ["distrs", "zq-dedicated"])
def test_a_capacity_at_least_the_pools_peak_replays_exactly_as_without_one(policy):
    t = tr.read(tr.resolve("demo"))
    knobs = Knobs(policy=policy, stages={f"trace.{s.name}": StageKnobs(max_workers=100_000) for s in t.stages})
    timeline = evaluate(t, knobs, startup=Startup.fixed(0.0)).timeline
    peak = {s.resource: max(c[k] for _, c in timeline) for k, s in enumerate(t.stages)}
    within = _replay("--policy", policy, "--capacity", ",".join(f"{kind}={n}" for kind, n in peak.items()))
    assert within.pop("capacity") == peak and within.pop("capacity_bound_decisions") == 0
    assert within == _replay("--policy", policy)


def test_a_binding_capacity_predicts_more_delay_for_fewer_gpu_seconds():
    free, bound = _replay(), _replay("--capacity", "gpu=2,cpu=16")
    assert bound["capacity_bound_decisions"] > 0
    assert bound["extra_delay_mean_s"] > free["extra_delay_mean_s"]
    assert bound["extra_delay_max_s"] > free["extra_delay_max_s"]
    assert bound["resources"]["gpu"] < free["resources"]["gpu"]


def test_the_table_says_the_cluster_it_replayed_on():
    result = CliRunner().invoke(main, ["eval", "demo", "--capacity", "gpu=2"])
    assert result.exit_code == 0, result.output
    assert "on a cluster of 2 gpu workers" in result.output


def test_compare_is_refused_with_a_capacity():
    result = CliRunner().invoke(main, ["eval", "demo", "--compare", "--capacity", "gpu=2"])
    assert result.exit_code != 0 and "--capacity" in result.output


def _farm(capacity: Capacity, startup_s: float = 5.0) -> FarmState:
    stages = (tr.TraceStage("a", "gpu", 1.0, 10.0), tr.TraceStage("b", "gpu", 1.0, 10.0))
    batch = tr.TraceBatch("t", 0, 0.0, np.array([[0.0, 1.0, 1.0]]))
    return FarmState(tr.Trace(stages=stages, batches=(batch,)), Knobs(), kind="distrs", pipeline="trace",
                     startup=Startup.fixed(startup_s), startup_rng=random.Random(0), startup_per_start_s=0.0,
                     retire_s=0.0, policy_startup_s=5.0, dispatch_s=0.0, capacity=capacity)


def test_workers_asked_for_beyond_the_capacity_pend_and_cost_nothing():
    farm = _farm(Capacity({"gpu": 2}))
    farm.apply(Decision({"trace.a": 2, "trace.b": 2}, {}, "more than the cluster holds"), 0.0)
    assert farm.counts() == (2, 0)
    farm.account(10.0)
    assert farm.alloc.tolist() == [20.0, 0.0]


def test_a_pending_worker_starts_once_a_worker_of_its_kind_is_gone():
    farm = _farm(Capacity({"gpu": 2}))
    farm.apply(Decision({"trace.a": 2, "trace.b": 2}, {}, "more than the cluster holds"), 0.0)
    farm.apply(Decision({"trace.a": 1, "trace.b": 2}, {}, "a gives one back"), 1.0)
    assert farm.counts() == (1, 1)
    assert farm.snapshot(1.0).capacity == Capacity({"gpu": 2})


def test_a_pending_worker_starts_when_a_busy_worker_of_its_kind_retires_at_the_end_of_its_request():
    farm = _farm(Capacity({"gpu": 1}), startup_s=0.0)
    farm.apply(Decision({"trace.a": 1, "trace.b": 1}, {}, "one gpu for two stages"), 0.0)
    farm.enqueue(farm.batches[0], 0, 0, 0.0)
    farm.dispatch(0.0)
    farm.apply(Decision({"trace.a": 0, "trace.b": 1}, {}, "a's request runs on"), 0.5)
    assert farm.counts() == (1, 0)
    time, kind, event = farm.events.pop()
    while kind != FINISH:  # the replay's first open and tick
        time, kind, event = farm.events.pop()
    HANDLERS[FINISH](farm, time, event)
    farm.place(time)
    assert (time, farm.counts()) == (1.0, (0, 1))
