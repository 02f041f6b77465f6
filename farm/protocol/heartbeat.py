"""The planner daemon's heartbeat: after every decision epoch the daemon says it is alive, and what `farm
status`, `farm replay` and the metrics show of it: its backend, the pools it sizes (by state, and where
they run), what its last decisions asked for, the worker start-ups it plans with, the cluster's capacity
its backend reports, and the stages that capacity holds below what they want.

One JSON value per namespace (`<namespace>:planner`) that expires after three ticks, so a daemon that died
is no longer seen within them. The daemon writes it (planner.runtime.service); the readers read it here,
without loading any planner code.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from farm.protocol.keys import Keys


def heartbeat_key(namespace: str) -> str:
    return Keys(namespace).planner


@dataclass(frozen=True)
class Startup:
    """How long a stage's recent workers took from placement to ready (the daemon reads it from their lives)."""

    count: int
    median_s: float
    plan_s: float  # the quantile the policy plans with
    max_s: float


@dataclass(frozen=True)
class Pool:
    """A stage's workers on the daemon's backend, by state, and per node the alive placed ones."""

    pending: int = 0  # waiting for a machine with room: asked for, not allocated
    starting: int = 0
    running: int = 0
    stopping: int = 0
    nodes: Mapping[str, int] = field(default_factory=dict)  # "" nowhere: a backend that does not say


@dataclass(frozen=True)
class KindCapacity:
    """Workers of one resource kind the backend can run now (`placeable`) and at most (an autoscaler's maximum)."""

    placeable: int
    most: int


@dataclass(frozen=True)
class Bound:
    """A stage the capacity holds below what it wants (the policy's `planner.policy.snapshot.Binding`):
    the workers it wants and those it gets, and the extra delay C - T the planner now expects of its
    pipeline's active batches (mean, max; None where the policy does not simulate) against D (`delay_s`)."""

    resource: str
    wanted: int
    held: int
    delay_mean_s: float | None = None
    delay_max_s: float | None = None
    delay_s: float = 0.0

    @property
    def short(self) -> int:
        return self.wanted - self.held


@dataclass(frozen=True)
class Heartbeat:
    """What a running daemon last said of itself."""

    pid: int
    at: float  # epoch seconds of the epoch it closed
    backend: str
    decisions: int = 0  # made at that epoch
    startup_s: float = 0.0  # the start-up it plans with where its workers' lives show none longer
    startups: Mapping[str, Startup] = field(default_factory=dict)  # stage queue -> seen (too few: absent)
    pools: Mapping[str, Pool] = field(default_factory=dict)  # stage queue -> its pool
    targets: Mapping[str, int] = field(default_factory=dict)  # stage queue -> the pool last asked for
    capacity: Mapping[str, KindCapacity] = field(default_factory=dict)  # kind -> the backend's (absent: unbounded)
    node_startup_s: float = 0.0  # an autoscaler's node start-up the planner plans with (0: none expected)
    bound: Mapping[str, Bound] = field(default_factory=dict)  # stage queue -> held below its want, by its last decision

    def to_dict(self) -> dict[str, Any]:
        """As plain data, the nesting included (what `farm status --json` prints)."""
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, raw: str | bytes) -> "Heartbeat":
        data = json.loads(raw)
        return cls(**{**_known(cls, data),
                      "startups": {q: Startup(**_known(Startup, s)) for q, s in (data.get("startups") or {}).items()},
                      "pools": {q: Pool(**_known(Pool, p)) for q, p in (data.get("pools") or {}).items()},
                      "targets": dict(data.get("targets") or {}),
                      "capacity": {k: KindCapacity(**_known(KindCapacity, c)) for k, c in (data.get("capacity") or {}).items()},
                      "bound": {q: Bound(**_known(Bound, b)) for q, b in (data.get("bound") or {}).items()}})


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields this version knows: a newer daemon's additions do not break an older reader."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def beat(redis: Any, namespace: str, heartbeat: Heartbeat, ttl_s: float) -> None:
    """Say the daemon is alive for `ttl_s`."""
    redis.set(heartbeat_key(namespace), heartbeat.to_json(), px=int(ttl_s * 1000))


def read(redis: Any, namespace: str) -> Heartbeat | None:
    """The heartbeat of the daemon serving this namespace, or None when none runs."""
    raw = redis.get(heartbeat_key(namespace))
    return Heartbeat.from_json(raw) if raw else None


def clear(redis: Any, namespace: str, pid: int) -> None:
    """A stopping daemon says so at once, rather than after three ticks; a heartbeat another daemon wrote
    since is left alone."""
    current = read(redis, namespace)
    if current is not None and current.pid == pid:
        redis.delete(heartbeat_key(namespace))
