"""What an embedded farm says of its pending workers when it is not ready in time."""

from __future__ import annotations

from farm.app.embedded import pending_note
from planner.backends import Worker, WorkerState


def pending(name: str, stage: str) -> Worker:
    return Worker(name=name, stage=stage, state=WorkerState.PENDING, spawned_at=0.0, backend="ray")


def test_workers_of_a_stage_no_node_can_hold_are_said_to_find_no_node():
    note = pending_note([pending("a", "cuda.execute")], {"cuda.execute"})

    assert note.startswith("1 worker(s) of cuda.execute are pending: no node of the cluster has the resources")
    assert "not started yet" not in note


def test_workers_slow_to_start_are_not_said_to_find_no_node():
    note = pending_note([pending("a", "cuda.compile")], set())

    assert note.startswith("1 worker(s) of cuda.compile are pending: not placed or not started yet")
    assert "no node" not in note


def test_both_kinds_are_named_apart():
    note = pending_note([pending("a", "s.compile"), pending("b", "s.execute"), pending("c", "s.execute")],
                        {"s.execute"})

    assert "2 worker(s) of s.execute are pending: no node" in note
    assert "1 worker(s) of s.compile are pending: not placed" in note


def test_no_pending_worker_says_nothing():
    assert pending_note([], {"s.execute"}) == ""
