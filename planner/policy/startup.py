"""How long a new worker takes to be ready, as observed, and the one figure the policy plans with.

Start-ups jitter (image pulls, CUDA initialisation, a verifier's warm-up, a loaded host), so the planner
plans with a high percentile (`PLAN_QUANTILE`) of what it has seen: a worker asked for now is ready by
then nine times in ten. Planning with the median would start workers late as often as early, and a late
worker costs extra delay where an early one costs only its idle seconds.

`StartupStats` summarises observed samples for the daemon and `farm status`; the evaluation's start-up
distributions (`planner.eval.startup`) are planned with the same quantile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

PLAN_QUANTILE = 0.9  # the start-up the policy plans with: ready by then nine times in ten


@dataclass(frozen=True)
class StartupStats:
    """Observed start-ups of one (backend, stage): what `farm status` shows and the daemon plans with."""

    backend: str
    stage: str
    count: int
    median_s: float
    plan_s: float  # the PLAN_QUANTILE
    max_s: float

    @classmethod
    def of(cls, backend: str, stage: str, samples: Sequence[float]) -> "StartupStats":
        a = np.asarray(samples, dtype=np.float64)
        if not len(a):
            raise ValueError("no start-up samples")
        return cls(backend, stage, len(a), float(np.median(a)), float(np.quantile(a, PLAN_QUANTILE)), float(a.max()))


def summarise(rows: Iterable[tuple[str | None, str, float]]) -> list[StartupStats]:
    """(backend, stage, seconds) rows -> one `StartupStats` per (backend, stage), sorted."""
    by: dict[tuple[str, str], list[float]] = {}
    for backend, stage, seconds in rows:
        if seconds is not None and math.isfinite(seconds) and seconds >= 0:
            by.setdefault((backend or "unknown", stage), []).append(float(seconds))
    return [StartupStats.of(b, s, v) for (b, s), v in sorted(by.items())]
