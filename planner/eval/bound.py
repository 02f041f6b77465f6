"""How little extra delay any scheduler could reach with n workers at one stage: a lower bound.

Figure 14a compares two schedulers at each pool size; this says how much room there was. With the
other stages ample, a request reaches stage k when it arrives plus its earlier stages, and whatever the
order, the work released at or after t1 runs after t1 on n workers: the last of it finishes no sooner
than t1 + work / n. Over every t1 that bounds, per batch, its own completion (its requests alone), and
the latest completion of all the batches together (someone's requests finish last).

So the mean extra delay over the batches is at least the larger of
- the mean of the per-batch bounds, and
- for the batch that finishes last (any of them: take the kindest), its share of the common bound, the
  others at their own bounds.
It ignores the stages after k (as if they took no time), so it stays a bound.
"""

from __future__ import annotations

import numpy as np

from planner.policy.workload import Workload


def _finish_bound(release: np.ndarray, work: np.ndarray, n: int) -> float:
    """The earliest the last of these requests can finish stage k on n workers (-inf: none)."""
    if not len(release):
        return -np.inf
    order = np.argsort(release, kind="stable")
    release, work = release[order], work[order]
    after = np.cumsum(work[::-1])[::-1]  # work released at or after each release time
    return float(max((release + after / n).max(), (release + work).max()))


def mean_delay_bound(w: Workload, stage: int, n: int) -> float:
    """A lower bound on the mean extra delay of `w`'s batches (T from `w.deadlines`) that no dispatch
    order beats, with `n` workers at `stage` and every other stage ample."""
    if n < 1:
        return np.inf
    visits = w.times[:, stage] > 0
    release = (w.arrival + w.times[:, :stage].sum(axis=1))[visits]
    work = w.times[visits, stage]
    batch = w.batch[visits]
    batches = np.unique(w.batch)
    t = w.deadlines[batches]
    own = np.array([max(_finish_bound(release[batch == b], work[batch == b], n) - tb, 0.0)
                    for b, tb in zip(batches, t)])
    common = _finish_bound(release, work, n)
    # the batch that finishes last has C >= common; the kindest choice of it keeps this a bound
    last = min(max(common - tb, own[i]) + own.sum() - own[i] for i, tb in enumerate(t))
    return float(max(own.sum(), last) / len(batches))
