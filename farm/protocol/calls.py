"""The farm's script calls, built and their replies parsed without I/O (shared by every client flavour).

Validation happens here, before anything reaches Redis: what a pipeline rejects becomes an
`invalid_input` result; misuse that would break a batch's accounting raises (farm.errors).
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any, Sequence

from farm import events
from farm.config import Settings
from farm.errors import (
    BatchClosed,
    BatchConflict,
    BatchFull,
    BatchNotFound,
    DuplicateRequest,
    LimitExceeded,
    PayloadTooLarge,
)
from farm.knobs import Knobs
from farm.pipeline import InvalidInput, Pipeline
from farm.protocol.ids import REQUEST, TASK, check_farm_batch, check_group, shown
from farm.protocol.keys import stamp
from farm.protocol.roster import fresh_s
from farm.protocol.scripts import (
    ABANDON,
    CANCEL,
    COMPLETE,
    HEARTBEAT,
    LAPSE,
    OPEN,
    PICK,
    PREEMPT,
    SEAL,
    SET_ESTIMATE,
    SUBMIT,
    SUBMIT_MANY,
    SWEEP,
    Call,
)
from farm.protocol.silence import ABANDON_LIMIT, abandoned
from farm.protocol.state import RequestState
from farm.protocol.tokens import hard_limit
from farm.results import Result, Status

RECLAIM_LIMIT = 64  # lapsed leases given back per pick or sweep
MAX_ATTEMPTS = 3  # a request that loses this many workers fails alone (infra_error)
MAX_BATCH_SIZE = 1_000_000


# built once: json.dumps with options builds an encoder per call, a cost on the bulk submit path
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def canonical_json(payload: Any) -> str:
    try:
        return _CANONICAL.encode(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload is not JSON-serialisable: {exc}") from exc
    except RecursionError:  # a refusal like any other, not an error of the client's own
        raise InvalidInput("payload is not JSON-serialisable: its arrays and objects nest too deeply") from None


def open_call(task: Any, pipeline: Pipeline, size: Any, batch_id: str, group_size: Any, now: float) -> Call:
    TASK.check(task)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
        raise InvalidInput(f"batch size must be a whole number from 1 to {MAX_BATCH_SIZE}, not {shown(size)}")
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1):
        raise InvalidInput(f"group_size must be a whole number >= 1 or None, not {shown(group_size)}")
    check_farm_batch(batch_id)
    opened = events.encode("batch_opened", batch=batch_id, task=task, pipeline=pipeline.name, size=size,
                           opened_at=now)["e"]
    epoch = json.dumps({"kind": "opened", "batch": batch_id, "task": task, "at": now})
    return OPEN.call(batch=batch_id, task=task, pipeline=pipeline.name, size=str(size), opened_at=stamp(now),
                     group_size="" if group_size is None else str(group_size), queues=",".join(pipeline.queues),
                     opened_event=opened, epoch_message=epoch)


def parse_open(reply: list, batch_id: str, task: str) -> bool:
    """True when the batch was opened now, False when the same batch already existed."""
    kind = reply[0]
    if kind == "conflict":
        raise BatchConflict(f"batch {batch_id!r} already exists with task {reply[1]!r}, pipeline {reply[2]!r}, size {reply[3]}")
    if kind == "task":
        raise BatchConflict(f"task {task!r} belongs to pipeline {reply[1]!r}; a task keeps one pipeline")
    return kind == "opened"


@dataclass(frozen=True)
class Admitted:
    """A request checked and admitted at the client, not yet stamped: what a bulk submit checks for every
    request before it sends any."""

    request_id: str
    body: str  # the payload's canonical JSON
    group: str | None
    stages: tuple[str, ...]
    status: Status
    reward: float
    message: str
    outcome: Any


def admit(settings: Settings, pipeline: Pipeline, request_id: Any, payload: Any, group: Any) -> Admitted:
    """Admission happens here, at the client: misuse raises; what the pipeline rejects is admitted as an
    invalid_input result."""
    REQUEST.check(request_id)
    group = check_group(group)
    body = canonical_json(payload)
    size = len(body.encode())
    if size > settings.max_payload_bytes:
        raise PayloadTooLarge(f"payload of request {request_id!r} is {size} bytes, "
                              f"over the limit of {settings.max_payload_bytes}")
    try:
        a = pipeline.checked_admit(payload)
        return Admitted(request_id, body, group, tuple(a.stages), a.status, a.reward, a.message, a.outcome)
    except InvalidInput as exc:
        return Admitted(request_id, body, group, (), Status.INVALID_INPUT, 0.0, str(exc), None)


@dataclass(frozen=True)
class Cap:
    """A tenant's limit on requests outstanding over its open batches, which the submit scripts check as each
    new queued request arrives (in the same run that takes it, so racing calls cannot pass it together)."""

    tenant: int
    most: int


def stored_payload(admitted: Admitted) -> str:
    """What the farm keeps of a request's payload: all of it for a worker to run, only its digest for one
    finished at admission (refused, or visiting no stage), which is kept just to tell a resubmission with
    the same payload (a duplicate) from one with another (a conflict). A digest is never valid JSON."""
    if admitted.stages:
        return admitted.body
    return "#sha256:" + hashlib.sha256(admitted.body.encode()).hexdigest()


def submit_call(settings: Settings, pipeline: Pipeline, batch_id: str, request_id: Any, payload: Any,
                group: Any, now: float, knobs: Knobs | None = None) -> Call:
    """A submit of one request, admitted here (see `admit`)."""
    return admitted_call(pipeline, batch_id, admit(settings, pipeline, request_id, payload, group), now, knobs)


def admitted_call(pipeline: Pipeline, batch_id: str, admitted: Admitted, now: float,
                  knobs: Knobs | None = None) -> Call:
    """The submit call of an admitted request. `knobs` give the first stage's timeout, hence the hard time
    limit of its wake-up token."""
    return admitted_calls(pipeline, batch_id, [admitted], now, knobs)[0]


def admitted_calls(pipeline: Pipeline, batch_id: str, admitted: Sequence[Admitted], now: float,
                   knobs: Knobs | None = None, cap: Cap | None = None) -> list[Call]:
    """The submit calls of admitted requests arriving together, within `cap` when given. What requests on the
    same stage path share is worked out and encoded once: a bulk submit spends much of its client time here."""
    knobs, at, paths, calls = knobs or Knobs(), stamp(now), {}, []
    tenant, most = ("", "") if cap is None else (str(cap.tenant), str(cap.most))
    for a in admitted:
        path = paths.get(a.stages)
        if path is None:
            path = paths[a.stages] = _Arrival.of(pipeline, batch_id, a.stages, now, knobs)
        result = done = ""
        if not a.stages:
            res = Result(a.request_id, batch_id, a.status, a.reward, a.message, outcome=a.outcome, group=a.group,
                         finished_at=now)
            result = _COMPACT.encode(res.to_dict())
            done = request_done_event(res)
        calls.append(SUBMIT.call(batch=batch_id, request=a.request_id, payload=stored_payload(a),
                                 state=path.state(a.group), first_queue=path.first, at=at, result=result,
                                 arrived_event=path.event(a.request_id, a.group), done_event=done,
                                 group=a.group or "", limit=path.limit, tenant=tenant,
                                 most_outstanding=most))
    return calls


# stand-ins for the id and group in a path's template, found nowhere else in it (batch ids and stage names hold no NUL)
_REQUEST, _GROUP = "\0request", "\0group"


def _json_string(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


@dataclass(frozen=True)
class _Arrival:
    """What the arrivals on one stage path share: the first queue, its hard limit, and the request state and
    arrival event, encoded once by their own encoders around stand-ins that each request's id and group
    replace."""

    first: str
    limit: str
    state_parts: tuple[str, str]  # the state's JSON before and after its group
    event_parts: tuple[str, str, str]  # the event's JSON around its request id, then its group

    @classmethod
    def of(cls, pipeline: Pipeline, batch_id: str, stages: tuple[str, ...], now: float, knobs: Knobs) -> "_Arrival":
        first = pipeline.stage(stages[0]).queue if stages else ""
        limit = stamp(hard_limit(knobs.timeout_of(pipeline.stage(stages[0])))) if stages else ""
        state = RequestState(_GROUP, stages, queued_at=now).encode()
        event = events.encode("request_arrived", batch=batch_id, request=_REQUEST, arrived_at=now, group=_GROUP,
                              stages=list(stages))["e"]
        head, rest = event.split(_json_string(_REQUEST))
        middle, tail = rest.split(_json_string(_GROUP))
        return cls(first, limit, tuple(state.split(_json_string(_GROUP))), (head, middle, tail))

    def state(self, group: str | None) -> str:
        return self.state_parts[0] + _json_string(group) + self.state_parts[1]

    def event(self, request_id: str, group: str | None) -> str:
        head, middle, tail = self.event_parts
        return head + _json_string(request_id) + middle + _json_string(group) + tail


def submit_many_call(calls: list[Call]) -> Call:
    """Many submit calls as one script run: each keeps the single submit's checks and reply."""
    return Call(SUBMIT_MANY, (str(len(calls)), *(arg for call in calls for arg in call.args)))


def parse_submit(reply: list, batch_id: str, request_id: str) -> str:
    """'queued', 'finished' (visits no stage or invalid input) or 'duplicate' (the same request again)."""
    kind = reply[0]
    if kind == "unknown":
        raise BatchNotFound(f"no batch {batch_id!r}; open it first")
    if kind == "conflict":
        raise DuplicateRequest(f"request {request_id!r} of batch {batch_id!r} was already submitted with a different payload")
    if kind == "closed" and reply[1] == "abandoned":
        raise abandoned(batch_id, *reply[2:4])
    if kind == "closed":
        raise BatchClosed(f"batch {batch_id!r} is {reply[1]}; it takes no more requests", state=reply[1])
    if kind == "limit":
        raise LimitExceeded(f"this tenant has {reply[2]} requests outstanding and its limit is {reply[1]}: request "
                            f"{request_id!r} does not fit; wait for results before submitting more")
    if kind == "full":
        raise BatchFull(f"batch {batch_id!r} already has all of its {reply[1]} requests; {request_id!r} is one too many")
    return kind


def request_done_event(result: Result) -> str:
    return events.encode("request_done", batch=result.batch_id, request=result.request_id, status=result.status.value,
                         reward=result.reward, outcome=result.outcome.value if result.outcome else None,
                         finished_at=result.finished_at, message=result.message)["e"]


def cancel_call(batch_id: str, now: float) -> Call:
    return CANCEL.call(batch=batch_id, at=stamp(now))


def seal_call(batch_id: str, now: float) -> Call:
    return SEAL.call(batch=batch_id, at=stamp(now))


def parse_seal(reply: list, batch_id: str) -> str:
    """The batch's state after sealing: 'sealed' (still finishing what arrived), 'completed' or 'cancelled'."""
    if reply[0] == "unknown":
        raise BatchNotFound(f"no batch {batch_id!r} to seal")
    return reply[0]


def set_estimate_call(batch_id: str, estimated_at: float) -> Call:
    if isinstance(estimated_at, bool) or not isinstance(estimated_at, (int, float)) or not math.isfinite(estimated_at):
        raise InvalidInput(f"estimated completion must be a finite time in epoch seconds, not {shown(estimated_at)}")
    event = events.encode("batch_deadline", batch=batch_id, estimated_at=float(estimated_at))["e"]
    return SET_ESTIMATE.call(batch=batch_id, key=stamp(estimated_at), deadline_event=event)


def sweep_call(abandon_after_s: float | None) -> Call:
    """Give lapsed leases back, and abandon the batches whose trainer was silent `abandon_after_s` (the knob's
    `Knobs.abandon_after()`; None: never)."""
    return SWEEP.call(reclaim_limit=str(RECLAIM_LIMIT), max_attempts=str(MAX_ATTEMPTS),
                      abandon_after_s=stamp(abandon_after_s) if abandon_after_s else "0",
                      abandon_limit=str(ABANDON_LIMIT))


def pick_call(queue: str, worker: str, scheduler: str, lease_s: float, token: str, kind: str = "",
              kind_queues: tuple[str, ...] = (), take_token: bool = False) -> Call:
    """`kind`: the stage's resource kind, `kind_queues`: the stage queues of that kind, where a tenant's cap of
    the kind counts its workers (farm.protocol.shares); without them no cap applies, shares still do.
    `take_token`: the worker serves on (workers.stage), so the pick first takes a wake-up token from the broker's
    list, as Celery would have delivered it, and picks nothing when none is there or the worker is retiring."""
    return PICK.call(queue=queue, mode=scheduler, worker=worker, lease_s=str(lease_s), token=token,
                     reclaim_limit=str(RECLAIM_LIMIT), max_attempts=str(MAX_ATTEMPTS), kind=kind,
                     kind_queues=",".join(kind_queues or (queue,)), take_token="1" if take_token else "",
                     roster_s=str(fresh_s(lease_s)))


def preempt_call(queue: str, lease_s: float, kind: str, kind_queues: tuple[str, ...] = ()) -> Call:
    """Stop the running requests a reserving tenant waiting at `queue` takes back (farm.protocol.shares.preempted);
    `kind` and `kind_queues` as for `pick_call`."""
    return PREEMPT.call(queue=queue, kind=kind, kind_queues=",".join(kind_queues or (queue,)),
                        roster_s=str(fresh_s(lease_s)))


def lapse_call(worker: str, queue: str) -> Call:
    """The lease `worker` holds at `queue`, if any, lapses now: its backend saw it die."""
    return LAPSE.call(worker=worker, queue=queue)


def heartbeat_call(token: str, lease_s: float, batch_id: str, queue: str = "", worker: str = "",
                   now: float | None = None) -> Call:
    """Renew a lease; with `queue`, `worker` is also noted seen at `now` on its roster (farm.protocol.roster)."""
    return HEARTBEAT.call(token=token, lease_s=str(lease_s), batch=batch_id, queue=queue, worker=worker,
                          at="" if now is None else repr(now))


def abandon_call(worker: str, queue: str, status: Status, message: str, now: float) -> Call:
    return ABANDON.call(worker=worker, queue=queue, at=stamp(now), status=status.value, message=message)


def advance_call(batch_id: str, request_id: str, token: str, worker: str, queue: str, now: float, stage_event: str,
                 next_queue: str, state: str, limit: float) -> Call:
    """A worker hands a request on to its next stage's queue with its new `state`."""
    return COMPLETE.call(batch=batch_id, request=request_id, token=token, worker=worker, queue=queue, at=stamp(now),
                         stage_event=stage_event, next_queue=next_queue, state=state, result="", done_event="",
                         limit=stamp(hard_limit(limit)))


def finish_call(result: Result, token: str, worker: str, queue: str, stage_event: str) -> Call:
    """A worker finishes a request at its last stage with `result`."""
    return COMPLETE.call(batch=result.batch_id, request=result.request_id, token=token, worker=worker, queue=queue,
                         at=stamp(result.finished_at), stage_event=stage_event, next_queue="", state="",
                         result=json.dumps(result.to_dict(), separators=(",", ":")),
                         done_event=request_done_event(result), limit="")


def new_batch_id() -> str:
    return uuid.uuid4().hex
