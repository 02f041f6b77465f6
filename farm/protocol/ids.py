"""The one grammar of the names a trainer gives the farm: batches, requests, tasks and groups, checked here and
derived everywhere else (the client's calls, the gateway's routes and tenant scopes, the scripts' callers).

Why these rules: a batch's id is spelled into its keys after `:` (farm.protocol.keys), so no name holds `:`
and a farm id holds exactly the one its tenant's prefix puts there; no name holds a control character (a
newline splits log lines and history rows) or a lone surrogate (Redis stores UTF-8); every check is anchored
at both ends (`fullmatch`: `$` would let a trailing newline through) and bounded, so a history row keys by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from farm.pipeline import InvalidInput
from farm.protocol.keys import QueuePart, members

MAX_BATCH_ID, MAX_TASK = 128, 64  # characters, a tenant's prefix included (farm.store.ingest keys rows by them)
MAX_REQUEST_ID_BYTES = 1024  # a request id or group, in UTF-8
TENANT_PREFIX = re.compile(r"t(0|[1-9][0-9]*):")  # a tenant's batches: `t<id>:`, then its name (farm.protocol.scope)


def shown(value: Any) -> str:
    """A refused value as a message quotes it: its repr, cut short (an integer past Python's own limit on
    printing one is named, not printed)."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    return f"{value!r:.100}"


@dataclass(frozen=True)
class Grammar:
    """One kind of name: what it is called in messages, what it may hold, and how long it may be."""

    what: str
    holds: str  # said in the refusal
    chars: re.Pattern[str] | None  # every character (None: printable, no ':')
    most: int
    in_bytes: bool = False

    def size(self, value: str) -> int:
        return len(value.encode()) if self.in_bytes else len(value)

    def accepts(self, value: Any, room: int | None = None) -> bool:
        if not isinstance(value, str) or not value:
            return False
        if self.chars is not None:
            fits = self.chars.fullmatch(value) is not None
        else:  # isprintable: no control or format character, no lone surrogate, no line separator
            fits = value.isprintable() and ":" not in value
        return fits and self.size(value) <= (self.most if room is None else room)

    def check(self, value: Any, room: int | None = None) -> str:
        """The value, or InvalidInput saying what fits; `room`: the most that fits after a tenant's prefix."""
        if not self.accepts(value, room):
            unit = "bytes in UTF-8" if self.in_bytes else "characters"
            raise InvalidInput(f"{self.what} must be 1 to {self.most if room is None else room} {unit} of "
                               f"{self.holds}, not {shown(value)}")
        return value


BATCH = Grammar("batch id", "letters, digits or '_.-'", re.compile(r"[A-Za-z0-9_.-]+"), MAX_BATCH_ID)
TASK = Grammar("task", "letters, digits or '_.-'", re.compile(r"[A-Za-z0-9_.-]+"), MAX_TASK)
REQUEST = Grammar("request id", "printable characters other than ':'", None, MAX_REQUEST_ID_BYTES, in_bytes=True)
GROUP = Grammar("group", "printable characters other than ':'", None, MAX_REQUEST_ID_BYTES, in_bytes=True)

_FARM_BATCH = re.compile(rf"(?:{TENANT_PREFIX.pattern})?(?P<name>[A-Za-z0-9_.-]+)")
_RESERVED = re.compile(r"t[0-9]+")  # a bare name that is a tenant's prefix: its keys would hold that tenant's
# a name that is a stage queue's part: the batch's pending list there (`...:l:<id>`) would end as that part's key
# does, and every tenant's user may write a part over all stages (`%W~<ns>:q:*:ebf`): it could empty the list
QUEUE_PART_NAMES = frozenset(p for p in members(QueuePart).values() if p and ":" not in p)


def check_batch_name(name: str) -> str:
    """A batch's name (a tenant's, without its prefix) that is not a stage queue's part (`QUEUE_PART_NAMES`)."""
    if name in QUEUE_PART_NAMES:
        raise InvalidInput(f"batch id must not be a stage queue's part ({', '.join(sorted(QUEUE_PART_NAMES))}), "
                           f"not {shown(name)}")
    return name


def check_farm_batch(batch_id: Any) -> str:
    """A batch id as the farm's Redis holds it: a name, or a tenant's prefix then a name (`t3:step-1`). A bare
    `t<digits>` is refused: `t3` + `:req` would be tenant 3's batch `req`; so is a name that is a stage queue's
    part (`ebf`, `busy`, ...: `QUEUE_PART_NAMES`)."""
    found = _FARM_BATCH.fullmatch(batch_id) if isinstance(batch_id, str) else None
    if found is None or len(batch_id) > MAX_BATCH_ID or _RESERVED.fullmatch(batch_id) is not None:
        raise InvalidInput(f"batch id must be 1 to {MAX_BATCH_ID} letters, digits or '_.-' (after a tenant's "
                           f"'t<id>:'), and not 't' and digits alone, not {shown(batch_id)}")
    check_batch_name(found.group("name"))
    return batch_id


def check_group(group: Any) -> str | None:
    """A request's group as the farm stores it (an integer as its text), or None for none."""
    if group is None:
        return None
    if isinstance(group, bool) or not isinstance(group, (str, int)) or isinstance(group, int) and not (
            -(1 << 63) <= group < 1 << 63):
        raise InvalidInput(f"group must be a string or a 64-bit integer, not {shown(group)}")
    return GROUP.check(str(group))


_CURSOR = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
_U64 = (1 << 64) - 1


def check_cursor(cursor: Any) -> str:
    """A place in a batch's results (a done-stream entry id, `ms-seq`) that a caller passes back: two whole
    numbers within Redis's unsigned 64 bits, or Redis refuses the read."""
    found = _CURSOR.fullmatch(cursor) if isinstance(cursor, str) else None
    if found is None or int(found.group(1)) > _U64 or int(found.group(2)) > _U64:
        raise InvalidInput(f"cursor must be '0-0' or a cursor this API returned, not {shown(cursor)}")
    return cursor
