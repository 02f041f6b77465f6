"""Summary statistics of a trace: what `farm trace show` prints and what the generator's tests check.

The figures are those §3 of the paper characterises the workload with: the share of time without
arrivals (Fig. 5(b)), per-stage running times and timeouts (Fig. 6(c)), the outcome mix (Fig. 6(b)).
"""

from __future__ import annotations

import numpy as np

from planner.eval.trace import OUTCOMES, Trace

# Fig. 5(b) of the paper bins arrivals by 5 s.
DEFAULT_BIN_S = 5.0


def task_arrivals(trace: Trace, task: str) -> np.ndarray:
    """Absolute arrival times (start_s + r_i) of every request of a task, sorted."""
    return np.sort(np.concatenate([b.start_s + b.arrivals for b in trace.batches_of(task)]))


def arrival_gap_fraction(trace: Trace, task: str, bin_s: float = DEFAULT_BIN_S) -> float:
    """Share of the bins from the task's first batch start to its last arrival that see no arrival."""
    if bin_s <= 0:
        raise ValueError("bin_s must be > 0")
    origin = trace.batches_of(task)[0].start_s
    arrivals = task_arrivals(trace, task) - origin
    bins = max(1, int(np.ceil(arrivals[-1] / bin_s)))
    hit = np.zeros(bins, dtype=bool)
    hit[np.minimum((arrivals / bin_s).astype(np.int64), bins - 1)] = True
    return float(1.0 - hit.mean())


def longest_idle_gap(trace: Trace, task: str) -> float:
    """The longest stretch between consecutive arrivals of a task, across its batches."""
    arrivals = task_arrivals(trace, task)
    return float(np.diff(arrivals).max()) if arrivals.size > 1 else 0.0


def batch_durations(trace: Trace) -> np.ndarray:
    """T of every batch measured from its start: max_i (r_i + sum_j s_ij) (Eq. 1-2)."""
    return np.array([float((b.arrivals + b.times.sum(axis=1)).max()) for b in trace.batches])


def outcome_shares(trace: Trace, batches=None) -> dict[str, float] | None:
    """Shares of each outcome of Fig. 6(b), from the batches' "outcomes"; None when a batch lacks them."""
    batches = trace.batches if batches is None else batches
    if not batches or any(b.outcomes is None for b in batches):
        return None
    codes = "".join(b.outcomes for b in batches)
    return {name: codes.count(code) / len(codes) for code, name in OUTCOMES.items()}


def last_stage_shares(trace: Trace) -> dict[str, float]:
    """Shares of requests by the last stage they visit ("none": finished on arrival); any pipeline."""
    times = np.vstack([b.times for b in trace.batches])
    visited = times > 0
    last = np.where(visited.any(axis=1), visited.shape[1] - 1 - np.argmax(visited[:, ::-1], axis=1), -1)
    names = ["none"] + [s.name for s in trace.stages]
    return {name: float(np.mean(last == k - 1)) for k, name in enumerate(names)}


def summary(trace: Trace, bin_s: float = DEFAULT_BIN_S) -> dict:
    """A JSON-ready description of a trace."""
    times = np.vstack([b.times for b in trace.batches]) if trace.batches else np.zeros((0, len(trace.stages)))
    stages = []
    for j, stage in enumerate(trace.stages):
        visited = times[:, j][times[:, j] > 0]
        stages.append({
            "name": stage.name, "resource": stage.resource, "cost": stage.cost, "timeout_s": stage.timeout_s,
            "visited": int(visited.size),
            "mean_s": float(visited.mean()) if visited.size else 0.0,
            "p95_s": float(np.percentile(visited, 95)) if visited.size else 0.0,
            "busy_s": float(visited.sum()),
            "timeout_fraction": float(np.mean(visited >= stage.timeout_s - 1e-6)) if visited.size else 0.0,
        })
    tasks = trace.tasks
    result = {
        "stages": stages,
        "tasks": list(tasks),
        "batches": len(trace.batches),
        "requests": trace.num_requests,
        "batch_sizes": sorted({b.size for b in trace.batches}),
        "span_s": (float(max(b.start_s + b.arrivals.max() for b in trace.batches)
                         - min(b.start_s for b in trace.batches)) if trace.batches else 0.0),
        "arrival_gap_fraction": (float(np.mean([arrival_gap_fraction(trace, t, bin_s) for t in tasks]))
                                 if tasks else 0.0),
        "arrival_gap_bin_s": bin_s,
        "batch_duration_mean_s": float(batch_durations(trace).mean()) if trace.batches else 0.0,
        "last_stage": last_stage_shares(trace) if trace.batches else {},
    }
    outcomes = outcome_shares(trace)
    if outcomes is not None:
        first = [trace.batches_of(t)[0] for t in tasks]
        last = [trace.batches_of(t)[-1] for t in tasks]
        result["outcomes"] = {"all": outcomes, "first_batches": outcome_shares(trace, first),
                              "last_batches": outcome_shares(trace, last)}
    return result
