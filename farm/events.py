"""History events: what the hot path appends to a Redis stream and the recorder writes to the store.

Workers and clients only XADD one small entry per fact (`Keys.events`, field `e`, JSON), so
recording never waits on the database; the recorder drains the stream in bulk. Times are epoch seconds.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from farm.protocol.keys import Keys

# kind -> the fields it carries (besides "kind"); the contract between emitters and the recorder.
KINDS: dict[str, tuple[str, ...]] = {
    "batch_opened": ("batch", "task", "pipeline", "size", "opened_at"),
    "batch_deadline": ("batch", "estimated_at"),  # the planner's estimated completion time T (EBF key)
    "batch_completed": ("batch", "completed_at"),
    "batch_cancelled": ("batch", "cancelled_at"),
    # cancelled by the farm: its trainer was silent for the knob abandon_after_s (farm.protocol.silence)
    "batch_abandoned": ("batch", "abandoned_at"),
    "batch_sealed": ("batch", "size", "sealed_at"),  # takes no more requests: its size is what arrived
    "request_arrived": ("batch", "request", "arrived_at", "group", "stages"),
    # one per visited stage: queued (entered the stage's queue), started, finished, status, worker
    "stage_done": ("batch", "request", "stage", "queued_at", "started_at", "finished_at", "status", "worker"),
    "request_done": ("batch", "request", "status", "reward", "outcome", "finished_at", "message"),
    "worker_spawned": ("worker", "stage", "backend", "at"),  # and "pending": true when it waits for room
    "worker_placed": ("worker", "stage", "at"),  # a pending worker got its machine: allocated from here on
    "worker_ready": ("worker", "stage", "at"),
    "worker_retired": ("worker", "stage", "at"),
}


def stream_key(namespace: str) -> str:
    return Keys(namespace).events


_COMPACT = json.JSONEncoder(separators=(",", ":"))  # one encoder: json.dumps with options builds one per call


def encode(kind: str, **fields: Any) -> dict[str, str]:
    """One stream entry. Unknown kinds or missing fields are a programming error, caught here."""
    expected = KINDS.get(kind)
    if expected is None:
        raise ValueError(f"unknown history event kind {kind!r}")
    missing = [f for f in expected if f not in fields]
    if missing:
        raise ValueError(f"history event {kind!r} lacks {missing}")
    return {"e": _COMPACT.encode({"kind": kind, **fields})}


def decode(entry: Mapping[Any, Any]) -> dict[str, Any]:
    raw = entry.get("e", entry.get(b"e"))
    if isinstance(raw, bytes):
        raw = raw.decode()
    return json.loads(raw)
