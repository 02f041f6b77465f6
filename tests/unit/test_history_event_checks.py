"""The recorder's check of one history event: the `farm.events.KINDS` contract, typed, or a BadEvent saying why."""

from __future__ import annotations

import pytest

from farm.events import KINDS, decode, encode
from farm.store.ingest import BadEvent, clean


def _event(kind, **fields):
    return decode(encode(kind, **fields))


def test_a_well_formed_event_of_every_kind_passes():
    samples = {
        "batch_opened": dict(batch="b", task="t", pipeline="synthetic", size=4, opened_at=1.0),
        "batch_deadline": dict(batch="b", estimated_at=2.0),
        "batch_completed": dict(batch="b", completed_at=3.0),
        "batch_cancelled": dict(batch="b", cancelled_at=3.0),
        "batch_abandoned": dict(batch="b", abandoned_at=3.0),
        "batch_sealed": dict(batch="b", size=3, sealed_at=2.0),
        "request_arrived": dict(batch="b", request="r", arrived_at=1.5, group=None, stages=["compile"]),
        "stage_done": dict(batch="b", request="r", stage="compile", queued_at=1.5, started_at=None,
                           finished_at=None, status="cancelled", worker="w"),
        "request_done": dict(batch="b", request="r", status="ok", reward=1, outcome=None, finished_at=2.5, message=""),
        "worker_spawned": dict(worker="w", stage="synthetic.compile", backend="local", at=0.5),
        "worker_placed": dict(worker="w", stage="synthetic.compile", at=0.6),
        "worker_ready": dict(worker="w", stage="synthetic.compile", at=0.7),
        "worker_retired": dict(worker="w", stage="synthetic.compile", at=9.0),
    }
    assert set(samples) == set(KINDS)
    for kind, fields in samples.items():
        assert clean(_event(kind, **fields))["kind"] == kind
    assert clean(_event("request_done", **samples["request_done"]))["reward"] == 1.0


@pytest.mark.parametrize(
    "event, message",
    [
        ([1, 2], "an event must be a JSON object"),
        ({"kind": "batch_reopened"}, "unknown event kind 'batch_reopened'"),
        ({"kind": "batch_completed", "batch": "b"}, "batch_completed: lacks ['completed_at']"),
        ({"kind": "batch_completed", "batch": "b", "completed_at": "later"}, "completed_at must be a finite number"),
        ({"kind": "batch_completed", "batch": "b", "completed_at": float("inf")}, "completed_at must be a finite number"),
        ({"kind": "batch_deadline", "batch": ["b"], "estimated_at": 1.0}, "batch must be a string"),
        ({"kind": "batch_deadline", "batch": "é" * 513, "estimated_at": 1.0}, "longer than the 1024 bytes"),
        ({"kind": "batch_opened", "batch": "b", "task": "t", "pipeline": "p", "size": -1, "opened_at": 1.0},
         "size must be a whole number >= 0"),
        ({"kind": "request_arrived", "batch": "b", "request": "r", "arrived_at": 1.0, "group": None, "stages": "compile"},
         "stages must be a list of stage names"),
    ],
)
def test_a_malformed_event_is_refused_saying_why(event, message):
    with pytest.raises(BadEvent) as info:
        clean(event)
    assert message in str(info.value)
