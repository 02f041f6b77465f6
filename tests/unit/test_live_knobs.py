"""The one reader of the knobs' live copy: read again once the last read is `max_age_s` old, whoever runs it."""

from __future__ import annotations

import asyncio
import json

from farm.knobs import Knobs
from farm.protocol.flow import Steps, run
from farm.protocol.keys import Keys
from farm.protocol.live_knobs import LiveKnobs, knobs_now

KEYS = Keys("ns")


class Copy:
    """A Redis with the knobs key, counting its reads, and a clock the test moves."""

    def __init__(self) -> None:
        self.value, self.reads, self.now = json.dumps(Knobs(delay_s=3.0).to_dict()), 0, 0.0

    def get(self, key: str) -> str | None:
        assert key == "ns:knobs"
        self.reads += 1
        return self.value


def read(live: LiveKnobs, copy: Copy, max_age_s: float | None = None) -> Knobs:
    return run(Steps(live.read(max_age_s)), lambda op: op.on(copy))


def test_the_knobs_are_read_again_only_once_the_last_read_is_max_age_old():
    copy = Copy()
    live = LiveKnobs(KEYS, max_age_s=1.0, clock=lambda: copy.now)
    assert read(live, copy).delay_s == 3.0
    copy.value, copy.now = json.dumps(Knobs(delay_s=5.0).to_dict()), 0.9
    assert read(live, copy).delay_s == 3.0 and copy.reads == 1
    copy.now = 1.1
    assert read(live, copy).delay_s == 5.0 and copy.reads == 2


def test_a_max_age_of_zero_reads_at_every_call_even_at_the_same_instant():
    copy = Copy()
    live = LiveKnobs(KEYS, max_age_s=1.0, clock=lambda: copy.now)
    read(live, copy, max_age_s=0)
    read(live, copy, max_age_s=0)
    assert copy.reads == 2


def test_an_async_executor_runs_the_same_reader():
    copy = Copy()
    live = LiveKnobs(KEYS, clock=lambda: copy.now)

    class AsyncCopy:
        async def get(self, key: str) -> str | None:
            return copy.get(key)

    async def once() -> Knobs:
        steps = Steps(live.read())
        while not steps.done:
            steps.give(await steps.op.on(AsyncCopy()))
        return steps.value

    async def twice() -> list[float]:
        return [(await once()).delay_s, (await once()).delay_s]

    assert asyncio.run(twice()) == [3.0, 3.0] and copy.reads == 1


def test_no_copy_yet_reads_as_the_defaults():
    copy = Copy()
    copy.value = None
    assert knobs_now(copy, KEYS) == Knobs()
