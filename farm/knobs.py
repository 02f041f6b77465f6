"""The operator's knobs: tolerated extra delay D, per-stage cost, timeout and pool bounds, scheduler, policy.

Pure data: the store persists them, Redis mirrors them for workers, the planner reads them as an
argument (`decide(snapshot, knobs)`), and `farm knobs` edits them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from farm.protocol.keys import Keys

SCHEDULERS = ("ebf", "fcfs")


def _positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class StageKnobs:
    """Per-stage overrides; None keeps the pipeline's own value."""

    cost: float | None = None
    timeout_s: float | None = None
    min_workers: int = 0
    max_workers: int = 64

    def __post_init__(self) -> None:
        if self.cost is not None:
            _positive("cost", self.cost)
        if self.timeout_s is not None:
            _positive("timeout_s", self.timeout_s)
        for name in ("min_workers", "max_workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")
        if self.min_workers > self.max_workers:
            raise ValueError(f"min_workers ({self.min_workers}) exceeds max_workers ({self.max_workers})")


_NO_OVERRIDES = StageKnobs()  # shared: knobs are read per request on the submit path

@dataclass(frozen=True)
class Knobs:
    delay_s: float = 2.0  # D: the tolerated extra delay of a batch
    scheduler: str = "ebf"
    policy: str = "distrs"
    tick_s: float = 1.0  # the planner's periodic decision beside batch events (decisions take milliseconds)
    stages: Mapping[str, StageKnobs] = field(default_factory=dict)  # by queue, "<pipeline>.<stage>"
    # an open batch whose trainer is silent this long (no open, submit, seal, result wait or heartbeat) is
    # abandoned: its outstanding requests are cancelled. 0 or None: never (a crashed trainer's batch then
    # stays open, its requests queued and its demand planned for, until cancelled by hand)
    abandon_after_s: float | None = 600.0

    def __post_init__(self) -> None:
        _positive("delay_s", self.delay_s, allow_zero=True)
        _positive("tick_s", self.tick_s)
        if self.abandon_after_s is not None:
            _positive("abandon_after_s", self.abandon_after_s, allow_zero=True)
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {SCHEDULERS}, not {self.scheduler!r}")
        if not isinstance(self.policy, str) or not self.policy:
            raise ValueError(f"policy must be a policy name, not {self.policy!r}")

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
        return {
            "delay_s": self.delay_s,
            "scheduler": self.scheduler,
            "policy": self.policy,
            "tick_s": self.tick_s,
            "abandon_after_s": self.abandon_after_s,
            "stages": {q: {f.name: getattr(k, f.name) for f in fields(k)} for q, k in sorted(self.stages.items())},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Knobs":
        known = {f.name for f in fields(cls)} - {"stages"}
        stage_known = {f.name for f in fields(StageKnobs)}
        stages = {q: StageKnobs(**{k: v for k, v in s.items() if k in stage_known}) for q, s in (d.get("stages") or {}).items()}
        return cls(**{k: v for k, v in d.items() if k in known}, stages=stages)


def redis_key(namespace: str) -> str:
    """Where the live copy of the knobs lives in Redis (JSON of `Knobs.to_dict()`); the store is the source of truth."""
    return Keys(namespace).knobs


def from_json(raw: str | bytes | None) -> Knobs:
    """The knobs from their Redis copy; the defaults when none was published yet."""
    return Knobs.from_dict(json.loads(raw)) if raw else Knobs()


class KnobsCache:
    """The live knobs as last read, read again once they are `max_age_s` old: workers and clients consult
    them for every request, and a knob an operator changes takes effect within that time."""

    def __init__(self, max_age_s: float = 1.0) -> None:
        self.max_age_s = max_age_s
        self._read: tuple[float, Knobs] | None = None

    def stale(self, now: float, max_age_s: float | None = None) -> bool:
        age = self.max_age_s if max_age_s is None else max_age_s
        return self._read is None or now - self._read[0] > age

    def update(self, raw: str | bytes | None, now: float) -> Knobs:
        self._read = (now, from_json(raw))
        return self._read[1]

    @property
    def knobs(self) -> Knobs:
        return self._read[1] if self._read is not None else Knobs()
