"""The farm's script calls, built and their replies parsed without I/O (shared by every client flavour).

Validation happens here, before anything reaches Redis: what a pipeline rejects becomes an
`invalid_input` result; misuse that would break a batch's accounting raises (farm.errors).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from typing import Any

from farm import events
from farm.config import Settings
from farm.errors import BatchClosed, BatchConflict, BatchFull, BatchNotFound, DuplicateRequest, PayloadTooLarge
from farm.knobs import Knobs
from farm.pipeline import InvalidInput, Pipeline
from farm.protocol.keys import stamp
from farm.protocol.tokens import hard_limit
from farm.results import Result, Status

RECLAIM_LIMIT = 64  # lapsed leases given back per pick or sweep
MAX_ATTEMPTS = 3  # a request that loses this many workers fails alone (infra_error)
MAX_BATCH_SIZE = 1_000_000
_BATCH_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_TASK = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def canonical_json(payload: Any) -> str:
    try:
        return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload is not JSON-serialisable: {exc}") from exc


class Call:
    """One script invocation; `args` follow the namespace and the stream cap."""

    __slots__ = ("script", "args")

    def __init__(self, script: str, *args: Any) -> None:
        self.script = script
        self.args = args


def check_batch_id(batch_id: Any) -> str:
    if not isinstance(batch_id, str) or not _BATCH_ID.match(batch_id):
        raise InvalidInput(f"batch id must be 1-128 letters, digits or '_.:-', not {batch_id!r}")
    return batch_id


def open_call(task: Any, pipeline: Pipeline, size: Any, batch_id: str, group_size: Any, now: float) -> Call:
    if not isinstance(task, str) or not _TASK.match(task):
        raise InvalidInput(f"task must be 1-64 letters, digits or '_.-', not {task!r}")
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
        raise InvalidInput(f"batch size must be a whole number from 1 to {MAX_BATCH_SIZE}, not {size!r}")
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1):
        raise InvalidInput(f"group_size must be a whole number >= 1 or None, not {group_size!r}")
    check_batch_id(batch_id)
    opened = events.encode("batch_opened", batch=batch_id, task=task, pipeline=pipeline.name, size=size,
                           opened_at=now)["e"]
    epoch = json.dumps({"kind": "opened", "batch": batch_id, "task": task, "at": now})
    return Call("open", batch_id, task, pipeline.name, str(size), stamp(now),
                "" if group_size is None else str(group_size), ",".join(pipeline.queues), opened, epoch)


def parse_open(reply: list, batch_id: str, task: str) -> bool:
    """True when the batch was opened now, False when the same batch already existed."""
    kind = reply[0]
    if kind == "conflict":
        raise BatchConflict(f"batch {batch_id!r} already exists with task {reply[1]!r}, pipeline {reply[2]!r}, size {reply[3]}")
    if kind == "task":
        raise BatchConflict(f"task {task!r} belongs to pipeline {reply[1]!r}; a task keeps one pipeline")
    return kind == "opened"


def submit_call(settings: Settings, pipeline: Pipeline, batch_id: str, request_id: Any, payload: Any,
                group: Any, now: float, knobs: Knobs | None = None) -> Call:
    """Admission happens here, at the client: what the pipeline rejects becomes an invalid_input result.
    `knobs` give the first stage's timeout, hence the hard time limit of its wake-up token."""
    if not isinstance(request_id, str) or not 1 <= len(request_id) <= 256 or not request_id.isprintable():
        raise InvalidInput(f"request id must be 1-256 printable characters, not {request_id!r}")
    if group is not None:
        if isinstance(group, bool) or not isinstance(group, (str, int)) or str(group) == "":
            raise InvalidInput(f"group must be a non-empty string or an integer, not {group!r}")
        group = str(group)
    body = canonical_json(payload)
    if len(body.encode()) > settings.max_payload_bytes:
        raise PayloadTooLarge(f"payload of request {request_id!r} is {len(body.encode())} bytes, "
                              f"over the limit of {settings.max_payload_bytes}")
    try:
        admission = pipeline.checked_admit(payload)
        stages, status, reward, message, outcome = admission.stages, admission.status, admission.reward, admission.message, admission.outcome
    except InvalidInput as exc:
        stages, status, reward, message, outcome = (), Status.INVALID_INPUT, 0.0, str(exc), None
    state = json.dumps({"g": group, "st": list(stages), "c": {}, "r": [], "qa": now}, separators=(",", ":"))
    arrived = events.encode("request_arrived", batch=batch_id, request=request_id, arrived_at=now, group=group,
                            stages=list(stages))["e"]
    first = pipeline.stage(stages[0]).queue if stages else ""
    limit = stamp(hard_limit((knobs or Knobs()).timeout_of(pipeline.stage(stages[0])))) if stages else ""
    result = done = ""
    if not stages:
        res = Result(request_id, batch_id, status, reward, message, outcome=outcome, group=group, finished_at=now)
        result = json.dumps(res.to_dict(), separators=(",", ":"))
        done = request_done_event(res)
    return Call("submit", batch_id, request_id, body, state, first, stamp(now), result, arrived, done, group or "",
                limit)


def parse_submit(reply: list, batch_id: str, request_id: str) -> str:
    """'queued', 'finished' (visits no stage or invalid input) or 'duplicate' (the same request again)."""
    kind = reply[0]
    if kind == "unknown":
        raise BatchNotFound(f"no batch {batch_id!r}; open it first")
    if kind == "conflict":
        raise DuplicateRequest(f"request {request_id!r} of batch {batch_id!r} was already submitted with a different payload")
    if kind == "closed":
        raise BatchClosed(f"batch {batch_id!r} is {reply[1]}; it takes no more requests", state=reply[1])
    if kind == "full":
        raise BatchFull(f"batch {batch_id!r} already has all of its {reply[1]} requests; {request_id!r} is one too many")
    return kind


def request_done_event(result: Result) -> str:
    return events.encode("request_done", batch=result.batch_id, request=result.request_id, status=result.status.value,
                         reward=result.reward, outcome=result.outcome.value if result.outcome else None,
                         finished_at=result.finished_at, message=result.message)["e"]


def cancel_call(batch_id: str, now: float) -> Call:
    return Call("cancel", batch_id, stamp(now))


def set_estimate_call(batch_id: str, estimated_at: float) -> Call:
    if isinstance(estimated_at, bool) or not isinstance(estimated_at, (int, float)) or not math.isfinite(estimated_at):
        raise InvalidInput(f"estimated completion must be a finite time in epoch seconds, not {estimated_at!r}")
    event = events.encode("batch_deadline", batch=batch_id, estimated_at=float(estimated_at))["e"]
    return Call("set_estimate", batch_id, stamp(estimated_at), event)


def sweep_call() -> Call:
    return Call("sweep", str(RECLAIM_LIMIT), str(MAX_ATTEMPTS))


def new_batch_id() -> str:
    return uuid.uuid4().hex
