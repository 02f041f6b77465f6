"""The live replay's tenants: a trace's tenant names become the farm's tenants the same way every time, their
batches are opened under those tenants' names, the prediction gets the same shares, and the report sets each
tenant's measured extra delay beside the predicted one."""

from __future__ import annotations

import numpy as np
import pytest

from farm.app.live_replay import ReplayError, ReplayOptions, predict_result
from farm.app.live_replay.metrics import summarize, within
from farm.app.live_replay.plan import (
    farm_shares,
    split_tenants,
    tenant_ids,
    tenant_labels,
)
from farm.app.live_replay.trainer import Trainer
from farm.knobs import Knobs
from farm.protocol.scope import tenant_of
from farm.protocol.shares import FairShare
from planner.eval.trace import Trace, TraceBatch, TraceStage

STAGES = (TraceStage("compile", "cpu", 1.0, 120.0), TraceStage("execute", "gpu", 8.0, 60.0))


def trace_of(*tenants: str | None) -> Trace:
    """One batch per tenant given, in that order of start, each of its own task."""
    return Trace(STAGES, tuple(TraceBatch(f"task{k}", 0, 10.0 * k, np.array([[0.0, 5.0, 1.0]]), tenant=name)
                               for k, name in enumerate(tenants)))


def test_a_tenant_named_by_its_label_keeps_that_id_and_the_others_take_the_free_ones_in_order_of_appearance():
    assert tenant_ids(trace_of("beta", "t2", "alpha", "beta", "t7")) == {"beta": 1, "t2": 2, "alpha": 3, "t7": 7}


def test_a_batch_without_a_tenant_or_named_dash_is_the_farms_own():
    trace = trace_of(None, "-", "alpha")
    assert tenant_ids(trace) == {"alpha": 1}
    assert tenant_labels(trace) == {"alpha": "t1", "-": "-"}


def test_a_name_that_only_looks_like_a_label_is_an_ordinary_name():
    assert tenant_ids(trace_of("t01", "t1")) == {"t01": 2, "t1": 1}


def test_a_tenants_batch_is_opened_under_its_prefix_and_a_batch_without_one_under_none():
    trace = trace_of("alpha", None)
    trainer = Trainer(None, trace, "task0", 1.0, 0.0, lambda task: None, tenants=tenant_ids(trace))
    alpha, own = trace.batches
    assert tenant_of(trainer.batch_id(alpha)) == 1
    assert trainer.batch_id(own) is None


def test_split_tenants_gives_task_k_in_name_order_to_tenant_k_mod_n_plus_one():
    trace = split_tenants(trace_of(None, None, None), 2)
    assert [(b.task, b.tenant) for b in trace.batches] == [("task0", "t1"), ("task1", "t2"), ("task2", "t1")]


def test_split_tenants_refuses_more_tenants_than_tasks():
    with pytest.raises(ReplayError, match="--tenants must be 1 to the 3 tasks"):
        split_tenants(trace_of(None, None, None), 4)


def test_shares_are_published_under_the_farms_labels():
    shares = {"alpha": FairShare(3.0), "t5": FairShare(max_workers={"gpu": 1})}
    assert farm_shares(trace_of("t5", "alpha"), shares) == {"t1": FairShare(3.0), "t5": FairShare(max_workers={"gpu": 1})}


def test_a_share_for_a_tenant_the_trace_does_not_name_is_refused():
    with pytest.raises(ReplayError, match="'alhpa'.*its tenants: alpha"):
        farm_shares(trace_of("alpha"), {"alhpa": FairShare(2.0)})


def test_the_prediction_gets_the_replays_shares_by_the_traces_names(monkeypatch):
    import planner.eval.loop

    seen = {}
    monkeypatch.setattr(planner.eval.loop, "evaluate", lambda trace, knobs, **kw: seen.update(kw))
    predict_result(trace_of("alpha", "beta"), Knobs(), ReplayOptions(shares={"alpha": FairShare(3.0)}))
    assert seen["shares"] == {"alpha": FairShare(3.0)}


def test_the_prediction_serves_the_larger_share_first_when_the_pool_is_capped():
    # two tenants' batches of eight 10 s requests at once, on four workers: b's share holds three of them
    trace = Trace(STAGES[:1], tuple(TraceBatch(name, 0, 0.0, np.array([[0.0, 10.0]] * 8), tenant=name)
                                    for name in ("a", "b")))
    options = ReplayOptions(speed=1.0, startup_s=0.0, shares={"b": FairShare(3.0)})
    tenants = predict_result(trace, Knobs(policy="static:4"), options).summary()["tenants"]
    assert tenants["b"]["extra_delay_mean_s"] < tenants["a"]["extra_delay_mean_s"]


def report_of(tenants):
    return summarize(extra_delays=[0.1, 0.3, 0.2], allocated={"compile": 1.0}, busy={"compile": 1.0},
                     resources={"compile": "cpu"}, costs={"compile": 1.0}, requests=3, runtimes=[], speed=10.0,
                     policy="distrs", scheduler="ebf", delay_s=2.0, startup_s=0.0, duration_s=10.0, tenants=tenants)


def test_the_measured_report_gives_each_tenants_extra_delay_as_farm_eval_does():
    assert report_of(["a", "b", "a"])["tenants"] == {
        "a": {"batches": 2, "extra_delay_mean_s": pytest.approx(1.5), "extra_delay_max_s": pytest.approx(2.0)},
        "b": {"batches": 1, "extra_delay_mean_s": pytest.approx(3.0), "extra_delay_max_s": pytest.approx(3.0)}}


def test_with_one_tenant_the_measured_report_has_no_tenants():
    assert "tenants" not in report_of(["-", "-", "-"])


def test_the_fidelity_gives_each_tenants_error_and_fails_when_one_is_off():
    measured = report_of(["a", "b", "a"])
    predicted = {"extra_delay_mean_s": measured["extra_delay_mean_s"], "stages": measured["stages"],
                 "tenants": {"a": {"extra_delay_mean_s": 1.5}, "b": {"extra_delay_mean_s": 2.0}}}
    fidelity = within(measured, predicted)
    assert fidelity["tenants.a.extra_delay_mean_s"]["relative_error"] == pytest.approx(0.0)
    assert fidelity["tenants.b.extra_delay_mean_s"]["relative_error"] == pytest.approx(0.5)
    assert not fidelity["ok"]
