"""What a Ray cluster can place, in workers of each resource kind: the cluster's resources per node (total
and available, as the driver reads them from the GCS), the autoscaler's node groups where its config is
visible (autoscaler v2, KubeRay), and the operator's FARM_MAX_* where it is not. Pure (no `ray` import).

- placeable: the farm's own placed workers of the kind plus what fits in the nodes' available resources now
  (the other kinds' workers and other farms' actors hold the rest). A stopping worker is not counted:
  its resources come back when it leaves; nor is an actor being created on its node, which the GCS still
  calls pending (it cannot be told from one waiting for room). Both err on the safe side, for a moment.
- most: what fits once every node group runs its `max_count` nodes (capped by the config's
  `max_resources`); without a visible autoscaler, what fits in the nodes there now. FARM_MAX_GPUS /
  FARM_MAX_CPUS replace it for the kinds whose workers hold that resource, and bound `placeable` too.
  A node group without a maximum (`max_count` -1) leaves the kind unbounded (absent).
- node start-up: how long a worker that waited for a new node waited (`NodeStartups`), else
  FARM_NODE_STARTUP_S, else DEFAULT_NODE_STARTUP_S; 0 when no node is expected to join.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from planner.backends.capacity import CPU, DEFAULT_NODE_STARTUP_S, GPU, fit, fit_nodes, within
from planner.backends.ray.spec import Resources
from planner.policy.capacity import Capacity

NodeResources = Mapping[str, float]


def size_of(resources: Resources) -> dict[str, float]:
    """A worker actor's resources by Ray's names (CPU, GPU, memory, custom ones). Node labels are not
    counted: a label selector narrows the nodes further than this can see."""
    size = {CPU: resources.num_cpus, GPU: resources.num_gpus, **resources.custom}
    if resources.memory is not None:
        size["memory"] = float(resources.memory)
    return size


@dataclass(frozen=True)
class NodeGroup:
    """One of the autoscaler's node types: each node's resources and how many nodes it may run (-1: no max)."""

    resources: NodeResources
    max_count: int


@dataclass(frozen=True)
class ClusterResources:
    """The cluster as the driver's `resources` answer describes it."""

    total: Mapping[str, NodeResources] = field(default_factory=dict)  # live node id -> its resources
    available: Mapping[str, NodeResources] = field(default_factory=dict)  # live node id -> free now
    groups: tuple[NodeGroup, ...] = ()  # the autoscaler's; () where none is visible
    max_resources: NodeResources = field(default_factory=dict)  # the autoscaler's cluster-wide caps

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> "ClusterResources":
        total = {n: dict(r) for n, r in (raw.get("total") or {}).items()}
        available = {n: dict(r) for n, r in (raw.get("available") or {}).items() if n in total}  # live nodes only
        groups = tuple(NodeGroup(dict(g.get("resources") or {}), int(g.get("max_count", 0)))
                       for g in raw.get("groups") or ())
        return cls(total, available, groups, dict(raw.get("max_resources") or {}))


def _autoscaled(cluster: ClusterResources, size: Mapping[str, float]) -> int | None:
    """Workers of `size` once every node group is at its maximum (None: a group without one could hold them)."""
    n = 0
    for group in cluster.groups:
        per_node = fit(group.resources, size) or 0
        if per_node and group.max_count < 0:
            return None
        n += per_node * max(group.max_count, 0)
    cap = within(cluster.max_resources, size)
    return n if cap is None else min(n, cap)


def holds_one(cluster: ClusterResources, size: Mapping[str, float]) -> bool:
    """Whether some node there, or some node type the autoscaler may add, could hold one worker of `size`
    (however busy it is now). False only where the size exceeds every node: waiting will not place it."""
    if fit({}, size) is None:
        return True  # a worker that holds nothing fits anywhere
    nodes = [*cluster.total.values(), *(g.resources for g in cluster.groups if g.max_count != 0)]
    return any((fit(node, size) or 0) >= 1 for node in nodes)


def cluster_capacity(cluster: ClusterResources, sizes: Mapping[str, Mapping[str, float]], held: Mapping[str, int],
                     limits: Mapping[str, float], node_startup_s: float) -> Capacity:
    """Per resource kind (`sizes`: kind -> a worker's resources), the workers placeable and at most; `held`
    is the farm's own placed, not stopping workers per kind, `limits` the FARM_MAX_* ({"GPU": 8})."""
    placeable: dict[str, int] = {}
    most: dict[str, int] = {}
    grows = False
    for kind, size in sizes.items():
        free = fit_nodes(cluster.available.values(), size)
        if free is None:
            continue  # a worker that holds nothing: no number of nodes bounds it
        now = held.get(kind, 0) + free
        there = fit_nodes(cluster.total.values(), size) or 0
        top: int | None = there
        if cluster.groups:
            scaled = _autoscaled(cluster, size)
            top = None if scaled is None else max(scaled, there)
        cap = within(limits, size)
        if cap is not None:  # the operator's word replaces what the cluster shows
            top, now = cap, min(now, cap)
        if top is None:
            continue  # the autoscaler may add nodes without end: unbounded
        placeable[kind], most[kind] = now, max(top, now)
        grows = grows or most[kind] > there
    return Capacity(placeable=placeable, most=most, node_startup_s=node_startup_s if grows else 0.0)


class NodeStartups:
    """How long workers waited for a node the autoscaler added: asked for (pending, no room), then placed
    on a node that joined after they were asked for. The median of the latest `keep`; `default` until then."""

    def __init__(self, default: float = DEFAULT_NODE_STARTUP_S, keep: int = 20) -> None:
        self.default = float(default)
        self._seen: deque[float] = deque(maxlen=keep)

    def placed(self, asked_at: float, placed_at: float, node_joined_at: float | None) -> None:
        """A worker was placed; it counts when its node joined after it was asked for."""
        if node_joined_at is not None and node_joined_at > asked_at and placed_at >= asked_at:
            self._seen.append(placed_at - asked_at)

    @property
    def seconds(self) -> float:
        return statistics.median(self._seen) if self._seen else self.default


__all__ = ["ClusterResources", "NodeGroup", "NodeStartups", "cluster_capacity", "size_of"]
