"""The operator's knobs: tolerated extra delay D, per-stage cost, timeout and pool bounds, scheduler, policy.

Pure data: the store persists them, Redis mirrors them for workers, the planner reads them as an
argument (`decide(snapshot, knobs)`), and `farm knobs` edits them. Each knob is one dataclass field whose
`Knob` metadata (`farm.knob_schema`) says how it is checked, edited, shown and offered by `farm eval`, so a
new knob is one field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from farm.knob_schema import Choice, Count, Name, Number, OptionalNumber, SecondsOrNever, check, knob, knobs_of
from farm.protocol.keys import Keys

SCHEDULERS = ("ebf", "fcfs")


@dataclass(frozen=True)
class StageKnobs:
    """Per-stage overrides; None keeps the pipeline's own value."""

    cost: float | None = knob(None, OptionalNumber(), "weight C_j of one worker-second, in place of the pipeline's")
    timeout_s: float | None = knob(None, OptionalNumber(), "time limit T_j of a request, in place of the pipeline's",
                                   unit="s")
    min_workers: int = knob(0, Count(), "lower bound of a stage's pool")
    max_workers: int = knob(64, Count(), "upper bound of a stage's pool", option="--max-workers")

    def __post_init__(self) -> None:
        check(self)
        if self.min_workers > self.max_workers:
            raise ValueError(f"min_workers ({self.min_workers}) exceeds max_workers ({self.max_workers})")

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in knobs_of(StageKnobs)}


_NO_OVERRIDES = StageKnobs()  # shared: knobs are read per request on the submit path

@dataclass(frozen=True)
class Knobs:
    # D: the tolerated extra delay of a batch
    delay_s: float = knob(2.0, Number(allow_zero=True), "tolerated extra delay", unit="s", symbol="D",
                          option="--delay")
    scheduler: str = knob("ebf", Choice(SCHEDULERS), "dispatch order of the stage queues", option="--scheduler")
    policy: str = knob("distrs", Name("a policy name"), "distrs | history | ideal | zq-dedicated | static:N1,N2,...",
                       option="--policy")
    # the planner's periodic decision beside batch events (decisions take milliseconds)
    tick_s: float = knob(1.0, Number(), "periodic decision interval", unit="s", option="--tick-s")
    stages: Mapping[str, StageKnobs] = field(default_factory=dict)  # by queue, "<pipeline>.<stage>"
    # an open batch whose trainer is silent this long (no open, submit, seal, result wait or heartbeat) is
    # abandoned: its outstanding requests are cancelled. 0 or None: never (a crashed trainer's batch then
    # stays open, its requests queued and its demand planned for, until cancelled by hand)
    abandon_after_s: float | None = knob(600.0, SecondsOrNever(), "a trainer's silence after which its open batch "
                                         "is abandoned; 0 or never: never", unit="s")

    def __post_init__(self) -> None:
        check(self)

    def stage(self, queue: str) -> StageKnobs:
        return self.stages.get(queue, _NO_OVERRIDES)

    def abandon_after(self) -> float | None:
        """Seconds of a trainer's silence after which its open batch is abandoned; None: never."""
        return float(self.abandon_after_s) if self.abandon_after_s else None

    def timeout_of(self, stage: Any) -> float:
        """A stage's effective timeout: the operator's override, else the stage's own. `stage` is
        anything with `.queue` and `.timeout_s` (a pipeline's Stage, the policy's StageState)."""
        override = self.stage(stage.queue).timeout_s
        return stage.timeout_s if override is None else override

    def cost_of(self, stage: Any) -> float:
        """A stage's effective cost C_j: the operator's override, else the stage's own."""
        override = self.stage(stage.queue).cost
        return stage.cost if override is None else override

    def with_stage(self, queue: str, **changes: Any) -> "Knobs":
        stages = dict(self.stages)
        stages[queue] = replace(self.stage(queue), **changes)
        return replace(self, stages=stages)

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in knobs_of(Knobs)}
        out["stages"] = {q: k.to_dict() for q, k in sorted(self.stages.items())}
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Knobs":
        """The knobs of a saved dict; names it does not know (saved by a later version) are ignored."""
        known, stage_known = knobs_of(cls), knobs_of(StageKnobs)
        stages = {q: StageKnobs(**{k: v for k, v in s.items() if k in stage_known})
                  for q, s in (d.get("stages") or {}).items()}
        return cls(**{k: v for k, v in d.items() if k in known}, stages=stages)


def redis_key(namespace: str) -> str:
    """Where the live copy of the knobs lives in Redis (JSON of `Knobs.to_dict()`); the store is the source of truth."""
    return Keys(namespace).knobs


def from_json(raw: str | bytes | None) -> Knobs:
    """The knobs from their Redis copy; the defaults when none was published yet."""
    return Knobs.from_dict(json.loads(raw)) if raw else Knobs()


class KnobsCache:
    """The live knobs as last read, read again once they are `max_age_s` old (0: at every read): workers and
    clients consult them for every request, and a knob an operator changes takes effect within that time.
    Without I/O or a clock; `farm.protocol.live_knobs.LiveKnobs` is the reader around it."""

    def __init__(self, max_age_s: float = 1.0) -> None:
        self.max_age_s = max_age_s
        self._read: tuple[float, Knobs] | None = None

    def stale(self, now: float, max_age_s: float | None = None) -> bool:
        age = self.max_age_s if max_age_s is None else max_age_s
        return self._read is None or age <= 0 or now - self._read[0] > age

    def update(self, raw: str | bytes | None, now: float) -> Knobs:
        self._read = (now, from_json(raw))
        return self._read[1]

    @property
    def knobs(self) -> Knobs:
        return self._read[1] if self._read is not None else Knobs()
