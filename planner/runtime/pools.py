"""Turning a decision into pool changes: per stage, how many workers to spawn and which ones to retire.

Pure: it sees the workers that exist (from the backend, joined with the farm's live view of which are
busy) and the target per stage, and returns the changes. Retiring picks idle workers first, the
youngest first (a worker still starting serves nobody yet); a busy worker is retired only when too few
are idle, and then the one that has run its request longest (it is likely to be free soonest) and it
finishes that request before it leaves (warm shutdown, done by the backend).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping


@dataclass(frozen=True)
class PoolWorker:
    """A worker as the planner sees it. `busy_since` is when its current request started (None: idle)."""

    name: str
    stage: str  # the stage's queue, "<pipeline>.<stage>"
    started_at: float = 0.0  # when it was spawned
    busy_since: float | None = None
    retiring: bool = False  # already asked to leave: it no longer counts toward the pool

    @property
    def busy(self) -> bool:
        return self.busy_since is not None


@dataclass(frozen=True)
class Changes:
    spawn: Mapping[str, int] = field(default_factory=dict)  # stage -> how many new workers
    retire: tuple[PoolWorker, ...] = ()  # in the order to retire them

    @property
    def empty(self) -> bool:
        return not any(self.spawn.values()) and not self.retire


def clamp(target: Mapping[str, int], bounds: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """The target held within each stage's (min, max) workers; stages without bounds pass unchanged."""
    out: dict[str, int] = {}
    for stage, n in target.items():
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n < 0:
            raise ValueError(f"target for stage {stage!r} must be a whole number >= 0, not {n!r}")
        lo, hi = bounds.get(stage, (0, math.inf))
        out[stage] = int(min(max(int(n), lo), hi))
    for stage, (lo, _) in bounds.items():
        out.setdefault(stage, lo)
    return out


def _retire_order(worker: PoolWorker) -> tuple:
    if not worker.busy:
        return (0, -worker.started_at, worker.name)  # idle: youngest first
    return (1, worker.busy_since, worker.name)  # busy: longest-running request first


def plan(workers: Iterable[PoolWorker], target: Mapping[str, int]) -> Changes:
    """The spawns and retirements that bring each stage of `target` to its number of workers.

    Stages that have workers but no target are left alone: the planner only sizes what it decided on.
    """
    by_stage: dict[str, list[PoolWorker]] = {}
    for w in workers:
        if not w.retiring:
            by_stage.setdefault(w.stage, []).append(w)
    spawn: dict[str, int] = {}
    retire: list[PoolWorker] = []
    for stage in sorted(target):
        want = int(target[stage])
        have = by_stage.get(stage, [])
        if want > len(have):
            spawn[stage] = want - len(have)
        elif want < len(have):
            retire.extend(sorted(have, key=_retire_order)[: len(have) - want])
    return Changes(spawn=spawn, retire=tuple(retire))
