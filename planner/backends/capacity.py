"""What a backend can place, as data: the operator's limits from the environment and the conversion of
resources (cores, GPUs, a cluster's custom resources) into workers of each resource kind. Pure, so every
backend's arithmetic is tested without an engine or a cluster; `planner.policy.capacity.Capacity` is
what comes out.

The setting, for every backend: FARM_MAX_GPUS and FARM_MAX_CPUS, the most GPUs and cores the farm's
workers may hold at once. A backend converts them with its own worker sizes (a Ray GPU worker holds one
GPU, an I/O worker a quarter of a core; a Docker I/O container half a core). On Ray they stand in for an
autoscaler's maximum the backend cannot see; on Docker and local they are the limit (local has none by
default: its workers are processes that hold no device and share the host's cores by design).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from planner.policy.capacity import Capacity

CPU, GPU = "CPU", "GPU"  # resource names as Ray spells them; the other backends use the same two
LIMIT_ENV = {GPU: "FARM_MAX_GPUS", CPU: "FARM_MAX_CPUS"}
NODE_STARTUP_ENV = "FARM_NODE_STARTUP_S"  # an autoscaler's node start-up until one has been measured
DEFAULT_NODE_STARTUP_S = 300.0  # a cloud VM booting and joining; measured start-ups replace it

# What a local worker of each kind is taken to hold, to read FARM_MAX_* in workers (Ray's defaults:
# planner.backends.ray.spec.DEFAULT_RESOURCES). A local worker reserves nothing; this only converts.
LOCAL_SIZES: Mapping[str, Mapping[str, float]] = {"cpu": {CPU: 1.0}, "gpu": {GPU: 1.0}, "io": {CPU: 0.25}}

_EPS = 1e-9  # 0.75 / 0.25 is 2.9999999999999996 in floats: a fit is counted with this much slack


def limits_from_env(environ: Mapping[str, str]) -> dict[str, float]:
    """{"GPU": n, "CPU": n} for the FARM_MAX_* set in `environ` (a number >= 0 each)."""
    out: dict[str, float] = {}
    for resource, name in LIMIT_ENV.items():
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a number >= 0 (the most {resource}s the farm's workers hold), not {raw!r}")
        out[resource] = value
    return out


def node_startup_from_env(environ: Mapping[str, str]) -> float | None:
    raw = environ.get(NODE_STARTUP_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{NODE_STARTUP_ENV} must be a number of seconds >= 0, not {raw!r}")
    return value


def fit(pool: Mapping[str, float], size: Mapping[str, float]) -> int | None:
    """How many workers of `size` fit in `pool` (None: the size holds nothing, so no number bounds it)."""
    held = {r: float(a) for r, a in size.items() if a > 0}
    if not held:
        return None
    return max(0, min(math.floor(float(pool.get(r, 0.0)) / a + _EPS) for r, a in held.items()))


def fit_nodes(nodes: Iterable[Mapping[str, float]], size: Mapping[str, float]) -> int | None:
    """Workers of `size` placeable across nodes: each worker lives on one node, so each node counts alone."""
    if fit({}, size) is None:
        return None
    return sum(fit(node, size) or 0 for node in nodes)


def within(limits: Mapping[str, float], size: Mapping[str, float]) -> int | None:
    """Workers of `size` the limits allow; only the resources the limits name count (None: none named)."""
    named = {r: a for r, a in size.items() if a > 0 and r in limits}
    return fit(limits, named) if named else None


def limited(sizes: Mapping[str, Mapping[str, float]], limits: Mapping[str, float]) -> Capacity:
    """A fixed-size backend's capacity (local, docker): per kind what the limits allow, now and at most."""
    counts = {kind: n for kind, size in sizes.items() if (n := within(limits, size)) is not None}
    return Capacity(placeable=counts, most=counts)


__all__ = ["CPU", "GPU", "DEFAULT_NODE_STARTUP_S", "LIMIT_ENV", "LOCAL_SIZES", "NODE_STARTUP_ENV", "fit",
           "fit_nodes", "limited", "limits_from_env", "node_startup_from_env", "within"]
