"""The farm's exchanges with Redis as flows without I/O, run by whichever executor holds the connection.

Each is a flow (farm.protocol.flow). `Dispatch` runs flows on redis-py; the trainer clients (farm.client) on
redis-py or redis.asyncio. So the protocol's control flow (the cached knobs, a trainer's touch, the sweep, a
batch's progress) is written once.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from farm.config import Settings
from farm.knobs import Knobs
from farm.protocol import reads
from farm.protocol.calls import sweep_call
from farm.protocol.ids import check_farm_batch
from farm.protocol.flow import Flow, Read
from farm.protocol.keys import Keys
from farm.protocol.live import Progress, parse_progress
from farm.protocol.live_knobs import LiveKnobs
from farm.protocol.scripts import lua_tokens
from farm.protocol.silence import Touched, parse_touch, touch_call


class Exchanges:
    """The flows every executor of one farm shares: the live knobs (cached), a batch's progress, a trainer's
    touch and the sweep. Times are a monotonic clock's (`clock`)."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self.lua_tokens = lua_tokens(settings)
        self.live_knobs = LiveKnobs(self.keys, clock=clock)

    def knobs(self, max_age_s: float | None = None) -> Flow[Knobs]:
        """The live knobs, read again at most once a second (or per `max_age_s`)."""
        return self.live_knobs.read(max_age_s)

    def progress(self, batch_id: str) -> Flow[Progress]:
        return parse_progress(batch_id, (yield Read(reads.progress, (self.keys, batch_id))))

    def touch(self, batch_ids: Sequence[str]) -> Flow[list[Touched]]:
        """A sign of life from the trainer of these batches (farm.protocol.silence), in one round trip."""
        ids = [check_farm_batch(b) for b in batch_ids]
        return parse_touch((yield touch_call(ids)), ids) if ids else []

    def sweep(self) -> Flow[list[str]]:
        """Give lapsed leases back and abandon the batches whose trainer went silent (the live knob
        `abandon_after_s`); one stage queue per request put back (each needs a token unless `lua_tokens`: then
        the script published them)."""
        after = (yield from self.knobs()).abandon_after()
        return list((yield sweep_call(after)))
