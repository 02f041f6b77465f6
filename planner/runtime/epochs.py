"""The daemon's wake-ups: the farm announces a decision epoch (a batch opened or completed) on its epochs
channel (`farm.protocol.keys.Keys.epochs`), so the planner decides when something changed, not by polling."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Mapping, Protocol

import redis

from farm.protocol.keys import Keys

log = logging.getLogger("farm.planner")


class Wakeup(Protocol):
    def wait(self, timeout: float) -> str | None:
        """The reason of the next epoch ("opened", "completed"), or None after `timeout` seconds."""


class RedisEpochs:
    """Epoch messages from the farm's pub/sub channel; a burst of them makes one decision."""

    COALESCE_S = 0.02  # messages this close together (a trainer opening several batches) are one epoch

    def __init__(self, client: Any, namespace: str) -> None:
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(Keys(namespace).epochs)

    def _kind(self, message: Mapping[str, Any] | None) -> str | None:
        if not message or message.get("type") != "message":
            return None
        data = message.get("data")
        try:
            kind = json.loads(data).get("kind")
        except (ValueError, TypeError, AttributeError):
            kind = None
        return str(kind) if kind else "epoch"

    def wait(self, timeout: float) -> str | None:
        """A Redis outage is a quiet wait, never an error: the daemon decides on its ticks meanwhile, and the
        next call reconnects (redis-py subscribes again); what was announced while Redis was away is lost,
        which costs a decision at most one tick."""
        try:
            return self._wait(timeout)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("epoch channel unavailable (%s); deciding on ticks until it is back", exc)
            time.sleep(max(0.0, min(timeout, 0.5)))
            return None

    def _wait(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        kind = None
        while kind is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            kind = self._kind(self.pubsub.get_message(timeout=left))
        kinds = {kind}
        while (more := self._kind(self.pubsub.get_message(timeout=self.COALESCE_S))) is not None:
            kinds.add(more)
        return "opened" if "opened" in kinds else sorted(kinds)[0]

    def close(self) -> None:
        self.pubsub.close()
