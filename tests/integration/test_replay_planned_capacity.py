"""The live replay's prediction replays on the cluster the live planner planned within, as its decisions'
records in the history store (PostgreSQL) say."""

from __future__ import annotations

from farm.app.live_replay.metrics import planned_capacity
from farm.store.decisions import DecisionRecord, save_decision


def _decision(at: float, pipeline: str, capacity: dict | None) -> DecisionRecord:
    details = {"pipeline": pipeline, "spawned": {}, "retired": []}
    if capacity is not None:
        details["capacity"] = {kind: {"placeable": placeable, "most": most} for kind, (placeable, most) in capacity.items()}
    return DecisionRecord(at=at, reason="tick", policy="distrs", workers={}, runtime_s=0.001, estimates={},
                          details=details)


def test_the_planned_capacity_is_the_most_per_kind_that_most_of_the_runs_decisions_saw(engine):
    for at, pipeline, capacity in [(99.0, "synthetic", {"gpu": (8, 8)}),  # before the run
                                   (100.0, "synthetic", {"gpu": (2, 2), "cpu": (12, 12)}),
                                   (101.0, "synthetic", {"gpu": (1, 2), "cpu": (10, 12)}),  # a worker being placed
                                   (102.0, "synthetic", {"gpu": (2, 3), "cpu": (12, 12)}),  # a node seen late
                                   (101.5, "code", {"gpu": (4, 4)}),  # another pipeline
                                   (103.0, "synthetic", None)]:  # a record without it
        save_decision(engine, _decision(at, pipeline, capacity))
    assert planned_capacity(engine, since=100.0, until=103.0, pipeline="synthetic") == {"gpu": 2, "cpu": 12}


def test_decisions_on_an_unbounded_cluster_give_no_kind_bounded(engine):
    save_decision(engine, _decision(100.0, "synthetic", {}))
    assert planned_capacity(engine, since=0.0, until=200.0, pipeline="synthetic") == {}


def test_decisions_that_do_not_say_give_no_planned_capacity(engine):
    save_decision(engine, _decision(100.0, "synthetic", None))
    assert planned_capacity(engine, since=0.0, until=200.0, pipeline="synthetic") is None
