"""Workloads the planner was never tuned on: generator parameters drawn per trace from wide ranges.

`bench/generalize.py` judges the policy on these (issue 33). Each `Draw` is one trace of the generator
family (`planner.eval.tracegen`) with every shape parameter drawn from `RANGES`: the number of tasks,
the batch size, the arrival gap, spread, burst at the rollout cap and drift between batches, GRPO
groups, compile and execute medians, spreads, slow tails and timeouts (so their ratio too), the outcome
mix, colocated or disaggregated, and the spread (lognormal sigma) of its workers' start-ups.

Scale: a draw keeps its task count and `batches` per task, and its batch size is cut (never below
`MIN_BATCH`) so the trace holds at most `requests` requests: the per-request shape is the drawn one,
the pools are smaller. The nominal batch size stays on the draw, to report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from planner.eval.tracegen import MODES, GeneratorParams

MIN_BATCH = 8  # a cut batch keeps at least this many requests
# name -> (low, high); "log" ranges are drawn log-uniformly, the others uniformly
RANGES = {
    "tasks": (1, 12),
    "batch_size": (64, 4096),  # log
    "task_start_window_s": (0.0, 300.0),
    "first_arrival_s": (0.0, 150.0),
    "arrival_median_s": (20.0, 200.0),  # log
    "arrival_sigma": (0.2, 1.0),
    "rollout_cap_quantile": (0.85, 0.995),  # responses past it arrive together at the cap: a burst
    "arrival_drift_sigma": (0.0, 0.15),
    "group_size": (1, 16),  # one of the powers of two in it
    "group_correlation": (0.0, 0.9),
    "train_s": (30.0, 300.0),
    "train_jitter_share": (0.0, 0.1),
    "disaggregated_gap_s": (0.0, 30.0),
    "compile_median_s": (5.0, 100.0),  # log
    "compile_sigma": (0.05, 0.6),
    "compile_timeout_over_median": (1.5, 4.0),
    "execute_median_s": (0.5, 30.0),  # log
    "execute_sigma": (0.1, 1.0),
    "execute_timeout_over_median": (3.0, 20.0),
    "slow_fraction": (0.0, 0.1),
    "timeout_share": (0.0, 0.3),
    "jitter_sigma": (0.1, 0.6),
}
_LOG = {"batch_size", "arrival_median_s", "compile_median_s", "execute_median_s"}
MIX_CONCENTRATION = 2.0  # Dirichlet parameter of each outcome mix (start, middle and end of training)


@dataclass(frozen=True)
class Draw:
    """One drawn trace: its generator parameters and seed, the batch size before the cut, and the
    lognormal sigma of its workers' start-ups."""

    index: int
    seed: int
    params: GeneratorParams
    nominal_batch_size: int
    jitter_sigma: float

    def describe(self) -> str:
        p = self.params
        return (f"{p.mode[:5]} {p.tasks}x{p.batches}x{p.batch_size} (B {self.nominal_batch_size}) "
                f"g{p.group_size} arr {p.first_arrival_s:.0f}+{p.arrival_median_s:.0f}s/{p.arrival_sigma:.2f} "
                f"cap {p.max_rollout_s:.0f}s comp {p.compile_median_s:.1f}s exec {p.execute_median_s:.1f}s "
                f"jit {self.jitter_sigma:.2f}")


def _uniform(rng: np.random.Generator, name: str) -> float:
    lo, hi = RANGES[name]
    if name in _LOG:
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    return float(rng.uniform(lo, hi))


def _mix(rng: np.random.Generator) -> tuple[float, float, float, float]:
    shares = rng.dirichlet([MIX_CONCENTRATION] * 4)
    shares = shares / shares.sum()
    return tuple(float(x) for x in shares[:3]) + (float(1.0 - shares[:3].sum()),)


def _stage(rng: np.random.Generator, stage: str) -> dict:
    median = _uniform(rng, f"{stage}_median_s")
    timeout = median * _uniform(rng, f"{stage}_timeout_over_median")
    slow_low = min(median * 1.3, timeout)
    return {f"{stage}_median_s": median, f"{stage}_sigma": _uniform(rng, f"{stage}_sigma"),
            f"{stage}_timeout_s": timeout, f"{stage}_slow_fraction": _uniform(rng, "slow_fraction"),
            f"{stage}_slow_range_s": (slow_low, timeout), f"{stage}_timeout_share": _uniform(rng, "timeout_share")}


def draw_one(seed: int, index: int, *, batches: int = 4, requests: int = 4000) -> Draw:
    """The `index`-th draw of `seed`: the same (seed, index, batches, requests), the same draw."""
    rng = np.random.default_rng([seed, index])
    lo, hi = RANGES["tasks"]
    tasks = int(rng.integers(lo, hi + 1))
    nominal = int(round(_uniform(rng, "batch_size")))
    size = max(MIN_BATCH, min(nominal, requests // (tasks * batches)))
    first, median, sigma = _uniform(rng, "first_arrival_s"), _uniform(rng, "arrival_median_s"), _uniform(rng, "arrival_sigma")
    cap = first + median * math.exp(sigma * NormalDist().inv_cdf(_uniform(rng, "rollout_cap_quantile")))
    lo, hi = RANGES["group_size"]
    groups = [2 ** k for k in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
    train = _uniform(rng, "train_s")
    params = GeneratorParams(
        mode=MODES[int(rng.integers(len(MODES)))], tasks=tasks, batches=batches, batch_size=size,
        task_start_window_s=_uniform(rng, "task_start_window_s"), first_arrival_s=first, arrival_median_s=median,
        arrival_sigma=sigma, max_rollout_s=cap, arrival_drift_sigma=_uniform(rng, "arrival_drift_sigma"),
        group_size=int(groups[int(rng.integers(len(groups)))]), group_correlation=_uniform(rng, "group_correlation"),
        train_s=train, train_jitter_s=train * _uniform(rng, "train_jitter_share"),
        disaggregated_gap_s=_uniform(rng, "disaggregated_gap_s"),
        mix_start=_mix(rng), mix_mid=_mix(rng), mix_end=_mix(rng), **_stage(rng, "compile"), **_stage(rng, "execute"),
    )
    return Draw(index, int(rng.integers(2**31)), params, nominal, _uniform(rng, "jitter_sigma"))


def draw(seed: int, count: int, *, batches: int = 4, requests: int = 4000) -> list[Draw]:
    """`count` draws of `seed` (the first k of a longer list are the same k)."""
    return [draw_one(seed, i, batches=batches, requests=requests) for i in range(count)]
