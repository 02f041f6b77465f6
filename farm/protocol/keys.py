"""Every Redis key and channel of one farm namespace, how times travel to the Lua scripts, and how text comes
back from Redis."""

from __future__ import annotations

from farm import events
from farm.knobs import redis_key


def stamp(t: float) -> str:
    """A time as the exact decimal Lua passes through into JSON and scores."""
    return repr(float(t))


def text(value) -> str:
    """A Redis reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


class Keys:
    """Every Redis key and channel of one farm namespace."""

    def __init__(self, namespace: str) -> None:
        self.ns = namespace
        self.batches = f"{namespace}:batches"
        self.seen = f"{namespace}:seen"  # open batches by their trainer's last sign of life (farm.protocol.silence)
        self.queues = f"{namespace}:queues"
        self.leases = f"{namespace}:leases"
        self.events = events.stream_key(namespace)
        self.epochs = f"{namespace}:epochs"
        self.knobs = redis_key(namespace)
        self.counters = f"{namespace}:counters"  # farm.protocol.counters

    def batch(self, batch_id: str, part: str = "") -> str:
        return f"{self.ns}:b:{batch_id}{part}"

    def queue(self, queue: str, what: str) -> str:
        return f"{self.ns}:q:{queue}:{what}"
