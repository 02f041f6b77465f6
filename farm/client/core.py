"""The trainer client's protocol without I/O, shared by the blocking and the asyncio shells (as httpx
shares one core between its clients): which calls to make, how to read their replies, and the state
machines of reading a batch's results and of telling when a GRPO group is complete. The shells only
send what this says and hand back what they receive.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from farm import registry
from farm.config import Settings
from farm.knobs import Knobs
from farm.pipeline import Pipeline
from farm.protocol.calls import new_batch_id, open_call, parse_submit, submit_call
from farm.protocol.keys import Keys
from farm.protocol.live import Progress
from farm.protocol.scripts import Call, argv, lua_tokens
from farm.results import Result

READ_COUNT = 1000  # results read per round trip
# A blocking read longer than redis-py's socket timeout (5 s by default in redis-py 8) fails as a timeout
# of the socket, not of the read; keep each read well under it and loop.
MAX_BLOCK_S = 1.0


def sweep_interval(settings: Settings) -> float:
    """How often a waiting client gives lapsed leases back, so recovery needs no live worker's sweep."""
    return max(settings.lease_s / 2, 0.05)


class Session:
    """What one client knows of the farm it talks to: its settings, its keys, how calls run."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self.lua_tokens = lua_tokens(settings)

    def argv(self, call: Call) -> list[Any]:
        return argv(self.settings.namespace, self.lua_tokens, call)

    def open(self, task: Any, pipeline: str, size: Any, batch_id: str | None, group_size: Any,
             now: float) -> tuple[Call, str]:
        """The call that opens a batch (a fresh id unless one is given), and the id."""
        batch_id = new_batch_id() if batch_id is None else batch_id
        return open_call(task, registry.get(pipeline), size, batch_id, group_size, now), batch_id

    def submit(self, batch: "BatchInfo", request_id: Any, payload: Any, group: Any, now: float, knobs: Knobs) -> Call:
        """The call that submits one request (`knobs`: the live ones, for the first stage's time limit)."""
        return submit_call(self.settings, batch.pipeline, batch.id, request_id, payload, group, now, knobs)

    def submitted(self, call: Call, reply: list) -> tuple[str, str | None]:
        """What a submit's reply means, and the stage queue that needs a wake-up token from us (None when
        the script published it, or the request is not queued)."""
        kind = parse_submit(reply, call.arg("batch"), call.arg("request"))
        wake = call.arg("first_queue") if kind == "queued" and not self.lua_tokens else None
        return kind, wake


@dataclass(frozen=True)
class BatchInfo:
    """A batch as its client handles it."""

    id: str
    task: str
    pipeline: Pipeline
    size: int
    group_size: int | None

    @classmethod
    def of(cls, progress: Progress) -> "BatchInfo":
        return cls(progress.batch_id, progress.task, registry.get(progress.pipeline), progress.size,
                   progress.group_size)


class BatchHandle:
    """What both clients' batch objects hold: the client they belong to and the batch's fields."""

    def __init__(self, client: Any, info: BatchInfo) -> None:
        self.client = client
        self.info = info
        self.id, self.task, self.pipeline, self.size, self.group_size = (
            info.id, info.task, info.pipeline, info.size, info.group_size)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.id!r}, task={self.task!r}, pipeline={self.pipeline.name!r}, "
                f"size={self.size})")


@dataclass(frozen=True)
class Read:
    """One blocking read of a batch's done stream: XREAD {key: after} COUNT count BLOCK block_ms."""

    key: str
    after: str
    count: int
    block_ms: int


class ResultReader:
    """Reading a batch's results as they come: what to read next (and when the caller has waited too
    long), the results a reply holds, and when to give lapsed leases back meanwhile. Times are a
    monotonic clock's."""

    def __init__(self, session: Session, batch_id: str, size: int, timeout: float | None, now: float) -> None:
        self.key = session.keys.batch(batch_id, ":done")
        self.batch_id, self.size, self.timeout = batch_id, size, timeout
        self.deadline = None if timeout is None else now + timeout
        self.interval = sweep_interval(session.settings)
        self.next_sweep = now + self.interval
        self.last, self.seen, self.ended = "0-0", 0, False

    @property
    def done(self) -> bool:
        return self.ended or self.seen >= self.size

    def next_read(self, now: float) -> Read:
        """The next read; TimeoutError, saying how many results are missing, once the caller's time is up."""
        if self.deadline is not None and now >= self.deadline:
            raise TimeoutError(f"batch {self.batch_id!r}: {self.size - self.seen} of {self.size} results still "
                               f"missing after {self.timeout:g} s")
        wait = self.next_sweep - now if self.deadline is None else min(self.next_sweep, self.deadline) - now
        return Read(self.key, self.last, READ_COUNT, max(1, int(min(wait, MAX_BLOCK_S) * 1000)))

    def feed(self, reply) -> list[Result]:
        """The results in a read's reply (those already finished come first, then as they finish)."""
        out = []
        for _, entries in reply or ():
            for entry_id, fields in entries:
                self.last = entry_id
                if "r" in fields:
                    out.append(Result.from_dict(json.loads(fields["r"])))
                elif "end" in fields:
                    self.ended = True
        self.seen += len(out)
        return out

    def sweep_due(self, now: float) -> bool:
        return now >= self.next_sweep

    def swept(self, now: float) -> None:
        self.next_sweep = now + self.interval


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
