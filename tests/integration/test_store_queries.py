"""What the planner daemon and the reports read from the history: previous batches, accounting, delays, decisions."""

from __future__ import annotations

import numpy as np
import pytest

from farm.knobs import Knobs
from farm.store import accounting, queries
from farm.store.decisions import record_decision
from farm.store.recorder import Recorder
from tests.integration.store_support import Emitter

pytestmark = pytest.mark.integration


@pytest.fixture
def record(settings, engine, redis_url, namespace):
    """Emit events with `record.emit` / `record.emit.batch`, then call `record()` to drain them."""
    emitter = Emitter(redis_url, namespace)
    recorder = Recorder(settings, engine)

    def drain():
        recorder.run_once()

    drain.emit = emitter
    yield drain
    emitter.close()


def test_the_previous_batch_is_an_array_of_arrivals_and_stage_times_in_stage_order(engine, record):
    record.emit.batch("b1", "t1", 100.0, [[5.0, 10.0, 3.0], [1.0, 0.0, 0.0], [2.0, 4.0, 0.0]], completed_at=120.0)
    record()
    batch = queries.previous_batch(engine, "t1")
    assert (batch.id, batch.task, batch.size, batch.opened_at, batch.completed_at) == ("b1", "t1", 3, 100.0, 120.0)
    # rows by arrival; columns r_i, compile, execute (the synthetic pipeline's order)
    np.testing.assert_allclose(batch.requests, [[1.0, 0.0, 0.0], [2.0, 4.0, 0.0], [5.0, 10.0, 3.0]])
    assert batch.earliest_at == pytest.approx(118.0)
    assert batch.extra_delay_s == pytest.approx(2.0)


def test_stage_columns_follow_the_order_asked_for(engine, record):
    record.emit.batch("b1", "t1", 100.0, [[5.0, 10.0, 3.0]], completed_at=120.0)
    record()
    batch = queries.previous_batch(engine, "t1", stages=["execute", "compile"])
    np.testing.assert_allclose(batch.requests, [[5.0, 3.0, 10.0]])


def test_the_previous_batch_is_the_latest_completed_not_a_cancelled_or_running_one(engine, record):
    record.emit.batch("old", "t1", 100.0, [[1.0, 1.0, 1.0]], completed_at=110.0)
    record.emit.batch("last", "t1", 200.0, [[2.0, 1.0, 1.0]], completed_at=210.0)
    record.emit.batch("cancelled", "t1", 300.0, [[1.0, 1.0, 1.0]], completed_at=310.0)
    record.emit("batch_cancelled", batch="cancelled", cancelled_at=305.0)
    record.emit.batch("running", "t1", 400.0, [[1.0, 1.0, 1.0]])
    record.emit.batch("other-task", "t2", 500.0, [[1.0, 1.0, 1.0]], completed_at=510.0)
    record()
    assert queries.previous_batch(engine, "t1").id == "last"
    assert queries.previous_batch(engine, "t1", before=210.0).id == "old"
    assert [b.id for b in queries.completed_batches(engine, "t1", limit=5)] == ["last", "old"]


def test_a_task_without_history_has_no_previous_batch(engine, record):
    record.emit.batch("b1", "t1", 100.0, [[1.0, 1.0, 1.0]])
    record()
    assert queries.previous_batch(engine, "t1") is None
    with pytest.raises(KeyError, match="'unknown' is not in the history store"):
        queries.previous_batch(engine, "unknown")


def test_allocated_seconds_integrate_the_workers_that_exist_over_the_window(engine, record):
    record.emit("worker_spawned", worker="c1", stage="synthetic.compile", backend="local", at=100.0)
    record.emit("worker_ready", worker="c1", stage="synthetic.compile", at=103.0)
    record.emit("worker_retired", worker="c1", stage="synthetic.compile", at=150.0)
    record.emit("worker_spawned", worker="c2", stage="synthetic.compile", backend="local", at=120.0)
    record.emit("worker_spawned", worker="g1", stage="synthetic.execute", backend="local", at=50.0)
    record.emit("worker_retired", worker="g1", stage="synthetic.execute", at=90.0)
    record()
    # c1: 100..150 (starting counts), c2: 120..200 (still there); g1 ended before the window
    assert accounting.allocated_seconds(engine, 100.0, 200.0) == pytest.approx({"synthetic.compile": 130.0})
    assert accounting.allocated_seconds(engine, 140.0, 160.0) == pytest.approx({"synthetic.compile": 30.0})
    assert accounting.allocated_seconds(engine, None, 200.0)["synthetic.execute"] == pytest.approx(40.0)
    assert [w.name for w in accounting.worker_lives(engine, 100.0, 200.0)] == ["c1", "c2"]


def test_a_pending_worker_is_allocated_only_from_its_placement_and_one_never_placed_not_at_all(engine, record):
    record.emit("worker_spawned", worker="g1", stage="synthetic.execute", backend="ray", at=100.0, pending=True)
    record.emit("worker_placed", worker="g1", stage="synthetic.execute", at=130.0)
    record.emit("worker_ready", worker="g1", stage="synthetic.execute", at=132.0)
    record.emit("worker_retired", worker="g1", stage="synthetic.execute", at=150.0)
    record.emit("worker_spawned", worker="g2", stage="synthetic.execute", backend="ray", at=100.0, pending=True)
    record.emit("worker_retired", worker="g2", stage="synthetic.execute", at=180.0)  # room never came
    record()

    assert accounting.allocated_seconds(engine, 0.0, 200.0) == pytest.approx({"synthetic.execute": 20.0})
    lives = {w.name: w for w in accounting.worker_lives(engine, 0.0, 200.0)}
    assert (lives["g1"].placed_at, lives["g2"].placed_at) == (130.0, None)
    assert lives["g2"].retired_at == 180.0


def test_a_pending_workers_start_up_counts_from_its_placement(engine, record):
    from planner.runtime.live import startup_rows

    record.emit("worker_spawned", worker="g1", stage="synthetic.execute", backend="ray", at=1000.0, pending=True)
    record.emit("worker_placed", worker="g1", stage="synthetic.execute", at=1040.0)
    record.emit("worker_ready", worker="g1", stage="synthetic.execute", at=1042.5)
    record()

    assert startup_rows(engine, since=900.0) == [("ray", "synthetic.execute", pytest.approx(2.5))]


def test_start_ups_are_read_per_backend_and_stage_from_the_worker_lives(engine, record):
    from planner.runtime.live import observed_startups

    for i, took in enumerate((20.0, 25.0, 30.0, 60.0)):
        record.emit("worker_spawned", worker=f"g{i}", stage="synthetic.execute", backend="docker", at=1000.0 + i)
        record.emit("worker_ready", worker=f"g{i}", stage="synthetic.execute", at=1000.0 + i + took)
    for i in range(3):
        record.emit("worker_spawned", worker=f"l{i}", stage="synthetic.execute", backend="local", at=1000.0 + i)
        record.emit("worker_ready", worker=f"l{i}", stage="synthetic.execute", at=1001.0 + i)
    record.emit("worker_spawned", worker="c0", stage="synthetic.compile", backend="docker", at=1000.0)  # never ready
    record.emit("worker_spawned", worker="old", stage="synthetic.execute", backend="docker", at=10.0)
    record.emit("worker_ready", worker="old", stage="synthetic.execute", at=500.0)  # before the window
    record()
    seen = observed_startups(engine, since=900.0, backend="docker")
    assert set(seen) == {"synthetic.execute"}
    execute = seen["synthetic.execute"]
    assert (execute.count, execute.median_s, execute.max_s) == (4, 27.5, 60.0) and 30.0 < execute.plan_s < 60.0
    assert observed_startups(engine, since=900.0, backend="local")["synthetic.execute"].median_s == 1.0


def test_busy_seconds_sum_stage_times_clipped_to_the_window(engine, record):
    record.emit.batch("b1", "t1", 100.0, [[0.0, 10.0, 4.0], [20.0, 6.0, 0.0]], completed_at=130.0)
    record()
    # compile: 100..110 and 120..126; execute: 110..114
    assert accounting.busy_seconds(engine) == pytest.approx({"synthetic.compile": 16.0, "synthetic.execute": 4.0})
    assert accounting.busy_seconds(engine, 105.0, 122.0) == pytest.approx({"synthetic.compile": 7.0, "synthetic.execute": 4.0})


def test_stage_usage_gives_resource_kind_cost_and_normalised_consumption(engine, record):
    record.emit("worker_spawned", worker="g1", stage="synthetic.execute", backend="local", at=100.0)
    record.emit("worker_retired", worker="g1", stage="synthetic.execute", at=120.0)
    record.emit.batch("b1", "t1", 100.0, [[0.0, 0.0, 5.0]], completed_at=105.0)
    record()
    (usage,) = accounting.stage_usage(engine, 100.0, 200.0)
    assert (usage.stage, usage.resource, usage.cost, usage.allocated_s, usage.busy_s) == (
        "synthetic.execute", "gpu", 8.0, 20.0, 5.0)
    assert usage.normalised == pytest.approx(4.0)
    assert accounting.resource_seconds([usage]) == {"gpu": 20.0}
    assert accounting.consumption([usage]) == pytest.approx(160.0)
    tuned = Knobs().with_stage("synthetic.execute", cost=2.0)
    assert accounting.stage_usage(engine, 100.0, 200.0, knobs=tuned)[0].cost == 2.0


def test_extra_delays_summarise_the_batches_completed_in_the_window(engine, record):
    for i, d in enumerate([0.0, 1.0, 2.0, 3.0, 10.0]):
        record.emit.batch(f"b{i}", "t1", 100.0 * i, [[1.0, 1.0, 1.0]], completed_at=100.0 * i + 3.0 + d)
    record()
    summary = queries.extra_delays(engine)
    assert (summary.batches, summary.mean_s, summary.max_s) == (5, pytest.approx(3.2), pytest.approx(10.0))
    assert summary.p95_s == pytest.approx(np.percentile([0, 1, 2, 3, 10], 95))
    assert queries.extra_delays(engine, 100.0, 300.0).batches == 2
    assert queries.extra_delays(engine, task="nobody") == queries.DelaySummary(0, 0.0, 0.0, 0.0)


def test_active_batches_show_their_progress_and_estimate(engine, record):
    record.emit.batch("done", "t1", 100.0, [[1.0, 1.0, 1.0]], completed_at=110.0)
    record.emit("batch_opened", batch="open", task="t2", pipeline="synthetic", size=3, opened_at=200.0)
    record.emit("batch_deadline", batch="open", estimated_at=260.0)
    record.emit("request_arrived", batch="open", request="r0", arrived_at=201.0, group=None, stages=["compile"])
    record.emit("request_arrived", batch="open", request="r1", arrived_at=202.0, group=None, stages=[])
    record.emit("request_done", batch="open", request="r1", status="ok", reward=0.0, outcome="generation_failed",
                finished_at=202.0, message="")
    record.emit("batch_opened", batch="empty", task="t2", pipeline="synthetic", size=2, opened_at=300.0)
    record()
    assert queries.active_batches(engine) == [
        queries.InFlightBatch("open", "t2", 3, 200.0, 2, 1, 260.0),
        queries.InFlightBatch("empty", "t2", 2, 300.0, 0, 0, None),
    ]


def test_decisions_are_recorded_and_read_back_over_a_window(engine):
    first = record_decision(engine, at=100.0, reason="batch_opened", policy="distrs",
                            workers={"synthetic.compile": 3, "synthetic.execute": 1}, runtime_s=0.25,
                            estimates={"b1": 180.5}, details={"epoch": 1})
    record_decision(engine, at=200.0, reason="tick", policy="distrs", workers={"synthetic.compile": 2},
                    runtime_s=0.1, estimates={})
    (found,) = queries.decisions(engine, 50.0, 150.0)
    assert found.id == first
    assert (found.at, found.reason, found.policy, found.runtime_s) == (100.0, "batch_opened", "distrs", 0.25)
    assert found.workers == {"synthetic.compile": 3, "synthetic.execute": 1}
    assert found.estimates == {"b1": 180.5}
    assert found.details == {"epoch": 1}
    assert len(queries.decisions(engine)) == 2


def test_a_decision_with_a_negative_pool_is_refused(engine):
    with pytest.raises(ValueError, match="worker counts must be >= 0"):
        record_decision(engine, at=1.0, reason="tick", policy="distrs", workers={"q": -1}, runtime_s=0.0, estimates={})
    assert queries.decisions(engine) == []


def test_the_embedded_sqlite_store_records_and_answers_the_same_queries(tmp_path, redis_url, namespace):
    from farm.config import Settings
    from farm.store.engine import open_store

    settings = Settings(redis_url=redis_url, namespace=namespace, data_dir=str(tmp_path))
    engine = open_store(settings)
    emitter = Emitter(redis_url, namespace)
    try:
        emitter.batch("b1", "t1", 100.0, [[5.0, 10.0, 3.0], [1.0, 0.0, 0.0]], completed_at=120.0)
        emitter("worker_spawned", worker="c1", stage="synthetic.compile", backend="local", at=100.0)
        Recorder(settings, engine).run_once()
        record_decision(engine, at=100.0, reason="tick", policy="distrs", workers={"synthetic.compile": 1},
                        runtime_s=0.01, estimates={"b1": 118.0})
        np.testing.assert_allclose(queries.previous_batch(engine, "t1").requests, [[1.0, 0.0, 0.0], [5.0, 10.0, 3.0]])
        assert queries.extra_delays(engine).mean_s == pytest.approx(2.0)
        assert accounting.allocated_seconds(engine, 100.0, 110.0) == {"synthetic.compile": 10.0}
        assert accounting.busy_seconds(engine) == pytest.approx({"synthetic.compile": 10.0, "synthetic.execute": 3.0})
        assert [d.estimates for d in queries.decisions(engine)] == [{"b1": 118.0}]
    finally:
        emitter.close()
        engine.dispose()
