"""Start-up distributions for the evaluation: what `farm eval --startup-s` and `bench/startup.py` take.

Each new worker of a replay draws its own start-up (`Startup.draw`, from a `random.Random` the replay
seeds apart from the policy's), and the policy is told the distribution's `PLAN_QUANTILE`, as the live
planner is told that quantile of its workers' observed start-ups (`planner.policy.startup`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from planner.policy.startup import PLAN_QUANTILE

PRESETS = {"paper": 0.0, "realistic": 30.0}  # seconds: the paper's instant start-up, a container's


@dataclass(frozen=True)
class Startup:
    """A start-up distribution: `fixed` (value), `lognormal` (median, sigma) or `samples` (an empirical one)."""

    kind: str
    median_s: float = 0.0
    sigma: float = 0.0
    samples: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "lognormal", "samples"):
            raise ValueError(f"start-up kind must be fixed, lognormal or samples, not {self.kind!r}")
        if not (math.isfinite(self.median_s) and self.median_s >= 0):
            raise ValueError(f"a start-up must be a finite number of seconds >= 0, not {self.median_s!r}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"sigma must be a finite number >= 0, not {self.sigma!r}")
        if self.kind == "lognormal" and self.median_s <= 0:
            raise ValueError("a lognormal start-up needs a median > 0 s")
        if self.kind == "samples":
            if not self.samples:
                raise ValueError("a start-up from samples needs at least one sample")
            if not all(math.isfinite(x) and x >= 0 for x in self.samples):
                raise ValueError("start-up samples must be finite numbers of seconds >= 0")

    @classmethod
    def fixed(cls, seconds: float) -> "Startup":
        return cls("fixed", median_s=float(seconds))

    def draw(self, rng: random.Random) -> float:
        """One worker's start-up."""
        if self.kind == "fixed":
            return self.median_s
        if self.kind == "lognormal":
            return self.median_s * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        return self.samples[rng.randrange(len(self.samples))]

    def quantile(self, q: float) -> float:
        if self.kind == "fixed":
            return self.median_s
        if self.kind == "lognormal":
            if self.sigma == 0:
                return self.median_s
            if not 0 < q < 1:  # the lognormal's ends
                return 0.0 if q <= 0 else math.inf
            return self.median_s * math.exp(self.sigma * NormalDist().inv_cdf(q))
        return float(np.quantile(np.asarray(self.samples), q))

    @property
    def plan_s(self) -> float:
        """What the policy is told: the start-up's `PLAN_QUANTILE`."""
        return self.quantile(PLAN_QUANTILE)

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"{self.median_s:g}"
        if self.kind == "lognormal":
            return f"lognormal:{self.median_s:g},{self.sigma:g}"
        return f"samples:{len(self.samples)} (median {self.quantile(0.5):.3g} s)"


def parse_startup(spec: str | float, read_text=None) -> Startup:
    """`30`, `paper`, `realistic`, `lognormal:MEDIAN,SIGMA`, or `file:PATH` (numbers separated by commas,
    spaces or lines). `read_text(path)` reads the file (the caller's I/O; default: open it)."""
    if isinstance(spec, (int, float)):
        return Startup.fixed(float(spec))
    text = str(spec).strip()
    if text in PRESETS:
        return Startup.fixed(PRESETS[text])
    kind, _, rest = text.partition(":")
    if kind == "lognormal":
        parts = rest.split(",")
        if len(parts) != 2:
            raise ValueError(f"a lognormal start-up is lognormal:MEDIAN,SIGMA (seconds, spread), not {text!r}")
        return Startup("lognormal", median_s=_number(parts[0], text), sigma=_number(parts[1], text))
    if kind == "file":
        if read_text is None:
            def read_text(path: str) -> str:
                with open(path, encoding="utf-8") as f:
                    return f.read()
        try:
            body = read_text(rest)
        except OSError as e:
            raise ValueError(f"cannot read start-up samples from {rest!r}: {e.strerror or e}") from None
        samples = [_number(x, f"{rest}") for x in body.replace(",", " ").split()]
        return Startup("samples", samples=tuple(samples))
    try:
        return Startup.fixed(float(text))
    except ValueError:
        raise ValueError(f"start-up must be seconds, a preset ({', '.join(PRESETS)}), lognormal:MEDIAN,SIGMA "
                         f"or file:PATH, not {text!r}") from None


def _number(text: str, where: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise ValueError(f"{text!r} in start-up {where!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{text!r} in start-up {where!r} must be a finite number >= 0")
    return x
