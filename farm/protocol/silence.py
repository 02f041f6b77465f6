"""Abandoned batches: a batch whose trainer went silent expires instead of staying open for ever.

A trainer killed mid-step sends no cancel, so its batch would stay open, its requests queued and its outstanding
requests in the planner's plans indefinitely. Every sign of life from a batch's trainer (open, submit, seal, a
wait on its results, `batch.heartbeat()`, the client's keep-alive) records the time in `Keys.seen`, on Redis'
clock; the sweep that gives lapsed leases back (run by workers, waiting clients and the gateway) also abandons
the open batches silent for longer than the knob `abandon_after_s`: their unfinished requests get a `cancelled`
result, the batch ends as 'abandoned' (`batch_abandoned` in the history) and a trainer that comes back is told
so (`BatchAbandoned`), never left waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from farm.errors import BatchAbandoned
from farm.protocol.scripts import TOUCH, Call

ABANDON_LIMIT = 16  # silent batches one sweep abandons (each in the sweep's one script run)
KEEP_ALIVE_PER_ABANDON = 4  # the client's keep-alive touches its batches this often per abandon_after_s
KEEP_ALIVE_IDLE_S = 30.0  # ... and looks at the knob this often while batches never expire


def abandoned(batch_id: str, silent_s: Any = None, after_s: Any = None) -> BatchAbandoned:
    """The error a trainer gets about a batch the farm abandoned (`silent_s`, `after_s`: as the farm recorded)."""
    silent, after = _seconds(silent_s), _seconds(after_s)
    heard = f"for {silent:g} s" if silent is not None else "for too long"
    limit = f" (the knob abandon_after_s is {after:g} s)" if after is not None else ""
    return BatchAbandoned(
        f"batch {batch_id!r} was abandoned by the farm: it heard no submit, result wait or heartbeat from its "
        f"trainer {heard}{limit}, so its unfinished requests were cancelled. Open a new batch; a trainer silent "
        f"for longer on purpose keeps its batch alive with batch.heartbeat()", silent_s=silent, after_s=after)


def _seconds(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Touched:
    """One batch after a sign of life from its trainer."""

    batch_id: str
    state: str  # open, completed, cancelled, abandoned; 'unknown' when there is no such batch
    silent_s: float | None = None  # abandoned: how long the farm had heard nothing
    after_s: float | None = None  # abandoned: the knob then

    def state_or_raise(self) -> str:
        """The batch's state; BatchAbandoned for one the farm abandoned."""
        if self.state == "abandoned":
            raise abandoned(self.batch_id, self.silent_s, self.after_s)
        return self.state


def touch_call(batch_ids: Sequence[str]) -> Call:
    """A sign of life for these batches (checked ids: none holds a comma) in one round trip."""
    return TOUCH.call(batches=",".join(batch_ids))


def parse_touch(reply: list, batch_ids: Sequence[str]) -> list[Touched]:
    return [Touched(bid, str(r[0]), *(_seconds(x) for x in r[1:3])) for bid, r in zip(batch_ids, reply)]


def ending(batch_id: str, fields: Mapping[str, str]) -> BatchAbandoned | None:
    """What the end marker of a batch's done stream says to its reader: an error when the farm abandoned it."""
    if fields.get("end") != "abandoned":
        return None
    return abandoned(batch_id, fields.get("silent_s"), fields.get("abandon_after_s"))


def keep_alive_interval(after_s: float | None) -> float:
    """How often a client touches the batches it holds, so that a live trainer's batch never expires."""
    return max(after_s / KEEP_ALIVE_PER_ABANDON, 0.05) if after_s else KEEP_ALIVE_IDLE_S


def silent(seen_at: float | None, after_s: float | None, now: float) -> bool:
    """Whether a batch last seen at `seen_at` is past the silence its trainer is allowed (the planner counts no
    demand for it, even before a sweep abandons it). A batch never seen (opened before this) is not."""
    return after_s is not None and seen_at is not None and now - seen_at >= after_s
