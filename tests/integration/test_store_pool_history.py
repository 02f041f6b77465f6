"""The history's rows behind the farm page's past pool samples (farm.store.pool_history.pool_rows), on PostgreSQL
and on the embedded SQLite store: three reads that hold what a window's pools are counted from, and no more."""

from __future__ import annotations

import pytest

from farm.store.decisions import record_decision
from farm.store.pool_history import StageVisit, Target, pool_rows
from farm.store.recorder import Recorder
from tests.integration.store_support import Emitter

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgresql", "sqlite"])
def store(request, settings):
    if request.param == "postgresql":
        yield request.getfixturevalue("engine")
        return
    from farm.store.engine import open_store

    engine = open_store(settings)
    yield engine
    engine.dispose()


def decide(engine, at, pipeline, workers):
    record_decision(engine, at=at, reason="tick", policy="distrs", workers=workers, runtime_s=0.0, estimates={},
                    details={"pipeline": pipeline})


def test_the_targets_are_the_windows_decisions_and_each_pipelines_latest_before_it(store):
    decide(store, 10.0, "a", {"a.x": 1})
    decide(store, 20.0, "a", {"a.x": 2})  # a's pools at the window's start
    decide(store, 30.0, "b", {"b.y": 5})  # b's pools at the window's start
    decide(store, 150.0, "a", {"a.x": 3})
    decide(store, 250.0, "a", {"a.x": 4})  # after the window
    assert pool_rows(store, 100.0, 200.0).targets == (Target(20.0, {"a.x": 2}), Target(30.0, {"b.y": 5}),
                                                      Target(150.0, {"a.x": 3}))


def test_the_visits_and_lives_are_those_overlapping_the_window(store, settings, redis_url, namespace):
    emit = Emitter(redis_url, namespace)
    try:
        emit.batch("b1", "t1", 50.0, [[0.0, 40.0, 0.0], [0.0, 60.0, 0.0], [0.0, 180.0, 0.0]])  # done at 90, 110, 230
        emit("worker_spawned", worker="w1", stage="synthetic.compile", backend="local", at=0.0)
        emit("worker_retired", worker="w1", stage="synthetic.compile", at=90.0)
        emit("worker_spawned", worker="w2", stage="synthetic.compile", backend="local", at=95.0)
        emit("worker_spawned", worker="w3", stage="synthetic.compile", backend="local", at=210.0)
        Recorder(settings, store).run_once()
    finally:
        emit.close()
    rows = pool_rows(store, 100.0, 200.0)
    assert sorted(rows.visits, key=lambda v: v.request_id) == [
        StageVisit("b1", "b1-r1", "synthetic.compile", 50.0, 50.0, 110.0),
        StageVisit("b1", "b1-r2", "synthetic.compile", 50.0, 50.0, 230.0)]
    assert [w.name for w in rows.lives] == ["w2"]
