"""The operator's knobs, persisted in the store (the source of truth) and mirrored to Redis (read live).

Also the parsing of `key=value` edits that `farm knobs set` applies, validated through the Knobs
dataclasses so a bad value is refused with a message and nothing half-applied.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Iterable, Mapping, Sequence

from sqlalchemy import Engine, insert, select

from farm import registry
from farm.knob_schema import Knob, knobs_of
from farm.knobs import Knobs, StageKnobs, redis_key
from farm.pipeline import UnknownPipeline
from farm.store.engine import StoreError
from farm.store.models import KnobsVersion

GLOBAL_KNOBS = knobs_of(Knobs)  # what `farm knobs set NAME=VALUE` may name, with the type each value is read as
STAGE_KNOBS = knobs_of(StageKnobs)  # and with --stage QUEUE


class KnobError(ValueError):
    """An edit of the knobs that cannot be applied; the message says why."""


class KnobStore:
    """load() the knobs in force, save() new ones (store first, then the live Redis copy)."""

    def __init__(self, engine: Engine, redis=None, namespace: str = "farm") -> None:
        self.engine = engine
        self.redis = redis
        self.namespace = namespace

    @property
    def key(self) -> str:
        return redis_key(self.namespace)

    def load(self) -> Knobs:
        """The latest saved knobs; the defaults when none were ever saved."""
        with self.engine.connect() as conn:
            data = conn.execute(select(KnobsVersion.data).order_by(KnobsVersion.id.desc()).limit(1)).scalar()
        if data is None:
            return Knobs()
        try:
            return Knobs.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"the knobs saved in the store are invalid ({exc}); "
                             "set them again with `farm knobs set`") from exc

    def save(self, knobs: Knobs) -> Knobs:
        """Persist `knobs` as the version in force, then publish them to Redis (when a client is given)."""
        if not isinstance(knobs, Knobs):
            raise TypeError(f"save() takes a Knobs, not {type(knobs).__name__}")
        with self.engine.begin() as conn:
            conn.execute(insert(KnobsVersion).values(saved_at=time.time(), data=knobs.to_dict()))
        self.publish(knobs)
        return knobs

    def publish(self, knobs: Knobs | None = None) -> Knobs:
        """Write the knobs (by default the saved ones) where workers read them; `farm up` calls it on start."""
        knobs = self.load() if knobs is None else knobs
        if self.redis is not None:
            self.redis.set(self.key, json.dumps(knobs.to_dict(), separators=(",", ":")))
        return knobs

    def versions(self, limit: int = 20) -> list[tuple[float, Knobs]]:
        """The latest saved versions, newest first, as (saved_at, knobs)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(KnobsVersion.saved_at, KnobsVersion.data).order_by(KnobsVersion.id.desc()).limit(limit)
            ).all()
        return [(at, Knobs.from_dict(data)) for at, data in rows]


# ---------------------------------------------------------------- edits


def known_queues() -> list[str]:
    """Every stage queue of the pipelines this installation can load."""
    queues = []
    for name in registry.names():
        try:
            queues.extend(registry.get(name).queues)
        except (UnknownPipeline, ImportError):
            continue  # a pipeline whose verifier is not installed here has no stages to tune here
    return sorted(queues)


def parse_assignments(assignments: Iterable[str], allowed: Mapping[str, Knob]) -> dict[str, object]:
    """`["delay_s=3", "scheduler=fcfs"]` -> typed values; unknown names and malformed pairs are refused."""
    changes: dict[str, object] = {}
    for item in assignments:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise KnobError(f"expected NAME=VALUE, not {item!r}")
        if name not in allowed:
            raise KnobError(f"unknown knob {name!r}; known: {', '.join(allowed)}")
        knob = allowed[name]
        try:
            changes[name] = knob.kind.parse(name, raw, knob.default)
        except ValueError as exc:
            raise KnobError(str(exc)) from None
    if not changes:
        raise KnobError("nothing to set: give NAME=VALUE pairs")
    return changes


def apply_assignments(knobs: Knobs, assignments: Sequence[str], *, stage: str | None = None,
                      queues: Sequence[str] | None = None) -> Knobs:
    """New knobs with the edits applied: global ones, or with `stage` those of one stage queue.

    `queues` are the stage queues that may be tuned (default: `known_queues()`); a queue that already
    has overrides stays editable even if its pipeline is not loadable here.
    """
    try:
        if stage is None:
            return replace(knobs, **parse_assignments(assignments, GLOBAL_KNOBS))
        allowed = set(known_queues() if queues is None else queues) | set(knobs.stages)
        if stage not in allowed:
            raise KnobError(f"unknown stage queue {stage!r}; known: {', '.join(sorted(allowed)) or 'none'}")
        return knobs.with_stage(stage, **parse_assignments(assignments, STAGE_KNOBS))
    except KnobError:
        raise
    except (TypeError, ValueError) as exc:
        raise KnobError(str(exc)) from exc


def reset(knobs: Knobs, *, stage: str | None = None) -> Knobs:
    """The defaults; with `stage`, the same knobs without that stage's overrides."""
    if stage is None:
        return Knobs()
    if stage not in knobs.stages:
        raise KnobError(f"stage {stage!r} has no overrides; "
                        f"stages with overrides: {', '.join(sorted(knobs.stages)) or 'none'}")
    return replace(knobs, stages={q: k for q, k in knobs.stages.items() if q != stage})
