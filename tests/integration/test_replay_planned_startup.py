"""The live replay's prediction plans with the start-up the live planner's decisions planned with, as their
records in the history store (PostgreSQL) say."""

from __future__ import annotations

from farm.app.live_replay.metrics import planned_startup
from farm.store.decisions import DecisionRecord, save_decision


def _decision(at: float, pipeline: str, startup_s: float | None) -> DecisionRecord:
    details = {"pipeline": pipeline, "spawned": {}, "retired": []}
    if startup_s is not None:
        details["startup_s"] = startup_s
    return DecisionRecord(at=at, reason="tick", policy="distrs", workers={}, runtime_s=0.001, estimates={},
                          details=details)


def test_the_planned_start_up_is_the_median_of_the_runs_decisions_for_its_pipeline(engine):
    for at, pipeline, told in [(99.0, "synthetic", 50.0),  # before the run
                               (100.0, "synthetic", 1.0), (101.0, "synthetic", 9.0), (102.0, "synthetic", 4.0),
                               (101.5, "code", 30.0),  # another pipeline
                               (103.0, "synthetic", None)]:  # a record without it
        save_decision(engine, _decision(at, pipeline, told))
    assert planned_startup(engine, since=100.0, until=103.0, pipeline="synthetic") == 4.0


def test_decisions_that_do_not_say_give_no_planned_start_up(engine):
    save_decision(engine, _decision(100.0, "synthetic", None))
    assert planned_startup(engine, since=0.0, until=200.0, pipeline="synthetic") is None
