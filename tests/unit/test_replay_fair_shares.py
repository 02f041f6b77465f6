"""The replay divides a stage's workers between tenants by their fair shares, as pick.lua does
(farm.protocol.shares), so `farm eval` predicts what a flooding tenant does to the others."""

from __future__ import annotations

import numpy as np

from farm.knobs import Knobs
from farm.protocol.shares import FairShare
from planner.eval.loop import evaluate
from planner.eval.trace import Trace, TraceBatch, TraceStage

STAGES = (TraceStage("run", "cpu", 1.0, 100.0),)


def flood(tenant_a: str | None = "a", tenant_b: str | None = "b") -> Trace:
    """B opens ten batches of four 10 s requests at 0; A one batch of two 1 s requests at 1 s."""
    batches = [TraceBatch("flood", n, 0.0, [[0.0, 10.0]] * 4, tenant=tenant_b) for n in range(10)]
    batches.append(TraceBatch("steady", 0, 1.0, [[0.0, 1.0]] * 2, tenant=tenant_a))
    return Trace(STAGES, tuple(batches))


def completed(result, task: str) -> np.ndarray:
    return np.array([c for c, t in zip(result.completed, result.tasks) if t == task])


def test_a_tenant_arriving_behind_a_flood_is_served_within_its_share():
    result = evaluate(flood(), Knobs(policy="static:2"))
    # of two workers, A is entitled to one: its two requests run as soon as one of B's ends, at 10 s
    assert completed(result, "steady").max() <= 12.0 + 1e-9


def test_without_tenants_the_flood_is_served_first_by_its_earlier_deadline():
    result = evaluate(flood(None, None), Knobs(policy="static:2"))
    assert completed(result, "steady").max() > 100.0


def test_a_cap_holds_a_tenant_to_that_many_workers_while_others_stay_free():
    shares = {"b": FairShare(max_workers={"cpu": 1})}
    result = evaluate(flood(), Knobs(policy="static:3"), shares=shares)
    # B's forty 10 s requests on one worker, one after another
    assert completed(result, "flood").max() == 400.0
    assert result.summary()["tenants"]["a"]["extra_delay_max_s"] == 0.0


def test_a_larger_share_gets_a_tenant_more_of_the_workers():
    trace = Trace(STAGES, tuple(TraceBatch(t, n, 0.0, [[0.0, 10.0]] * 6, tenant=t) for t in ("a", "b")
                                for n in range(2)))
    even = evaluate(trace, Knobs(policy="static:4"))
    skewed = evaluate(trace, Knobs(policy="static:4"), shares={"a": FairShare(3.0)})
    assert completed(skewed, "a").max() < completed(even, "a").max()
    assert completed(skewed, "b").mean() > completed(even, "b").mean()  # the same work ends at 60 s either way


def test_the_report_gives_each_tenant_its_extra_delay_only_when_there_are_several():
    assert "tenants" in evaluate(flood(), Knobs(policy="static:2")).summary()
    assert "tenants" not in evaluate(flood(None, None), Knobs(policy="static:2")).summary()


def test_the_planner_asks_for_no_more_workers_than_the_caps_of_the_tenants_with_work():
    shares = {"a": FairShare(max_workers={"cpu": 1}), "b": FairShare(max_workers={"cpu": 2})}
    result = evaluate(flood(), Knobs(policy="ideal"), shares=shares)
    assert max(counts[0] for _, counts in result.timeline) <= 3


def test_a_reserved_share_is_held_idle_for_its_tenant_while_its_batch_is_open():
    # A's batch opens at 0, its two 1 s requests arrive at 5 s; B floods at 0 with 10 s requests
    batches = [TraceBatch("flood", n, 0.0, [[0.0, 10.0]] * 4, tenant="b") for n in range(10)]
    batches.append(TraceBatch("steady", 0, 0.0, [[5.0, 1.0]] * 2, tenant="a"))
    trace = Trace(STAGES, tuple(batches))
    shared = evaluate(trace, Knobs(policy="static:4"))
    reserved = evaluate(trace, Knobs(policy="static:4"), shares={"a": FairShare(reserve=True)})
    assert completed(reserved, "steady").max() == 6.0  # served on arrival by the two workers held for it
    assert completed(shared, "steady").max() > 10.0  # behind the first of B's requests to end
