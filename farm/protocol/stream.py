"""The history stream's fill: how far the recorder is behind, and whether the stream's cap dropped
entries it had not recorded. While the history store is down the stream is the buffer; past its cap
(`EVENTS_MAXLEN`, trimmed approximately by every XADD) the oldest unrecorded facts are gone, and that
must be loud (the recorder's log, `farm status`, the metrics), never silent. History entries Python writes
(the scripts write theirs with `emit`) go through `append`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from farm.protocol.keys import Keys, text
from farm.protocol.scripts import EVENTS_MAXLEN

WARN_FILL = 0.5  # from half the cap on, the recorder warns that it is behind


@dataclass(frozen=True)
class StreamHealth:
    """The stream now. `length` is what no recorder has taken yet (a recorder trims what it committed)."""

    length: int
    cap: int
    oldest_age_s: float  # age of the oldest entry still there, 0 when empty: the recorder's lag in time
    oldest_id: str | None  # that entry's id; at the cap, unrecorded entries before it were dropped

    @property
    def fill(self) -> float:
        return self.length / self.cap if self.cap else 0.0

    @property
    def at_cap(self) -> bool:
        # every XADD trims to the cap (MAXLEN ~ keeps at least `cap`): a stream this long is losing its
        # oldest entries, and none of them was recorded (a recorder trims only what it committed)
        return self.length >= self.cap


def append(redis: Any, keys: Keys, entry: dict[str, str], cap: int | None = EVENTS_MAXLEN) -> Any:
    """Append one history entry (`farm.events.encode`), trimming the stream to about `cap` (None: untrimmed)."""
    if cap is None:
        return redis.xadd(keys.events, entry)
    return redis.xadd(keys.events, entry, maxlen=cap, approximate=True)


def _id_ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


def health(redis: Any, namespace: str, *, now: float | None = None, cap: int = EVENTS_MAXLEN) -> StreamHealth:
    """Read the stream's fill (two O(1) commands)."""
    key = Keys(namespace).events
    now = time.time() if now is None else now
    length = int(redis.xlen(key))
    first = redis.xrange(key, count=1) if length else []
    oldest_id = text(first[0][0]) if first else None
    oldest_age = max(0.0, now - _id_ms(oldest_id) / 1000.0) if oldest_id else 0.0
    return StreamHealth(length, cap, oldest_age, oldest_id)
