"""The one reader of the knobs' live copy in Redis (`Keys.knobs`, written by farm.store.knob_store): cached for
`max_age_s`, 1 s for workers and clients, which consult the knobs for every request, 0 (every read goes to Redis)
for a planner's decision or a snapshot. A flow (farm.protocol.flow), so the blocking and the asyncio executors
share it."""

from __future__ import annotations

import time
from typing import Any, Callable

from farm.knobs import Knobs, KnobsCache
from farm.protocol.flow import Flow, Read, Steps, run
from farm.protocol.keys import Keys


def knobs_copy(redis: Any, keys: Keys) -> Any:
    """The knobs' Redis copy (`farm.knobs.from_json` reads it)."""
    return redis.get(keys.knobs)


class LiveKnobs:
    """The knobs in force, read again once the last read is `max_age_s` old. Times are `clock`'s (monotonic)."""

    def __init__(self, keys: Keys, max_age_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.keys, self.clock = keys, clock
        self.cache = KnobsCache(max_age_s)

    def read(self, max_age_s: float | None = None) -> Flow[Knobs]:
        now = self.clock()
        if self.cache.stale(now, max_age_s):
            return self.cache.update((yield Read(knobs_copy, (self.keys,))), now)
        return self.cache.knobs


def knobs_now(redis: Any, keys: Keys) -> Knobs:
    """The knobs in force at this moment, on a blocking client (one read, nothing kept)."""
    return run(Steps(LiveKnobs(keys, max_age_s=0).read()), lambda op: op.on(redis))
