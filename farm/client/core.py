"""The trainer client's protocol without I/O, shared by the blocking and the asyncio shells (as httpx
shares one core between its clients): which calls to make, how to read their replies, and the state
machines of reading a batch's results and of telling when a GRPO group is complete. The control flow that
puts these together, once for both shells, is `farm.client.flows`; the shells only run what it yields.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from farm import registry
from farm.config import Settings, from_env
from farm.errors import BatchAbandoned, BatchLost, FarmNotConfigured, FarmUnavailable, InvalidInput
from farm.knobs import Knobs
from farm.pipeline import Pipeline
from farm.protocol.calls import (
    Admitted,
    Cap,
    admit,
    admitted_calls,
    new_batch_id,
    open_call,
    parse_submit,
    submit_many_call,
)
from farm.protocol.ids import check_farm_batch
from farm.protocol.keys import Keys
from farm.protocol.live import Progress
from farm.protocol.scope import Scope
from farm.protocol.scripts import Call, argv, lua_tokens
from farm.protocol.silence import ending
from farm.results import Result

log = logging.getLogger("farm.client")

READ_COUNT = 1000  # results read per round trip
# A blocking read longer than redis-py's socket timeout (5 s by default in redis-py 8) fails as a timeout
# of the socket, not of the read; keep each read well under it and loop.
MAX_BLOCK_S = 1.0
SUBMIT_CHUNK = 500  # requests per round trip of a bulk submit
# Connections per client: concurrent callers beyond this wait for one (up to POOL_WAIT_S) instead of failing.
POOL_SIZE = 64
POOL_WAIT_S = 60.0


def client_settings(settings: Settings | None, **overrides: Any) -> Settings:
    """What a client runs with: `settings` (else the environment's) with the overrides that are given. Refuses
    to guess a farm: any Redis would accept a batch and leave the trainer waiting for results forever."""
    base = from_env() if settings is None else settings
    changes = {k: v for k, v in overrides.items() if v is not None}
    chosen = base.with_(**changes) if changes else base
    if not chosen.redis_url:
        raise FarmNotConfigured(
            "no farm to talk to: pass RewardClient(redis_url='redis://HOST:PORT/DB'), set FARM_REDIS_URL, or start "
            f"one on this machine with `farm up` (clients find it through the endpoint file in FARM_DATA_DIR, here "
            f"{chosen.data_dir}, where none runs now)")
    return chosen


def safe_url(url: str | None) -> str:
    """A Redis URL fit for an error message: its password masked."""
    return re.sub(r"//([^:@/]*):[^@/]*@", r"//\1:***@", url or "")


class Outage:
    """Riding through a broker outage: retry with exponential backoff (50 ms doubling to 2 s) until the
    client's reconnect budget is spent, then give up with the farm's own error."""

    FIRST_S, CAP_S = 0.05, 2.0

    def __init__(self, settings: Settings, now: float) -> None:
        self.settings = settings
        self.deadline = now + settings.reconnect_s
        self.delay = self.FIRST_S

    def next_delay(self, now: float) -> float | None:
        """Seconds to wait before trying again; None when the budget is spent."""
        if now >= self.deadline:
            return None
        delay = min(self.delay, self.deadline - now)
        self.delay = min(self.delay * 2, self.CAP_S)
        return delay

    def unavailable(self, exc: BaseException) -> FarmUnavailable:
        return FarmUnavailable(f"the farm's Redis at {safe_url(self.settings.redis_url)} did not answer for "
                               f"{self.settings.reconnect_s:g} s (FARM_RECONNECT_S): {exc}")


def sweep_interval(settings: Settings) -> float:
    """How often a waiting client gives lapsed leases back, so recovery needs no live worker's sweep."""
    return max(settings.lease_s / 2, 0.05)


class Session:
    """What one client knows of the farm it talks to: its settings, its keys, how calls run."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self.lua_tokens = lua_tokens(settings)
        # a tenant's direct client (its own Redis user, `farm tenants create --redis-user`) names its batches and
        # tasks under the tenant's prefix: the only keys its user may touch
        self.scope = Scope(settings.tenant) if settings.tenant is not None else None

    def batch_id(self, batch_id: Any) -> str:
        """The farm's id of a batch the caller names (checked)."""
        return check_farm_batch(batch_id if self.scope is None else self.scope.adopt_batch(batch_id))

    @property
    def sweeps(self) -> bool:
        """Whether this client gives lapsed leases back: a tenant's client may not touch other tenants'
        batches, which the leases span (the workers give them back as well)."""
        return self.scope is None

    def argv(self, call: Call) -> list[Any]:
        return argv(self.settings.namespace, self.lua_tokens, call)

    def open(self, task: Any, pipeline: str, size: Any, batch_id: str | None, group_size: Any,
             now: float) -> tuple[Call, str]:
        """The call that opens a batch (a fresh id unless one is given), and the id."""
        if self.scope is not None:
            batch_id, task = self.scope.adopt_batch(batch_id), self.scope.adopt_task(task)
        batch_id = new_batch_id() if batch_id is None else batch_id
        return open_call(task, registry.get(pipeline), size, batch_id, group_size, now), batch_id

    def submitted(self, call: Call, reply: list) -> tuple[str, str | None]:
        """What a submit's reply means, and the stage queue that needs a wake-up token from us (None when
        the script published it, or the request is not queued)."""
        kind = parse_submit(reply, call.arg("batch"), call.arg("request"))
        wake = call.arg("first_queue") if kind == "queued" and not self.lua_tokens else None
        return kind, wake

    def admit_many(self, batch: "BatchInfo", requests: list[tuple[Any, Any, Any]]) -> list[Admitted]:
        """A bulk submit's `(id, payload, group)` requests, each checked before any is sent: a malformed one
        refuses the whole call with its position and id named, and nothing of it reaches the farm."""
        out = []
        for i, (request_id, payload, group) in enumerate(requests):
            try:
                out.append(admit(self.settings, batch.pipeline, request_id, payload, group))
            except InvalidInput as exc:
                raise type(exc)(f"request #{i} ({request_id!r:.80}) of the bulk submit: {exc}; nothing was "
                                f"submitted") from exc
        return out

    def calls(self, batch: "BatchInfo", admitted: list[Admitted], now: float, knobs: Knobs) -> list[Call]:
        return admitted_calls(batch.pipeline, batch.id, admitted, now, knobs, batch.cap)

    @staticmethod
    def one_trip(calls: list[Call]) -> Call:
        """The call that sends a chunk of submits in one round trip (a single one goes as itself)."""
        return calls[0] if len(calls) == 1 else submit_many_call(calls)

    def submitted_many(self, calls: list[Call], reply: list) -> tuple[list[str], Counter, InvalidInput | None]:
        """What the reply to `one_trip(calls)` means: the kinds in order, wake-up tokens owed per stage queue, and
        the first refusal (raised by the caller once the accepted requests have their tokens)."""
        kinds, wakes, error = [], Counter(), None
        replies = [reply] if len(calls) == 1 else reply
        for call, reply in zip(calls, replies):
            try:
                kind, wake = self.submitted(call, reply)
            except InvalidInput as exc:
                error = error or exc
                kind, wake = "refused", None
            kinds.append(kind)
            if wake is not None:
                wakes[wake] += 1
        return kinds, wakes, error


def unpack_requests(requests: Iterable[Any]) -> list[tuple[Any, Any, Any]]:
    """A bulk submit's requests as `(id, payload, group)`: each given as `(id, payload)`, `(id, payload,
    group)`, or a mapping with `id`, `payload` and optionally `group`."""
    out = []
    for i, item in enumerate(requests):
        if isinstance(item, Mapping) and {"id", "payload"} <= set(item) <= {"id", "payload", "group"}:
            out.append((item["id"], item["payload"], item.get("group")))
        elif isinstance(item, (tuple, list)) and len(item) in (2, 3):
            out.append((item[0], item[1], item[2] if len(item) == 3 else None))
        else:
            raise InvalidInput(f"request #{i} of the bulk submit must be (id, payload), (id, payload, group) or a "
                               f"mapping with 'id', 'payload' and optionally 'group', not {item!r:.200}; nothing "
                               f"was submitted")
    return out


class Submitted:
    """The requests one batch handle submitted, in order: the order `gather` returns results in, and what
    the client submits again if the farm loses the batch. Payloads are held by reference, not copied."""

    def __init__(self) -> None:
        self.requests: dict[str, tuple[Any, Any]] = {}

    def add(self, request_id: str, payload: Any, group: Any) -> None:
        self.requests.setdefault(request_id, (payload, group))

    def items(self) -> list[tuple[str, Any, Any]]:
        return [(rid, payload, group) for rid, (payload, group) in self.requests.items()]

    def to_restore(self, batch_id: str) -> list[tuple[str, Any, Any]]:
        """What to submit again into a batch the farm lost; BatchLost when this handle holds none of it."""
        held = self.items()
        if not held:
            raise BatchLost(f"the farm lost batch {batch_id!r} and this client holds none of its requests to "
                            f"submit again (they were submitted through another handle)")
        log.warning("the farm lost batch %r; opening it again and submitting its %d requests again", batch_id,
                    len(held))
        return held

    def ordered(self, results: list[Result]) -> list[Result]:
        """Results in submission order; those of requests submitted elsewhere follow in completion order."""
        rank = {rid: i for i, rid in enumerate(self.requests)}
        mine = sorted((r for r in results if r.request_id in rank), key=lambda r: rank[r.request_id])
        return mine + [r for r in results if r.request_id not in rank]


@dataclass(frozen=True)
class BatchInfo:
    """A batch as its client handles it."""

    id: str
    task: str
    pipeline: Pipeline
    size: int
    group_size: int | None
    cap: Cap | None = None  # a tenant's limit on requests outstanding, for the gateway's submits

    @classmethod
    def of(cls, progress: Progress, cap: Cap | None = None) -> "BatchInfo":
        return cls(progress.batch_id, progress.task, registry.get(progress.pipeline), progress.size,
                   progress.group_size, cap)


class BatchHandle:
    """What both clients' batch objects hold: the client they belong to (and its flows, farm.client.flows), the
    batch's fields, and the requests submitted through this handle."""

    def __init__(self, client: Any, info: BatchInfo) -> None:
        self.client, self.flows = client, client.flows
        self.info = info
        self.submitted = Submitted()
        self.id, self.task, self.pipeline, self.size, self.group_size = (
            info.id, info.task, info.pipeline, info.size, info.group_size)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.id!r}, task={self.task!r}, pipeline={self.pipeline.name!r}, "
                f"size={self.size})")


@dataclass(frozen=True)
class ResultRead:
    """One blocking read of a batch's done stream (`farm.protocol.reads.results_after`)."""

    after: str
    count: int
    block_ms: int


class ResultReader:
    """Reading a batch's results as they come: what to read next (and when the caller has waited too
    long), the results a reply holds, and when to give lapsed leases back meanwhile. Times are a
    monotonic clock's."""

    def __init__(self, session: Session, batch_id: str, size: int, timeout: float | None, now: float) -> None:
        self.batch_id, self.size, self.timeout = batch_id, size, timeout
        self.deadline = None if timeout is None else now + timeout
        self.interval = sweep_interval(session.settings)
        self.next_sweep = now + self.interval
        self.last, self.ended = "0-0", False
        self.got: set[str] = set()  # request ids with a result: a restored batch reports some of them again
        self.abandoned: BatchAbandoned | None = None  # the end marker said the farm abandoned the batch

    @property
    def seen(self) -> int:
        return len(self.got)

    @property
    def done(self) -> bool:
        return self.ended or self.seen >= self.size

    def restart(self) -> None:
        """Read a restored batch's results from its start (those already handed out are skipped)."""
        self.last, self.ended, self.abandoned = "0-0", False, None

    def next_read(self, now: float) -> ResultRead:
        """The next read; TimeoutError, saying how many results are missing, once the caller's time is up."""
        if self.deadline is not None and now >= self.deadline:
            raise TimeoutError(f"batch {self.batch_id!r}: {self.size - self.seen} of {self.size} results still "
                               f"missing after {self.timeout:g} s")
        wait = self.next_sweep - now if self.deadline is None else min(self.next_sweep, self.deadline) - now
        return ResultRead(self.last, READ_COUNT, max(1, int(min(wait, MAX_BLOCK_S) * 1000)))

    def feed(self, reply) -> list[Result]:
        """The results in a read's reply (those already finished come first, then as they finish)."""
        out = []
        for _, entries in reply or ():
            for entry_id, fields in entries:
                self.last = entry_id
                if "end" in fields:
                    self.ended = True
                    self.abandoned = ending(self.batch_id, fields)
                    continue
                if "r" not in fields:
                    continue
                result = Result.from_dict(json.loads(fields["r"]))
                if result.request_id not in self.got:
                    self.got.add(result.request_id)
                    out.append(result)
        return out

    def sweep_due(self, now: float) -> bool:
        return now >= self.next_sweep

    def swept(self, now: float) -> None:
        self.next_sweep = now + self.interval


def done_entries(entries: Iterable[tuple[str, Mapping[str, str]]]) -> Iterator[tuple[str, Result | None]]:
    """The entries of a batch's done stream (one key's part of an XREAD reply, or an XRANGE): each one's id and
    its result, None for the end marker that closing the batch appends after its last result."""
    for entry_id, fields in entries:
        if "r" in fields:
            yield entry_id, Result.from_dict(json.loads(fields["r"]))
        elif "end" in fields:
            yield entry_id, None


class GroupTracker:
    """Tells when a GRPO group is complete: `group_size` results, or (size unknown) every request of the
    group that arrived, once the whole batch has arrived. `on_done(group, results)` is called for each
    group just before the client hands it out."""

    def __init__(self, group_size: int | None,
                 on_done: Callable[[str, list[Result]], None] | None = None) -> None:
        self.group_size = group_size
        self.on_done = on_done
        self.results: dict[str, list[Result]] = defaultdict(list)
        self.emitted: set[str] = set()

    def add(self, result: Result) -> bool:
        """Count a result; True when a group may now be complete (then ask `ready`)."""
        if result.group is None:
            return False
        self.results[result.group].append(result)
        return True

    @property
    def needs_arrivals(self) -> bool:
        """Without a group size, completeness needs the batch's arrival counts (`arrivals`)."""
        return self.group_size is None

    def ready(self, arrived_by_group: Mapping[str, int] | None) -> list[tuple[str, list[Result]]]:
        out = []
        for group, results in self.results.items():
            if group in self.emitted:
                continue
            want = self.group_size if self.group_size is not None else (arrived_by_group or {}).get(group)
            if want is not None and len(results) >= want:
                self.emitted.add(group)
                out.append((group, list(results)))
        return out

    def emit(self, groups: list[tuple[str, list[Result]]]) -> Iterator[tuple[str, list[Result]]]:
        """Hand out completed groups, telling `on_done` of each first."""
        for group, results in groups:
            if self.on_done is not None:
                self.on_done(group, results)
            yield group, results

    def rest(self) -> list[tuple[str, list[Result]]]:
        """Groups never completed by count (a cancelled batch): handed out when the batch ends."""
        out = [(g, list(r)) for g, r in self.results.items() if g not in self.emitted]
        self.emitted.update(g for g, _ in out)
        return out


def arrivals(arrived: Any, groups: Mapping[str, Any], size: int) -> dict[str, int] | None:
    """Requests arrived per group, from the batch's `arrived` count and `:groups` hash; None while more
    requests may still join any group."""
    if int(arrived or 0) < size:
        return None
    return {g: int(n) for g, n in groups.items()}
