"""The metrics counted from recorded history events (farm.app.metrics.history), without a store: the
lookups the store answers are given."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from farm.app.metrics.history import HistoryMetrics


@pytest.fixture
def looked_up():
    return []


@pytest.fixture
def history(looked_up):
    known = {"old": ("task-a", "synthetic")}

    def labels_of(ids):
        looked_up.append(sorted(ids))
        return {b: known[b] for b in ids if b in known}

    registry = CollectorRegistry()
    metrics = HistoryMetrics(registry, labels_of=labels_of,
                             delays_of=lambda ids: {b: ("task-a", 1.5) for b in ids})
    return metrics, registry


def opened(batch, task="task-b", pipeline="synthetic"):
    return {"kind": "batch_opened", "batch": batch, "task": task, "pipeline": pipeline, "size": 2, "opened_at": 1.0}


def done(batch, status):
    return {"kind": "request_done", "batch": batch, "request": "r", "status": status, "reward": 1.0,
            "outcome": None, "finished_at": 2.0, "message": None}


def stage(batch, name, queued, started, finished):
    return {"kind": "stage_done", "batch": batch, "request": "r", "stage": name, "queued_at": queued,
            "started_at": started, "finished_at": finished, "status": "ok", "worker": "w"}


def test_results_are_counted_by_pipeline_and_status(history):
    metrics, registry = history
    metrics.observe([opened("b1", pipeline="math"), done("b1", "ok"), done("b1", "ok"), done("b1", "wrong")])
    assert registry.get_sample_value("farm_results_total", {"pipeline": "math", "status": "ok"}) == 2
    assert registry.get_sample_value("farm_results_total", {"pipeline": "math", "status": "wrong"}) == 1


def test_a_batch_opened_in_the_same_chunk_is_not_looked_up_in_the_store(history, looked_up):
    metrics, _ = history
    metrics.observe([opened("b1"), done("b1", "ok")])
    assert looked_up == []


def test_a_batch_opened_before_is_labelled_from_the_store_once(history, looked_up):
    metrics, registry = history
    metrics.observe([done("old", "ok")])
    metrics.observe([done("old", "timeout")])
    assert looked_up == [["old"]]
    assert registry.get_sample_value("farm_results_total", {"pipeline": "synthetic", "status": "timeout"}) == 1


def test_a_batch_no_one_knows_is_counted_as_unknown_rather_than_dropped(history):
    metrics, registry = history
    metrics.observe([done("ghost", "ok")])
    assert registry.get_sample_value("farm_results_total", {"pipeline": "unknown", "status": "ok"}) == 1


def test_a_stage_counts_its_wait_its_service_and_busy_seconds_of_its_resource(history):
    metrics, registry = history
    metrics.observe([opened("b1"), stage("b1", "execute", 10.0, 12.5, 14.0), stage("b1", "compile", 9.0, 9.0, 10.0)])
    labels = {"pipeline": "synthetic", "stage": "execute"}
    assert registry.get_sample_value("farm_stage_wait_seconds_sum", labels) == pytest.approx(2.5)
    assert registry.get_sample_value("farm_stage_service_seconds_sum", labels) == pytest.approx(1.5)
    assert registry.get_sample_value("farm_worker_busy_seconds_total", {**labels, "resource": "gpu"}) == 1.5
    assert registry.get_sample_value("farm_worker_busy_seconds_total",
                                     {"pipeline": "synthetic", "stage": "compile", "resource": "cpu"}) == 1.0


def test_a_stage_cut_short_before_it_ran_counts_no_service(history):
    metrics, registry = history
    metrics.observe([opened("b1"), stage("b1", "compile", 9.0, None, 10.0)])
    labels = {"pipeline": "synthetic", "stage": "compile"}
    assert registry.get_sample_value("farm_stage_service_seconds_count", labels) is None
    assert registry.get_sample_value("farm_stage_wait_seconds_count", labels) is None


def test_a_completed_batch_observes_the_extra_delay_the_store_computed(history):
    metrics, registry = history
    metrics.observe([{"kind": "batch_completed", "batch": "old", "completed_at": 5.0}])
    assert registry.get_sample_value("farm_batch_extra_delay_seconds_count", {"task": "task-a"}) == 1
    assert registry.get_sample_value("farm_batch_extra_delay_seconds_sum", {"task": "task-a"}) == 1.5
    assert registry.get_sample_value("farm_batches_ended_total", {"task": "task-a", "outcome": "completed"}) == 1


def test_a_cancelled_batch_is_counted_as_cancelled_without_a_delay(history):
    metrics, registry = history
    metrics.observe([opened("b1"), {"kind": "batch_cancelled", "batch": "b1", "cancelled_at": 3.0}])
    assert registry.get_sample_value("farm_batches_ended_total", {"task": "task-b", "outcome": "cancelled"}) == 1
    assert registry.get_sample_value("farm_batch_extra_delay_seconds_count", {"task": "task-b"}) is None


def test_every_recorded_event_is_counted(history):
    metrics, registry = history
    metrics.observe([opened("b1"), done("b1", "ok"), {"kind": "worker_ready", "worker": "w", "stage": "s", "at": 1.0}])
    assert registry.get_sample_value("farm_recorder_events_total") == 3


def test_an_abandoned_batch_is_counted_apart_from_a_cancelled_one(history):
    metrics, registry = history
    metrics.observe([opened("b1"), {"kind": "batch_abandoned", "batch": "b1", "abandoned_at": 3.0}])
    assert registry.get_sample_value("farm_batches_ended_total", {"task": "task-b", "outcome": "abandoned"}) == 1
    assert registry.get_sample_value("farm_batches_ended_total", {"task": "task-b", "outcome": "cancelled"}) is None
