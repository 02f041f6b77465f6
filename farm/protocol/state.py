"""The request-state record: what the farm keeps of one request between its stages.

It lives in the batch's `:req` hash, JSON under short keys (it is written once per stage of every
request). The client writes it on submit, the stage worker that finishes a stage rewrites it for the
next one, the planner's live view reads where each request is, and the Lua scripts read its group and
stage records when they finish a request themselves (cancel, lost worker, hard time limit): the
field names Lua uses reach it through the generated prelude (farm.protocol.scripts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

GROUP, VISITS, CARRY, RECORDS, QUEUED_AT, DETAILS = "g", "st", "c", "r", "qa", "d"


_STRICT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)

@dataclass(frozen=True)
class RequestState:
    """One request between stages. `records` are `StageRecord.to_dict()`s of the stages done, in order."""

    group: str | None = None
    visits: tuple[str, ...] = ()  # the stages it visits, in pipeline order
    carry: Mapping[str, Any] = field(default_factory=dict)  # what earlier stages passed on
    records: tuple[Mapping[str, Any], ...] = ()
    queued_at: float | None = None  # when it entered its current stage's queue
    details: Mapping[str, Any] = field(default_factory=dict)  # merged into the result's details

    def encode(self) -> str:
        """The JSON the farm stores; raises TypeError or ValueError when a stage passed on non-JSON data."""
        return _STRICT.encode({GROUP: self.group, VISITS: list(self.visits), CARRY: self.carry,
                               RECORDS: list(self.records), QUEUED_AT: self.queued_at, DETAILS: self.details})

    @classmethod
    def decode(cls, raw: str | bytes) -> "RequestState":
        """The record from its JSON; raises ValueError when it is not one."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"a request state is a JSON object, not {type(data).__name__}")
        records = tuple(r for r in data.get(RECORDS) or () if isinstance(r, dict))
        queued_at = data.get(QUEUED_AT)
        return cls(data.get(GROUP), tuple(data.get(VISITS) or ()), data.get(CARRY) or {}, records,
                   float(queued_at) if queued_at is not None else None, data.get(DETAILS) or {})

    @property
    def arrived_at(self) -> float | None:
        """When the request arrived: it entered its first stage's queue then, so the first stage record's
        queue time; before any stage finished, the current queue time."""
        if self.records and self.records[0].get("queued_at") is not None:
            return float(self.records[0]["queued_at"])
        return self.queued_at

    def next_visit(self, known: Sequence[str]) -> str | None:
        """The first stage it visits that has no record yet (among `known` stage names), or None when done."""
        done = {r.get("name") for r in self.records}
        return next((name for name in self.visits if name not in done and name in known), None)
