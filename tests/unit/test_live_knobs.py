"""The one reader of the knobs' live copy: read again once the last read is `max_age_s` old, sync or async."""

from __future__ import annotations

import asyncio
import json

from farm.knobs import Knobs
from farm.protocol.live import LiveKnobs


class Copy:
    """The knobs key of a Redis, counting its reads, and a clock the test moves."""

    def __init__(self) -> None:
        self.value, self.reads, self.now = json.dumps(Knobs(delay_s=3.0).to_dict()), 0, 0.0

    def get(self, key: str) -> str:
        assert key == "ns:knobs"
        self.reads += 1
        return self.value

    async def aget(self, key: str) -> str:
        return self.get(key)


def test_the_knobs_are_read_again_only_once_the_last_read_is_max_age_old():
    copy = Copy()
    live = LiveKnobs("ns:knobs", max_age_s=1.0, clock=lambda: copy.now)
    assert live.read(copy.get).delay_s == 3.0
    copy.value, copy.now = json.dumps(Knobs(delay_s=5.0).to_dict()), 0.9
    assert live.read(copy.get).delay_s == 3.0 and copy.reads == 1
    copy.now = 1.1
    assert live.read(copy.get).delay_s == 5.0 and copy.reads == 2


def test_a_max_age_of_zero_reads_at_every_call_even_at_the_same_instant():
    copy = Copy()
    live = LiveKnobs("ns:knobs", max_age_s=1.0, clock=lambda: copy.now)
    live.read(copy.get, max_age_s=0)
    live.read(copy.get, max_age_s=0)
    assert copy.reads == 2


def test_an_async_caller_shares_the_same_rule():
    copy = Copy()
    live = LiveKnobs("ns:knobs", clock=lambda: copy.now)

    async def twice() -> list[float]:
        return [(await live.aread(copy.aget)).delay_s, (await live.aread(copy.aget)).delay_s]

    assert asyncio.run(twice()) == [3.0, 3.0] and copy.reads == 1


def test_no_copy_yet_reads_as_the_defaults():
    assert LiveKnobs("ns:knobs").read(lambda key: None) == Knobs()
