"""The live farm read back from Redis: batch progress and, per stage queue, what waits, what runs and
which workers are registered. Read-only: `farm status` and the planner daemon look, nothing changes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Mapping

from farm.config import Settings
from farm.errors import BatchNotFound
from farm.knobs import Knobs
from farm.protocol.keys import Keys, QueuePart, text
from farm.protocol.live_knobs import knobs_now
from farm.protocol.roster import fresh_s


@dataclass(frozen=True)
class Progress:
    batch_id: str
    task: str
    pipeline: str
    size: int
    arrived: int
    done: int
    state: str  # open, completed, cancelled or abandoned (farm.protocol.silence)
    opened_at: float
    key: float  # the EBF key: estimated completion time, the open time until the planner sets one
    group_size: int | None = None
    seen_at: float | None = None  # an open batch's last sign of life from its trainer, where it was read

    @property
    def finished(self) -> bool:
        return self.state != "open"


def parse_progress(batch_id: str, h: Mapping[str, str], seen_at: float | None = None) -> Progress:
    if not h:
        raise BatchNotFound(f"no batch {batch_id!r}")
    return Progress(batch_id, h["task"], h["pipeline"], int(h["size"]), int(h["arrived"]), int(h["done"]),
                    h["state"], float(h["opened_at"]), float(h["key"]),
                    int(h["group_size"]) if h.get("group_size") else None, seen_at)


@dataclass(frozen=True)
class PendingRequest:
    """A request waiting in a stage queue (its batch's FIFO entry, `pending_entry` in common.lua)."""

    id: str
    batch: str
    enqueued_at: float


@dataclass(frozen=True)
class RunningRequest:
    """A request a worker runs now (the stage's `busy` record, `busy_record` in common.lua)."""

    id: str
    batch: str
    started_at: float
    worker: str


@dataclass(frozen=True)
class RegisteredWorker:
    """A worker in a stage's registry (`seen`): it announced itself ready and heartbeats while it lives."""

    name: str
    last_seen: float
    busy: str | None  # the request it runs, None when idle
    alive: bool  # seen within roster.fresh_s

    @property
    def idle(self) -> bool:
        return self.busy is None


@dataclass(frozen=True)
class QueueState:
    """One stage queue now: what waits, what runs, which workers serve it."""

    queue: str
    pending: tuple[PendingRequest, ...]  # in the order workers will take them under the current scheduler
    running: tuple[RunningRequest, ...]
    workers: tuple[RegisteredWorker, ...]


@dataclass(frozen=True)
class LiveState:
    """The live farm at `now`: its active batches and every stage queue."""

    now: float
    scheduler: str
    batches: tuple[Progress, ...]  # active batches, by open time
    stages: Mapping[str, QueueState]


def inspect_batches(redis, settings: Settings) -> tuple[Progress, ...]:
    """The active batches' progress, with when each was last seen alive, by open time (one round trip after
    listing them)."""
    k = Keys(settings.namespace)
    ids = redis.zrange(k.batches, 0, -1)
    pipe = redis.pipeline(transaction=False)
    for bid in ids:
        pipe.hgetall(k.batch(bid))
    pipe.zrange(k.seen, 0, -1, withscores=True)
    *hashes, seen = pipe.execute()
    seen_at = {text(b): float(t) for b, t in seen}
    return tuple(parse_progress(bid, h, seen_at.get(bid)) for bid, h in zip(ids, hashes) if h)


def serving(seen_at: float, now: float, settings: Settings) -> bool:
    """A registered worker serves its stage while its last beat is younger than `roster.fresh_s`."""
    return now - seen_at <= fresh_s(settings.lease_s)


def inspect(redis, settings: Settings, queues: list[str] | None = None, now: float | None = None,
            knobs: Knobs | None = None) -> LiveState:
    """A consistent-enough snapshot of the live farm for `farm status` and the planner daemon (`knobs`: those
    its caller already read for this moment; by default they are read now)."""
    k = Keys(settings.namespace)
    now = time.time() if now is None else now
    knobs = knobs_now(redis, Keys(settings.namespace)) if knobs is None else knobs
    batches = inspect_batches(redis, settings)
    names = sorted(set(queues) if queues is not None else set(redis.smembers(k.queues)))
    stages = {}
    for q in names:
        order = redis.zrange(k.queue(q, knobs.scheduler), 0, -1)  # the order its scheduler picks from
        pipe = redis.pipeline(transaction=False)
        for bid in order:
            pipe.lrange(k.pending(q, bid), 0, -1)
        pipe.hgetall(k.queue(q, QueuePart.busy))
        pipe.hgetall(k.queue(q, QueuePart.seen))
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
            RegisteredWorker(w, float(t), busy_of.get(w), serving(float(t), now, settings))
            for w, t in sorted(seen.items())
        )
        stages[q] = QueueState(q, tuple(pending), tuple(sorted(running, key=lambda r: r.started_at)), workers)
    return LiveState(now, knobs.scheduler, batches, stages)


@dataclass(frozen=True)
class QueueDepth:
    """One stage queue in counts only (what the metrics scrape every few seconds: no entry is read)."""

    queue: str
    pending: int
    running: int
    workers: int  # registered and seen within roster.fresh_s


def depths(redis, settings: Settings, now: float | None = None) -> dict[str, QueueDepth]:
    """Per stage queue, how many requests wait and run and how many workers serve it, in two round trips."""
    k = Keys(settings.namespace)
    now = time.time() if now is None else now
    scheduler = knobs_now(redis, Keys(settings.namespace)).scheduler
    names = sorted(redis.smembers(k.queues))
    pipe = redis.pipeline(transaction=False)
    for q in names:
        pipe.zrange(k.queue(q, scheduler), 0, -1)
        pipe.hlen(k.queue(q, QueuePart.busy))
        pipe.hgetall(k.queue(q, QueuePart.seen))
    replies = pipe.execute()
    pipe = redis.pipeline(transaction=False)
    for i, q in enumerate(names):
        for bid in replies[3 * i]:
            pipe.llen(k.pending(q, bid))
    lengths = iter(pipe.execute())
    out = {}
    for i, q in enumerate(names):
        order, running, seen = replies[3 * i: 3 * i + 3]
        pending = sum(next(lengths) for _ in order)
        alive = sum(1 for t in seen.values() if serving(float(t), now, settings))
        out[q] = QueueDepth(q, pending, int(running), alive)
    return out


def running_batches(redis, namespace: str) -> dict[str, list[str]]:
    """Per stage queue, the batch of each request a worker runs there now (its `busy` hash: worker -> the
    `busy_record`), in one round trip after listing the queues: what the metrics count per tenant."""
    k = Keys(namespace)
    names = sorted(map(text, redis.smembers(k.queues)))
    pipe = redis.pipeline(transaction=False)
    for q in names:
        pipe.hvals(k.queue(q, QueuePart.busy))
    return {q: [json.loads(raw)["batch"] for raw in held] for q, held in zip(names, pipe.execute())}
