"""Pipelines as data: validation of stages and pipelines, admission, the registry."""

from __future__ import annotations

import pytest

from farm import registry
from farm.pipeline import Admission, InvalidInput, Pipeline, Stage, StageOutcome, UnknownPipeline
from farm.results import Status


def _noop(ctx):
    return StageOutcome()


def _stage(name="s", **kw):
    args = {"resource": "cpu", "cost": 1.0, "timeout_s": 10.0, "run": _noop, **kw}
    return Stage(name, **args)


def test_a_pipeline_names_each_stage_queue_after_itself():
    p = Pipeline("demo", (_stage("a"), _stage("b")), lambda payload: Admission(("a",)))
    assert p.queues == ("demo.a", "demo.b")


@pytest.mark.parametrize("kw, message", [
    ({"resource": "tpu"}, "resource"),
    ({"cost": 0.0}, "cost"),
    ({"timeout_s": float("inf")}, "timeout_s"),
])
def test_a_stage_with_a_bad_field_is_refused_with_its_name(kw, message):
    with pytest.raises(ValueError, match=message):
        _stage(**kw)


def test_a_dot_in_a_name_is_refused_because_queues_are_dotted():
    with pytest.raises(ValueError, match="letters"):
        Pipeline("a.b", (_stage(),), lambda payload: Admission(()))


def test_duplicate_stage_names_are_refused():
    with pytest.raises(ValueError, match="duplicate"):
        Pipeline("p", (_stage("x"), _stage("x")), lambda payload: Admission(()))


def test_admission_orders_the_visited_stages_as_the_pipeline_does():
    p = Pipeline("p", (_stage("a"), _stage("b"), _stage("c")), lambda payload: Admission(("c", "a")))
    assert p.checked_admit({}).stages == ("a", "c")


def test_a_payload_that_is_not_an_object_is_invalid_input():
    p = Pipeline("p", (_stage(),), lambda payload: Admission(("s",)))
    with pytest.raises(InvalidInput, match="JSON object"):
        p.checked_admit([1, 2])


def test_a_crash_in_admission_becomes_invalid_input_with_the_reason():
    def admit(payload):
        raise KeyError("times")

    p = Pipeline("p", (_stage(),), admit)
    with pytest.raises(InvalidInput, match="rejected the payload"):
        p.checked_admit({})


def test_routing_to_a_stage_the_pipeline_lacks_is_invalid_input():
    p = Pipeline("p", (_stage("a"),), lambda payload: Admission(("zz",)))
    with pytest.raises(InvalidInput, match="unknown stages"):
        p.checked_admit({})


def test_the_registry_knows_the_builtin_synthetic_pipeline():
    p = registry.get("synthetic")
    assert [s.name for s in p.stages] == ["compile", "execute"]
    assert registry.stage_by_queue("synthetic.execute")[1].resource == "gpu"


def test_an_unknown_pipeline_names_the_known_ones():
    with pytest.raises(UnknownPipeline, match="synthetic"):
        registry.get("no-such-pipeline")


def test_the_installed_pipelines_are_read_from_the_package_metadata_once_per_process(monkeypatch):
    # a scan reads every installed distribution's metadata: a new worker's kind queues once took 5 of them
    scans = []

    def counting(**kw):
        scans.append(kw)
        return real(**kw)

    real = registry.entry_points
    monkeypatch.setattr(registry, "entry_points", counting)
    registry._entry_points.cache_clear()
    try:
        registry.names()
        registry.queues_of_kind("cpu")
        with pytest.raises(UnknownPipeline):
            registry.get("no-such-pipeline")
    finally:
        registry._entry_points.cache_clear()
    assert scans == [{"group": registry.GROUP}]


def test_a_stage_worker_counts_every_queue_of_its_resource_kind_for_the_caps():
    from workers.stage import kind_queues_of

    queues = kind_queues_of("synthetic.compile")
    assert "synthetic.compile" in queues and "code.compile" in queues
    assert "synthetic.execute" not in queues  # a GPU stage


def test_registering_a_different_pipeline_under_a_taken_name_is_refused():
    registry.register(Pipeline("unit-taken", (_stage("a"),), lambda payload: Admission(())))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Pipeline("unit-taken", (_stage("b"),), lambda payload: Admission(())))


def test_statuses_that_say_nothing_about_the_response_are_maskable():
    assert {s for s in Status if s.is_maskable} == {Status.INFRA_ERROR, Status.CANCELLED, Status.INVALID_INPUT}
