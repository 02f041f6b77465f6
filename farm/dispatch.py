"""Exact Earliest Batch First on Redis: the farm's own index of pending requests, leases and results.

Broker priorities cannot reorder queued messages, so a Celery message is only a wake-up token: the
worker that takes it picks, atomically in one Lua call, the most urgent pending request of its stage.
Per stage queue the index holds a sorted set of batches by EBF key (estimated completion, the open
time until the planner sets one), another by the enqueue order of each batch's head (the `fcfs`
mode), and a FIFO of pending requests per batch. Every state change appends its history event in the
same script. Operations are built as `(script, args)` calls so the sync and asyncio clients share them.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

from farm import events
from farm.config import Settings
from farm.errors import (BatchClosed, BatchConflict, BatchFull, BatchNotFound, DuplicateRequest,
                         PayloadTooLarge)
from farm.knobs import Knobs, from_json, redis_key
from farm.pipeline import InvalidInput, Pipeline
from farm.results import Result, Status

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
EVENTS_MAXLEN = 200_000  # approximate cap of the history stream when no recorder drains it
RECLAIM_LIMIT = 64  # lapsed leases given back per pick or sweep
MAX_ATTEMPTS = 3  # a request that loses this many workers fails alone (infra_error)
MAX_BATCH_SIZE = 1_000_000
_BATCH_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_TASK = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SCRIPTS = ("open", "submit", "pick", "complete", "heartbeat", "sweep", "cancel", "set_estimate", "abandon")


def _load_scripts() -> dict[str, str]:
    folder = resources.files("farm") / "lua"
    common = (folder / "common.lua").read_text()
    return {name: common + "\n" + (folder / f"{name}.lua").read_text() for name in _SCRIPTS}


SCRIPTS = _load_scripts()


def redis_url(settings: Settings) -> str:
    return settings.redis_url or DEFAULT_REDIS_URL


def lua_tokens(settings: Settings) -> bool:
    """Whether the Celery broker is the farm's own Redis: then the scripts publish wake-up tokens in
    the same round trip as the enqueue (atomic, no extra publish); otherwise Python sends them."""
    return not settings.broker_url or settings.broker_url == settings.redis_url


def stamp(t: float) -> str:
    """A time as the exact decimal Lua passes through into JSON and scores."""
    return repr(float(t))


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


class Keys:
    """Every Redis key and channel of one farm namespace."""

    def __init__(self, namespace: str) -> None:
        self.ns = namespace
        self.batches = f"{namespace}:batches"
        self.queues = f"{namespace}:queues"
        self.leases = f"{namespace}:leases"
        self.events = events.stream_key(namespace)
        self.epochs = f"{namespace}:epochs"
        self.knobs = redis_key(namespace)

    def batch(self, batch_id: str, part: str = "") -> str:
        return f"{self.ns}:b:{batch_id}{part}"

    def queue(self, queue: str, what: str) -> str:
        return f"{self.ns}:q:{queue}:{what}"


# ---- validation and calls (pure; shared by the sync and asyncio flavours) ----

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
    from farm.celery_app import hard_limit
    from workers.runner import effective_timeout

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
    limit = stamp(hard_limit(effective_timeout(pipeline, stages[0], knobs))) if stages else ""
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


# ---- progress and live state (read-only) ----

@dataclass(frozen=True)
class Progress:
    batch_id: str
    task: str
    pipeline: str
    size: int
    arrived: int
    done: int
    state: str  # open, completed or cancelled
    opened_at: float
    key: float  # the EBF key: estimated completion time, the open time until the planner sets one
    group_size: int | None = None

    @property
    def finished(self) -> bool:
        return self.state != "open"


def parse_progress(batch_id: str, h: Mapping[str, str]) -> Progress:
    if not h:
        raise BatchNotFound(f"no batch {batch_id!r}")
    return Progress(batch_id, h["task"], h["pipeline"], int(h["size"]), int(h["arrived"]), int(h["done"]),
                    h["state"], float(h["opened_at"]), float(h["key"]),
                    int(h["group_size"]) if h.get("group_size") else None)


@dataclass(frozen=True)
class PendingRequest:
    id: str
    batch: str
    enqueued_at: float


@dataclass(frozen=True)
class RunningRequest:
    id: str
    batch: str
    started_at: float
    worker: str


@dataclass(frozen=True)
class WorkerState:
    name: str
    last_seen: float
    busy: str | None  # the request it runs, None when idle
    alive: bool  # seen within the lease time

    @property
    def idle(self) -> bool:
        return self.busy is None


@dataclass(frozen=True)
class StageState:
    queue: str
    pending: tuple[PendingRequest, ...]  # in the order workers will take them under the current scheduler
    running: tuple[RunningRequest, ...]
    workers: tuple[WorkerState, ...]


@dataclass(frozen=True)
class LiveState:
    now: float
    scheduler: str
    batches: tuple[Progress, ...]  # active batches, by open time
    stages: Mapping[str, StageState]


def inspect(redis, settings: Settings, queues: list[str] | None = None, now: float | None = None) -> LiveState:
    """A consistent-enough snapshot of the live farm for `farm status` and the planner daemon."""
    k = Keys(settings.namespace)
    now = time.time() if now is None else now
    knobs = from_json(redis.get(k.knobs))
    ids = redis.zrange(k.batches, 0, -1)
    pipe = redis.pipeline(transaction=False)
    for bid in ids:
        pipe.hgetall(k.batch(bid))
    batches = tuple(parse_progress(bid, h) for bid, h in zip(ids, pipe.execute()) if h)
    names = sorted(set(queues) if queues is not None else set(redis.smembers(k.queues)))
    stages = {}
    for q in names:
        order = redis.zrange(k.queue(q, knobs.scheduler), 0, -1)
        pipe = redis.pipeline(transaction=False)
        for bid in order:
            pipe.lrange(k.queue(q, f"l:{bid}"), 0, -1)
        pipe.hgetall(k.queue(q, "busy"))
        pipe.hgetall(k.queue(q, "seen"))
        *lists, busy, seen = pipe.execute()
        pending = []
        for bid, entries in zip(order, lists):
            for entry in entries:
                _seq, enq_at, rid = entry.split("|", 2)
                pending.append(PendingRequest(rid, bid, float(enq_at)))
        if knobs.scheduler == "fcfs":
            pending.sort(key=lambda p: p.enqueued_at)
        running = []
        busy_of = {}
        for worker, raw in busy.items():
            held = json.loads(raw)
            running.append(RunningRequest(held["request"], held["batch"], float(held["started_at"]), worker))
            busy_of[worker] = held["request"]
        workers = tuple(
            WorkerState(w, float(t), busy_of.get(w), now - float(t) <= settings.lease_s)
            for w, t in sorted(seen.items())
        )
        stages[q] = StageState(q, tuple(pending), tuple(sorted(running, key=lambda r: r.started_at)), workers)
    return LiveState(now, knobs.scheduler, batches, stages)


live_state = inspect


# ---- the synchronous executor used by workers, the planner and the sync client ----

class Dispatch:
    """Runs the farm's scripts on one Redis connection pool (thread-safe)."""

    def __init__(self, settings: Settings, redis=None) -> None:
        import redis as redis_lib

        self.settings = settings
        self.keys = Keys(settings.namespace)
        self.redis = redis or redis_lib.Redis.from_url(redis_url(settings), decode_responses=True)
        self._scripts = {name: self.redis.register_script(src) for name, src in SCRIPTS.items()}
        self._knobs: tuple[float, Knobs] | None = None
        self.lua_tokens = lua_tokens(settings)
        self._flag = "1" if self.lua_tokens else "0"

    def run(self, call: Call):
        return self._scripts[call.script](args=[self.settings.namespace, EVENTS_MAXLEN, self._flag, *call.args])

    def knobs(self, max_age_s: float = 1.0) -> Knobs:
        """The live knobs, re-read at most once per `max_age_s`."""
        now = time.monotonic()
        if self._knobs is None or now - self._knobs[0] > max_age_s:
            self._knobs = (now, from_json(self.redis.get(self.keys.knobs)))
        return self._knobs[1]

    def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        """Move a batch in every stage's EBF order; False when it is no longer open."""
        return self.run(set_estimate_call(check_batch_id(batch_id), estimated_at)) == "ok"

    def cancel(self, batch_id: str, now: float | None = None) -> str:
        return self.run(cancel_call(check_batch_id(batch_id), time.time() if now is None else now))

    def sweep(self) -> list[str]:
        """Give lapsed leases back; returns one stage queue per request put back (each needs a token
        unless `lua_tokens`: then the script published them)."""
        return list(self.run(sweep_call()))

    def progress(self, batch_id: str) -> Progress:
        return parse_progress(batch_id, self.redis.hgetall(self.keys.batch(batch_id)))

    def pick(self, queue: str, worker: str, scheduler: str, token: str):
        return self.run(Call("pick", queue, scheduler, worker, str(self.settings.lease_s), token,
                             str(RECLAIM_LIMIT), str(MAX_ATTEMPTS)))

    def heartbeat(self, token: str, batch_id: str) -> str:
        return self.run(Call("heartbeat", token, str(self.settings.lease_s), batch_id))

    def abandon(self, worker: str, queue: str, status: Status, message: str, now: float | None = None) -> str:
        return self.run(Call("abandon", worker, queue, stamp(time.time() if now is None else now), status.value, message))

    def forget_worker(self, queue: str, worker: str) -> None:
        """Drop a retired worker from its stage's registry (a killed one otherwise stays, shown not alive)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(self.keys.queue(queue, "seen"), worker)
        pipe.hdel(self.keys.queue(queue, "busy"), worker)
        pipe.execute()

    def inspect(self, queues: list[str] | None = None) -> LiveState:
        return inspect(self.redis, self.settings, queues)

    def close(self) -> None:
        self.redis.close()
