"""The replay: the policy in the loop over a trace, with docs/design.md's metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from farm.knobs import Knobs, StageKnobs
from planner.eval.loop import evaluate
from planner.eval.startup import Startup
from planner.eval.trace import Trace, TraceBatch, TraceStage
from planner.eval.tracegen import GeneratorParams, generate


@pytest.fixture(scope="module")
def small_trace() -> Trace:
    return generate(GeneratorParams(tasks=2, batches=3, batch_size=40, time_scale=0.05), seed=11)


def _knobs(policy: str, scheduler: str = "ebf", trace=None) -> Knobs:
    return Knobs(policy=policy, scheduler=scheduler, tick_s=1.0,
                 stages={f"trace.{s.name}": StageKnobs(max_workers=10_000) for s in trace.stages})


@pytest.mark.parametrize("policy", ["distrs", "history", "ideal", "zq-dedicated", "static:3,2"])
def test_the_replays_busy_seconds_equal_the_traces_stage_times(small_trace, policy):
    result = evaluate(small_trace, _knobs(policy, trace=small_trace))
    expected = sum(b.times.sum(axis=0) for b in small_trace.batches)
    assert np.allclose(result.busy_s, expected)
    assert result.requests == small_trace.num_requests


def test_ample_static_pools_finish_every_batch_at_its_earliest(small_trace):
    result = evaluate(small_trace, _knobs("static:1000,1000", trace=small_trace))
    assert result.extra_delay.max() < 1e-6


def test_allocated_seconds_are_the_integral_of_the_pools(small_trace):
    result = evaluate(small_trace, _knobs("static:2,1", trace=small_trace))
    duration = result.end_s - min(b.start_s for b in small_trace.batches)
    assert np.allclose(result.allocated_s, [2 * duration, duration])


def test_a_slow_start_up_delays_the_first_requests():
    stage = TraceStage("run", "cpu", 1.0, 60.0)
    trace = Trace(stages=(stage,), batches=(TraceBatch("a", 0, 0.0, np.array([[0.0, 1.0]])),))
    quick = evaluate(trace, _knobs("static:1", trace=trace))
    slow = evaluate(trace, _knobs("static:1", trace=trace), startup_s=5.0)
    assert quick.extra_delay[0] == 0.0 and slow.extra_delay[0] == pytest.approx(5.0)


def test_a_request_that_visits_no_stage_completes_its_batch_on_arrival():
    stage = TraceStage("run", "cpu", 1.0, 60.0)
    trace = Trace(stages=(stage,), batches=(TraceBatch("a", 0, 0.0, np.array([[0.0, 1.0], [7.0, 0.0]])),))
    result = evaluate(trace, _knobs("distrs", trace=trace))
    assert result.completed[0] == 7.0 and result.extra_delay[0] == 0.0


def test_the_summary_has_the_reported_fields(small_trace):
    s = evaluate(small_trace, _knobs("distrs", trace=small_trace)).summary()
    for key in ("policy", "scheduler", "batches", "requests", "extra_delay_mean_s", "extra_delay_p95_s",
                "extra_delay_max_s", "stages", "resources", "planner_runtime_mean_s", "planner_runtime_max_s"):
        assert key in s
    assert set(s["stages"]) == {"compile", "execute"}
    assert set(s["stages"]["execute"]) >= {"allocated_s", "busy_s", "normalized"}


def test_with_a_jittered_start_up_each_new_worker_draws_its_own():
    trace = _one_stage([[0.0, 50.0]] * 40)
    result = evaluate(trace, _knobs("static:40", trace=trace), startup=Startup("lognormal", median_s=5.0, sigma=0.5))
    # one decision, forty new workers, each takes one long request as it comes: the batch waits for the slowest
    assert result.extra_delay[0] > 5.0 * math.exp(0.5) and result.startup == "lognormal:5,0.5"


def test_a_jittered_replay_is_the_same_for_the_same_seed_and_differs_for_another(small_trace):
    knobs, jitter = _knobs("distrs", trace=small_trace), Startup("lognormal", median_s=2.0, sigma=0.5)
    a, b = (evaluate(small_trace, knobs, startup=jitter, seed=3) for _ in range(2))
    c = evaluate(small_trace, knobs, startup=jitter, seed=4)
    assert np.array_equal(a.allocated_s, b.allocated_s) and np.array_equal(a.extra_delay, b.extra_delay)
    assert not np.array_equal(a.allocated_s, c.allocated_s)


def test_the_policy_plans_with_the_start_up_s_ninetieth_percentile(small_trace, monkeypatch):
    import planner.eval.loop as loop

    told = []
    real = loop.decide

    def spy(snapshot, knobs, rng):
        told.append(snapshot.startup_s)
        return real(snapshot, knobs, rng)

    monkeypatch.setattr(loop, "decide", spy)
    jitter = Startup("lognormal", median_s=2.0, sigma=0.5)
    evaluate(small_trace, _knobs("distrs", trace=small_trace), startup=jitter)
    assert told and all(t == pytest.approx(jitter.quantile(0.9)) for t in told)


def test_a_shrinking_pool_keeps_its_ready_workers_over_those_still_starting():
    import random

    from planner.eval.state import FarmState
    from planner.policy.snapshot import Decision

    trace = _one_stage([[0.0, 1.0]])
    farm = FarmState(trace, _knobs("distrs", trace=trace), kind="distrs", pipeline="trace", startup=Startup.fixed(5.0),
                     startup_rng=random.Random(0), startup_per_start_s=0.0, retire_s=0.0, policy_startup_s=5.0,
                     dispatch_s=0.0)
    pool = farm.pool(0, "a")
    pool.idle, pool.starting = 2, {100: 4.0, 101: 6.0}  # two just ready (not dispatched yet), two to come
    farm.apply(Decision({"trace.run": 3}, {}, "shrink"), now=1.0)
    assert pool.idle == 2 and list(pool.starting) == [100]  # the one to be ready last goes first


def test_a_replay_whose_workers_become_ready_as_the_policy_shrinks_the_pool_still_finishes():
    # a replay that once stalled: ready workers retired before the starting ones, a pool that never served
    stages = (TraceStage("compile", "cpu", 1.0, 12.0), TraceStage("execute", "gpu", 8.0, 6.0),
              TraceStage("report", "io", 0.5, 3.0))
    rng = np.random.default_rng(3)
    batches = []
    for task in ("a", "b"):
        for k in range(3):
            req = np.column_stack([rng.uniform(0, 10, 12), rng.uniform(1, 5, 12), rng.uniform(0.2, 2, 12),
                                   np.full(12, 0.5)])
            req[0, 1:] = 0.0
            batches.append(TraceBatch(task, k, 40.0 * k + (5.0 if task == "b" else 0.0), req))
    trace = Trace(stages=stages, batches=tuple(batches))
    result = evaluate(trace, _knobs("distrs", trace=trace), startup=Startup.fixed(5.0))
    assert np.isfinite(result.completed).all() and result.extra_delay.mean() < 5.0


# ---------------------------------------------------------------- the worker physics of a live run (off by default)


def _one_stage(rows):
    stage = TraceStage("run", "cpu", 1.0, 60.0)
    return Trace(stages=(stage,), batches=(TraceBatch("a", 0, 0.0, np.array(rows, dtype=float)),))


def test_start_ups_under_load_come_in_turn_after_those_under_way():
    trace = _one_stage([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    knobs = _knobs("static:3", trace=trace)
    flat = evaluate(trace, knobs, startup_s=1.0)
    loaded = evaluate(trace, knobs, startup_s=1.0, startup_per_start_s=0.5)
    # one decision, three new workers: ready at 1.5, 2.0 and 2.5; T is 1
    assert flat.extra_delay[0] == pytest.approx(1.0)
    assert loaded.extra_delay[0] == pytest.approx(2.5)


def test_a_dispatch_latency_delays_each_request_and_holds_its_worker_not_its_busy_seconds():
    trace = _one_stage([[0.0, 1.0], [0.0, 1.0]])
    result = evaluate(trace, _knobs("static:1", trace=trace), dispatch_s=0.25)
    assert result.extra_delay[0] == pytest.approx(2 * 1.25 - 1.0)  # one worker, two requests in turn
    assert result.busy_s[0] == pytest.approx(2.0)


def test_an_exit_lag_keeps_retired_workers_allocated_and_changes_no_busy_second(small_trace):
    knobs = _knobs("distrs", trace=small_trace)
    quick = evaluate(small_trace, knobs)
    lagging = evaluate(small_trace, knobs, retire_s=5.0)
    assert np.allclose(lagging.busy_s, quick.busy_s)
    assert lagging.allocated_s.sum() > quick.allocated_s.sum()
    assert max(sum(c) for _, c in lagging.timeline) >= max(sum(c) for _, c in quick.timeline)


def test_the_defaults_are_farm_evals_model(small_trace):
    knobs = _knobs("distrs", trace=small_trace)
    plain = evaluate(small_trace, knobs, startup_s=2.0)
    explicit = evaluate(small_trace, knobs, startup_s=2.0, startup_per_start_s=0.0, retire_s=0.0, dispatch_s=0.0,
                      policy_startup_s=2.0)
    assert np.array_equal(plain.extra_delay, explicit.extra_delay)
    assert np.array_equal(plain.allocated_s, explicit.allocated_s)


@pytest.mark.parametrize("name", ["startup_per_start_s", "retire_s", "dispatch_s", "policy_startup_s"])
def test_a_negative_physics_parameter_is_refused(small_trace, name):
    with pytest.raises(ValueError, match=name):
        evaluate(small_trace, _knobs("distrs", trace=small_trace), **{name: -1.0})
