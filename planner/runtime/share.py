"""The cluster's capacity shared among the pipelines one daemon sizes: each pipeline's snapshot gets its
share (`Snapshot.capacity`), so that their plans together fit what the backend reports.

Per resource kind, a pipeline keeps the workers it holds now (placed, not stopping) and gets a part of
the rest (what is placeable beyond all holdings, and likewise of the most) in proportion to what it
wants beyond its holding (its last need, `Decision.need`), by largest remainders (ties to the pipeline
first by name). When nobody wants more, the rest is split evenly, so any of them may grow into it at
the next epoch. Pure.
"""

from __future__ import annotations

from typing import Mapping

from planner.policy.capacity import Capacity


def split(amount: int, weights: Mapping[str, float]) -> dict[str, int]:
    """`amount` whole workers in proportion to `weights` (largest remainders; ties to the first name)."""
    names = sorted(weights)
    if not names or amount <= 0:
        return {n: 0 for n in names}
    total = sum(weights.values())
    if total <= 0:
        weights, total = {n: 1.0 for n in names}, float(len(names))
    exact = {n: amount * weights[n] / total for n in names}
    out = {n: int(exact[n]) for n in names}
    for n in sorted(names, key=lambda n: (-(exact[n] - out[n]), n))[: amount - sum(out.values())]:
        out[n] += 1
    return out


def shares(capacity: Capacity, kinds: Mapping[str, set[str]], held: Mapping[str, Mapping[str, int]],
           wants: Mapping[str, Mapping[str, int] | None]) -> dict[str, Capacity]:
    """Per pipeline its share of `capacity`. `kinds`: pipeline -> the resource kinds of its stages;
    `held`: pipeline -> kind -> workers placed now; `wants`: pipeline -> kind -> its last need (None: none yet)."""
    placeable: dict[str, dict[str, int]] = {p: {} for p in kinds}
    most: dict[str, dict[str, int]] = {p: {} for p in kinds}
    for kind, top in capacity.most.items():
        users = [p for p in kinds if kind in kinds[p]]
        mine = {p: held.get(p, {}).get(kind, 0) for p in users}
        free_now = max(0, capacity.placeable.get(kind, 0) - sum(mine.values()))
        free_most = max(0, top - sum(mine.values()))
        demand = {}
        for p in users:
            want = wants.get(p)
            # no need seen yet (a pipeline's first epoch): assume it wants all that is free, the worst case for the others' spawns
            demand[p] = free_most if want is None else max(0, want.get(kind, 0) - mine[p])
        now, at_most = split(free_now, demand), split(free_most, demand)
        for p in users:
            placeable[p][kind] = mine[p] + now[p]
            most[p][kind] = max(mine[p] + at_most[p], placeable[p][kind])
    return {p: Capacity(placeable=placeable[p], most=most[p], node_startup_s=capacity.node_startup_s) for p in kinds}
