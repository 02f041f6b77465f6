"""The trainer's client: open a batch (the hint that rollout started), submit requests as responses
finish, and collect rewards as they come back.

    with RewardClient() as farm:
        batch = farm.open_batch("cuda-0", "synthetic", size=64)
        for i, response in enumerate(responses):
            batch.submit(f"r{i}", {"times": [1.0, 0.5]}, group=i // 8)
        results = batch.gather(timeout=600)

Admission runs here: a payload its pipeline rejects becomes an `invalid_input` result at once (it
still counts toward the batch); misuse that would break the batch's accounting raises (farm.errors).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any, Callable, Iterator

from farm import registry
from farm.celery_app import Tokens, make_app
from farm.config import Settings, from_env
from farm.pipeline import Pipeline
from farm.protocol.calls import (
    cancel_call,
    check_batch_id,
    new_batch_id,
    open_call,
    parse_open,
    parse_submit,
    set_estimate_call,
    submit_call,
)
from farm.protocol.dispatch import Dispatch
from farm.protocol.live import Progress
from farm.results import Result

READ_COUNT = 1000  # results read per round trip


# A blocking read longer than redis-py's socket timeout (5 s by default in redis-py 8) fails as a timeout
# of the socket, not of the read; keep each read well under it and loop.
MAX_BLOCK_S = 1.0


def sweep_interval(settings: Settings) -> float:
    """How often a waiting client gives lapsed leases back, so recovery needs no live worker's sweep."""
    return max(settings.lease_s / 2, 0.05)


def parse_entries(entries) -> tuple[list[Result], bool, str]:
    """Results in a chunk of a batch's done stream, whether its end marker was seen, and the last id."""
    results, ended, last = [], False, None
    for entry_id, fields in entries:
        last = entry_id
        if "r" in fields:
            results.append(Result.from_dict(json.loads(fields["r"])))
        elif "end" in fields:
            ended = True
    return results, ended, last


class GroupTracker:
    """Tells when a GRPO group is complete: `group_size` results, or (size unknown) every request of the
    group that arrived once the whole batch has arrived."""

    def __init__(self, group_size: int | None) -> None:
        self.group_size = group_size
        self.results: dict[str, list[Result]] = defaultdict(list)
        self.emitted: set[str] = set()

    def add(self, result: Result) -> None:
        if result.group is not None:
            self.results[result.group].append(result)

    def ready(self, arrived_by_group: dict[str, int] | None) -> list[tuple[str, list[Result]]]:
        out = []
        for group, results in self.results.items():
            if group in self.emitted:
                continue
            want = self.group_size if self.group_size is not None else (arrived_by_group or {}).get(group)
            if want is not None and len(results) >= want:
                self.emitted.add(group)
                out.append((group, list(results)))
        return out

    def rest(self) -> list[tuple[str, list[Result]]]:
        """Groups never completed by count (a cancelled batch): handed out when the batch ends."""
        out = [(g, list(r)) for g, r in self.results.items() if g not in self.emitted]
        self.emitted.update(g for g, _ in out)
        return out


class Batch:
    """One rollout step's requests on the farm."""

    def __init__(self, client: "RewardClient", progress: Progress, pipeline: Pipeline) -> None:
        self.client = client
        self.id = progress.batch_id
        self.task = progress.task
        self.pipeline = pipeline
        self.size = progress.size
        self.group_size = progress.group_size

    def __repr__(self) -> str:
        return f"Batch({self.id!r}, task={self.task!r}, pipeline={self.pipeline.name!r}, size={self.size})"

    def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        """Hand one response to the farm. Returns 'queued', 'finished' (it visits no stage, or its
        payload was refused: an invalid_input result) or 'duplicate' (same id and payload again: a no-op)."""
        c = self.client
        call = submit_call(c.settings, self.pipeline, self.id, request_id, payload, group, time.time(),
                           c.dispatch.knobs())
        kind = parse_submit(c.dispatch.run(call), self.id, request_id)
        if kind == "queued" and not c.dispatch.lua_tokens:
            c.wake(call.args[4])
        return kind

    def as_completed(self, timeout: float | None = None) -> Iterator[Result]:
        """Results as they finish (those already finished first); TimeoutError says how many are missing."""
        c = self.client
        key = c.dispatch.keys.batch(self.id, ":done")
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = sweep_interval(c.settings)
        next_sweep = time.monotonic() + interval
        last, seen = "0-0", 0
        while seen < self.size:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"batch {self.id!r}: {self.size - seen} of {self.size} results still missing "
                                   f"after {timeout:g} s")
            wait = next_sweep - now if deadline is None else min(next_sweep, deadline) - now
            reply = c.dispatch.redis.xread({key: last}, count=READ_COUNT, block=max(1, int(min(wait, MAX_BLOCK_S) * 1000)))
            ended = False
            for _, entries in reply:
                results, ended, last = parse_entries(entries)
                for result in results:
                    seen += 1
                    yield result
            if ended:
                return
            if time.monotonic() >= next_sweep:
                c.sweep()
                next_sweep = time.monotonic() + interval

    def gather(self, timeout: float | None = None) -> list[Result]:
        """Every result of the batch, in completion order (blocks; TimeoutError with how many are missing)."""
        return list(self.as_completed(timeout))

    def completed_groups(self, timeout: float | None = None,
                         on_group_done: Callable[[str, list[Result]], None] | None = None
                         ) -> Iterator[tuple[str, list[Result]]]:
        """(group, results) as each group completes; a group completes at `group_size` results, or, when
        the batch was opened without one, once every request has arrived and the group's are all done."""
        tracker = GroupTracker(self.group_size)
        for result in self.as_completed(timeout):
            tracker.add(result)
            if result.group is None:
                continue
            for group, results in tracker.ready(self._arrived_by_group()):
                if on_group_done:
                    on_group_done(group, results)
                yield group, results
        for group, results in tracker.rest():
            if on_group_done:
                on_group_done(group, results)
            yield group, results

    def _arrived_by_group(self) -> dict[str, int] | None:
        if self.group_size is not None:
            return None
        redis, keys = self.client.dispatch.redis, self.client.dispatch.keys
        pipe = redis.pipeline(transaction=False)
        pipe.hget(keys.batch(self.id), "arrived")
        pipe.hgetall(keys.batch(self.id, ":groups"))
        arrived, groups = pipe.execute()
        if int(arrived or 0) < self.size:
            return None  # more requests may still join any group
        return {g: int(n) for g, n in groups.items()}

    def cancel(self) -> str:
        """Drop pending requests and give every unfinished one a `cancelled` result (running stages are
        told to stop). Returns the batch's state: 'cancelled', or 'completed' when it was already done."""
        return self.client.dispatch.run(cancel_call(self.id, time.time()))

    def set_estimate(self, estimated_at: float) -> bool:
        return self.client.dispatch.run(set_estimate_call(self.id, estimated_at)) == "ok"

    def progress(self) -> Progress:
        return self.client.dispatch.progress(self.id)


class RewardClient:
    """A trainer's connection to the farm (thread-safe; one per process is enough)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or from_env()
        self.dispatch = Dispatch(self.settings)
        self.app = make_app(self.settings)
        self.tokens = Tokens(self.app, self.settings)

    def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                   group_size: int | None = None) -> Batch:
        """Open a batch: the hint that rollout started. Opening the same batch again attaches to it."""
        found = registry.get(pipeline)
        batch_id = new_batch_id() if batch_id is None else batch_id
        parse_open(self.dispatch.run(open_call(task, found, size, batch_id, group_size, time.time())), batch_id, task)
        return self.batch(batch_id)

    def batch(self, batch_id: str) -> Batch:
        """Attach to an existing batch by id (BatchNotFound if there is none)."""
        progress = self.dispatch.progress(check_batch_id(batch_id))
        return Batch(self, progress, registry.get(progress.pipeline))

    def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        return self.dispatch.set_estimate(batch_id, estimated_at)

    def wake(self, queue: str, count: int = 1) -> None:
        self.tokens.send(queue, registry.stage_timeout(queue, self.dispatch.knobs()), count)

    def sweep(self) -> int:
        """Give lapsed leases back to their queues (with fresh tokens); returns how many."""
        queues = self.dispatch.sweep()
        if not self.dispatch.lua_tokens:
            for queue in queues:
                self.wake(queue)
        return len(queues)

    def close(self) -> None:
        self.dispatch.close()
        self.app.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
