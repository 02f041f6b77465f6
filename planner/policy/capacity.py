"""How many workers of each resource kind the cluster can run: what a backend reports every epoch and
the policy plans within. Frozen data, no I/O.

Counted in workers of a resource kind as the knobs name it (`StageState.resource`: "cpu", "gpu", "io"),
not in cores or devices: the backend converts its resources with its per-kind worker spec (a Ray GPU
worker holds one GPU, an I/O worker a quarter of a core). `placeable` is what can run at once with the
nodes there now; `most` is what can run once an autoscaler has added every node it may (equal to
`placeable` on a fixed-size cluster); a kind absent from both is unbounded (the backend cannot see a
limit, and the knobs' `max_workers` still apply). A kind in `most` alone has nothing placeable now (an
autoscaler whose nodes of that kind are all still to be added).

Within a pipeline, its stages of one kind share that kind's capacity (`fit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence



def _counts(raw: Mapping[str, int], what: str) -> dict[str, int]:
    out = {}
    for kind, n in raw.items():
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"{what}: a resource kind must be a non-empty name, not {kind!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{what}[{kind!r}] must be a whole number of workers >= 0, not {n!r}")
        out[kind] = n
    return out


@dataclass(frozen=True)
class Capacity:
    """Workers of each resource kind the cluster can run now (`placeable`) and at most (`most`)."""

    placeable: Mapping[str, int] = field(default_factory=dict)
    most: Mapping[str, int] = field(default_factory=dict)
    node_startup_s: float = 0.0  # how long an autoscaler's new node takes (measured), 0 without one

    def __post_init__(self) -> None:
        placeable = _counts(self.placeable, "placeable")
        most = _counts(self.most, "most")
        for kind, n in placeable.items():
            most.setdefault(kind, n)
        for kind, n in most.items():
            if kind in placeable and n < placeable[kind]:
                raise ValueError(f"most[{kind!r}] ({n}) is below placeable[{kind!r}] ({placeable[kind]})")
        if not (self.node_startup_s >= 0 and math.isfinite(self.node_startup_s)):
            raise ValueError(f"node_startup_s must be a number >= 0, not {self.node_startup_s!r}")
        object.__setattr__(self, "placeable", placeable)
        object.__setattr__(self, "most", most)

    @property
    def unbounded(self) -> bool:
        return not self.most

    def limit(self, kind: str) -> int | None:
        """The most workers of `kind` that can run at once (None: no limit the backend can see)."""
        return self.most.get(kind)

    def ready(self, kind: str) -> int | None:
        """The most workers of `kind` that can run without a new node (None: no limit the backend can see)."""
        if kind not in self.most:
            return None
        return self.placeable.get(kind, 0)


def fit(counts: Sequence[int], kinds: Sequence[str], limits: Mapping[str, int]) -> list[int]:
    """`counts` (one per pool, its resource kind in `kinds`) cut so that each kind's sum is within its
    limit: a kind over it shares the limit in proportion to the counts (largest remainders, ties to the
    earlier pool), no pool above its count. A kind without a limit, or within it, is left as it is."""
    out = [int(c) for c in counts]
    for kind, limit in limits.items():
        idx = [i for i, k in enumerate(kinds) if k == kind]
        total = sum(out[i] for i in idx)
        if total <= limit:
            continue
        share = [out[i] * limit // total for i in idx]
        by_remainder = sorted(range(len(idx)), key=lambda j: (-(out[idx[j]] * limit % total), j))
        for j in by_remainder[: limit - sum(share)]:
            share[j] += 1
        for i, n in zip(idx, share):
            out[i] = n
    return out


def within(capacity: Capacity, bound: Mapping[str, int]) -> Capacity:
    """`capacity` with each kind of `bound` held to at most that many workers (the tenants' caps of a kind,
    farm.protocol.shares.caps_bound): the planner sizes no pool beyond what the picks could use."""
    if not bound:
        return capacity
    most, placeable = dict(capacity.most), dict(capacity.placeable)
    for kind, b in bound.items():
        most[kind] = min(most.get(kind, b), b)
        placeable[kind] = min(placeable.get(kind, 0) if kind in capacity.most else b, most[kind])
    return Capacity(placeable=placeable, most=most, node_startup_s=capacity.node_startup_s)


UNBOUNDED = Capacity()


def parse_capacity(text: str, kinds: Sequence[str]) -> Capacity:
    """A fixed-size cluster from `KIND=WORKERS[,KIND=WORKERS...]` (`farm eval --capacity gpu=2,cpu=16`):
    every kind named holds that many workers, now and at most; a kind not named is unbounded. `kinds`: the
    resource kinds there are (the caller's `farm.pipeline.RESOURCES`; the policy imports no pipeline)."""
    counts: dict[str, int] = {}
    for part in (text or "").split(","):
        kind, eq, n = (x.strip() for x in part.partition("="))
        if not eq:
            raise ValueError(f"{part.strip()!r}: expected KIND=WORKERS, e.g. gpu=2,cpu=16")
        if kind not in kinds:
            raise ValueError(f"{part.strip()!r}: the resource kind must be one of {', '.join(kinds)}")
        if kind in counts:
            raise ValueError(f"{kind!r} is named twice")
        if not (n.isascii() and n.isdigit()):
            raise ValueError(f"{part.strip()!r}: the workers of a kind must be a whole number >= 0")
        counts[kind] = int(n)
    return Capacity(placeable=counts, most=counts)
