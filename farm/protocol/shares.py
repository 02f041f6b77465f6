"""Fair shares of the pools between tenants: what a tenant is given, and the rule that divides a stage's workers.

A tenant has a share (a weight, 1 by default) and optionally a cap of the farm's workers per resource kind.
When a stage's workers cannot serve every waiting request at once, a free worker serves a tenant that holds
fewer of the stage's workers than its share entitles it to: the stage's workers times its share over the
shares of the tenants with work waiting there. Among those tenants, EBF (or FCFS) picks as ever, so with
one tenant waiting, or workers to spare, nothing changes. A tenant at its cap of a kind is not served by a
worker of that kind until one of its requests there ends.

`pick.lua` applies the rule in Redis, `eligible` here in the replay (`planner.eval.state`); a contract test
runs both over generated cases. A reserved share also preempts: `preempted` here, `preempt.lua` in Redis. The
operator's settings (kept with the tenant, `farm.store.tenants`) are published to the hash `Keys.shares` (tenant
label -> `FairShare.encode()`), which the pick reads. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from farm.pipeline import RESOURCES

MAX_SHARE = 1_000_000.0  # beyond it the ratios of two shares lose meaning in a double


class ShareError(ValueError):
    """A fair share that cannot be set; the message says why."""


@dataclass(frozen=True)
class FairShare:
    share: float = 1.0  # the tenant's weight against the others with work waiting at a stage
    max_workers: Mapping[str, int] = field(default_factory=dict)  # resource kind -> most workers at once
    # the share is held for the tenant while it has an open batch, even when nothing of it waits: workers idle
    # rather than serve others beyond their shares, and running requests of tenants over their shares are stopped
    # for it (`preempted`; a guarantee, paid in idle workers and stopped work; off by default)
    reserve: bool = False

    def __post_init__(self) -> None:
        s = self.share
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not (0 < s <= MAX_SHARE) or not math.isfinite(s):
            raise ShareError(f"share must be a number > 0 and <= {MAX_SHARE:g}, not {s!r:.100}")
        if not isinstance(self.max_workers, Mapping):
            raise ShareError(f"max_workers must map a resource kind to a number, not {self.max_workers!r:.100}")
        for kind, n in self.max_workers.items():
            if kind not in RESOURCES:
                raise ShareError(f"max_workers: unknown resource kind {kind!r:.40}; known: {', '.join(RESOURCES)}")
            # a cap of 0 would leave the tenant's requests waiting for ever, with no message saying why
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ShareError(f"max_workers {kind}: must be a whole number >= 1, not {n!r:.100}")
        if not isinstance(self.reserve, bool):
            raise ShareError(f"reserve must be true or false, not {self.reserve!r:.100}")
        object.__setattr__(self, "share", float(s))
        object.__setattr__(self, "max_workers", MappingProxyType(dict(sorted(self.max_workers.items()))))

    def cap(self, kind: str) -> int | None:
        return self.max_workers.get(kind)

    def to_dict(self) -> dict[str, Any]:
        return {"share": self.share, "max_workers": dict(self.max_workers), "reserve": self.reserve}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "FairShare":
        """From JSON; missing keys take their defaults, an unknown one is refused (a typo is no setting)."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ShareError(f"a fair share must be an object, not {data!r:.100}")
        unknown = set(data) - {"share", "max_workers", "reserve"}
        if unknown:
            raise ShareError(f"unknown fair-share settings {sorted(unknown)}; known: ['max_workers', 'reserve', 'share']")
        return cls(data.get("share", 1.0), dict(data.get("max_workers") or {}), data.get("reserve", False))

    def encode(self) -> str:
        """What `Keys.shares` holds for the tenant (pick.lua's `share_of` reads `w`, `cap` and `r`)."""
        return json.dumps({"w": self.share, "cap": dict(self.max_workers), **({"r": True} if self.reserve else {})},
                          separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str | bytes | None) -> "FairShare":
        if raw is None:
            return cls()
        data = json.loads(raw)
        return cls(data.get("w", 1.0), data.get("cap") or {}, data.get("r") is True)


DEFAULT = FairShare()


def parse_max_workers(items: Iterable[str]) -> dict[str, int]:
    """`KIND=N` pairs (the CLI's `--max-workers gpu=4`) as a mapping; ShareError for a malformed one."""
    out: dict[str, int] = {}
    for item in items:
        kind, sep, n = item.partition("=")
        if not sep or not n.strip().isdigit():
            raise ShareError(f"--max-workers takes KIND=N (N a whole number), not {item!r:.100}")
        out[kind.strip()] = int(n)
    FairShare(max_workers=out)  # the checks, with their messages
    return out


def parse_shares(weights: Iterable[str], caps: Iterable[str], reserves: Iterable[str] = ()) -> dict[str, FairShare]:
    """Named tenants' fair shares from `TENANT=W` and `TENANT:KIND=N` items and reserving tenants' names (`farm eval
    --share --tenant-max-workers --reserve`, `bench/fidelity.py`'s), by name; ShareError naming the option for a
    malformed one. A tenant named only as reserving has the default weight and no cap."""
    shares: dict[str, float] = {}
    limits: dict[str, list[str]] = {}
    for item in weights:
        name, sep, w = item.partition("=")
        try:
            weight = float(w) if sep and name else math.nan
        except ValueError:
            weight = math.nan
        if math.isnan(weight):
            raise ShareError(f"--share: expected TENANT=WEIGHT, not {item!r:.100}")
        shares[name] = weight
    for item in caps:
        name, sep, cap = item.partition(":")
        if not (sep and name):
            raise ShareError(f"--tenant-max-workers: expected TENANT:KIND=N, not {item!r:.100}")
        limits.setdefault(name, []).append(cap)
    reserving = set(reserves)
    return {name: FairShare(shares.get(name, 1.0), parse_max_workers(limits.get(name, ())), name in reserving)
            for name in sorted(set(shares) | set(limits) | reserving)}


def entitled(workers: int, share: float, waiting_shares: float) -> float:
    """The workers of a stage a tenant with work waiting there is entitled to."""
    return workers * share / waiting_shares


def _uncapped(t: str, shares: Mapping[str, FairShare], kind_use: Mapping[str, int], kind: str) -> bool:
    c = shares.get(t, DEFAULT).cap(kind)
    return c is None or kind_use.get(t, 0) < c


def eligible(waiting: Iterable[str], shares: Mapping[str, FairShare], use: Mapping[str, int],
             kind_use: Mapping[str, int], workers: int, kind: str, reserving: Iterable[str] = ()) -> list[str]:
    """The tenants (labels) of `waiting` a free worker of the stage may serve now, in `waiting`'s order.

    `use`: each tenant's busy workers at this stage; `kind_use`: at every stage of the stage's `kind`;
    `workers`: the stage's workers, the free one included; `reserving`: the tenants whose share is reserved
    (`FairShare.reserve`) with an open batch that visits the stage, waiting here or not. A tenant at its cap of
    the kind is out. Of the others, those under their entitlement. When none is, the worker is held for a
    reserving tenant under its own (none served); else those furthest below their entitlement (least use per
    share, one worker for two tenants), so without reservations the rule is work-conserving.
    """
    waiting = list(dict.fromkeys(waiting))
    held_for = [t for t in dict.fromkeys(reserving) if t not in waiting]
    open_ = [t for t in waiting if _uncapped(t, shares, kind_use, kind)]
    if not open_:
        return []
    # the capped ones still count: their share stays theirs
    total = sum(shares.get(t, DEFAULT).share for t in waiting + held_for)
    under = [t for t in open_ if use.get(t, 0) < entitled(workers, shares.get(t, DEFAULT).share, total)]
    if under:
        return under
    if any(_uncapped(t, shares, kind_use, kind) and use.get(t, 0) < entitled(workers, shares.get(t, DEFAULT).share,
                                                                             total) for t in held_for):
        return []
    least = min(use.get(t, 0) / shares.get(t, DEFAULT).share for t in open_)
    return [t for t in open_ if use.get(t, 0) / shares.get(t, DEFAULT).share == least]


def preempted(waiting: Mapping[str, int], shares: Mapping[str, FairShare], use: Mapping[str, int],
              kind_use: Mapping[str, int], workers: int, kind: str, reserving: Iterable[str] = ()) -> list[str]:
    """The tenants whose running requests at the stage are stopped now and put back, one entry per request, so
    that a reserving tenant (`FairShare.reserve`) with work waiting is served at once rather than after the
    running requests end: its reservation holds even when the others took every worker before it came.

    `waiting`: tenant -> its requests waiting at the stage, most urgent tenant first; `use`, `kind_use`,
    `workers` and `reserving` as for `eligible` (`workers` counts the free ones, which serve first: a request
    a free worker will take stops nothing). Shares divide the workers between the tenants waiting, running or
    reserving here. A reserving tenant under its entitlement, and under its cap, takes a worker from the tenant
    most over its share (the first of them in label order), and only from one that stays at or above its own
    entitlement, so no stop is ever answered by a stop back.
    """
    use, kind_use = dict(use), dict(kind_use)
    want = {t: n for t, n in waiting.items() if n > 0}
    present = list(dict.fromkeys([*want, *(t for t, n in use.items() if n > 0), *reserving]))
    total = sum(shares.get(t, DEFAULT).share for t in present)
    free = workers - sum(use.values())
    out: list[str] = []

    def entitled_(t: str) -> float:
        return entitled(workers, shares.get(t, DEFAULT).share, total)

    while True:
        under = [t for t in want if want[t] > 0 and shares.get(t, DEFAULT).reserve
                 and _uncapped(t, shares, kind_use, kind) and use.get(t, 0) < entitled_(t)]
        if not under:
            return out
        # the one furthest below its share first; equal ones in `waiting`'s (urgency) order
        u = min(under, key=lambda t: use.get(t, 0) / shares.get(t, DEFAULT).share)
        if free > 0:
            free -= 1
        else:
            over = sorted(t for t in use if t != u and use[t] >= 1 and use[t] - 1 >= entitled_(t))
            if not over:
                return out
            v = max(over, key=lambda t: use[t] / shares.get(t, DEFAULT).share)  # max keeps the first of equals
            use[v] -= 1
            kind_use[v] = kind_use.get(v, 0) - 1
            out.append(v)
        use[u] = use.get(u, 0) + 1
        kind_use[u] = kind_use.get(u, 0) + 1
        want[u] -= 1


def caps_bound(active: Iterable[str], shares: Mapping[str, FairShare]) -> dict[str, int]:
    """Workers per kind the planner need never ask for more than: a kind every tenant with open batches caps is
    bound by the sum of their caps, as no pick could use more (`planner.policy.capacity.Capacity.within`).
    Kinds some tenant with open batches does not cap are absent (unbound)."""
    tenants = list(dict.fromkeys(active))
    out: dict[str, int] = {}
    if not tenants:
        return out
    for kind in RESOURCES:
        caps = [shares.get(t, DEFAULT).cap(kind) for t in tenants]
        if all(c is not None for c in caps):
            out[kind] = sum(caps)  # type: ignore[arg-type]
    return out
