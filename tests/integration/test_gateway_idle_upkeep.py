"""An idle gateway's upkeep sleeps until there is something to watch: a sample joining a rolling batch or a call
waiting wakes it, and while a call waits it goes round every `roll_check_s` as before."""

from __future__ import annotations

import asyncio

import pytest

from farm.app.gateway.auth import Directory
from farm.app.gateway.config import GatewaySettings
from farm.app.gateway.service import Gateway
from farm.client.aio import AsyncRewardClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]
CHECK_S = 0.05


def rounds_of(settings, during):
    """How many upkeep rounds ran while `during(gateway)` ran (each round looks for idle rolling batches)."""
    async def main():
        gateway = Gateway(AsyncRewardClient(settings), Directory(lambda token: None),
                          GatewaySettings(roll_check_s=CHECK_S))
        rounds = []
        looked = gateway._seal_idle

        async def counted():
            rounds.append(asyncio.get_running_loop().time())
            return await looked()
        gateway._seal_idle = counted
        upkeep = asyncio.create_task(gateway.upkeep())
        try:
            await asyncio.sleep(0.2)  # its first round, then quiet
            rounds.clear()
            await during(gateway)
            return len(rounds)
        finally:
            upkeep.cancel()
            await asyncio.gather(upkeep, return_exceptions=True)
            await gateway.close()
    return asyncio.run(main())


def test_an_idle_gateways_upkeep_does_not_go_round_every_roll_check(settings):
    async def idle(gateway):
        await asyncio.sleep(20 * CHECK_S)
    assert rounds_of(settings, idle) == 0


def test_a_sample_joining_wakes_the_upkeep_at_once(settings):
    async def joined(gateway):
        gateway.stir()  # what a sample's joining a rolling batch does
        await asyncio.sleep(CHECK_S / 2)
    assert rounds_of(settings, joined) == 1


def test_while_a_call_waits_the_upkeep_goes_round_every_roll_check(settings):
    async def waiting(gateway):
        wait = asyncio.create_task(gateway.revocations.guard(1, asyncio.sleep(20 * CHECK_S)))
        await wait
    assert rounds_of(settings, waiting) >= 10


def test_a_rolling_batch_sealed_for_idleness_leaves_the_states_to_watch_until_the_next_sample_joins(settings):
    import redis.asyncio as aioredis

    from farm.app.gateway.rolling import Roller, Rolling

    async def main():
        r = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
        roller, rolling = Roller(r, settings.namespace), Rolling("t", "math", 8, 0.0)
        try:
            await roller.join(r, 1, "openrlhf", rolling, "a" * 64, now=100.0)
            watched = await roller.states(r)
            sealed = await roller.idle(r, roller.state_key(1, "openrlhf"), now=101.0)
            after_seal = await roller.states(r)
            await roller.join(r, 1, "openrlhf", rolling, "b" * 64, now=102.0)
            return watched, sealed, after_seal, await roller.states(r)
        finally:
            await r.aclose()
    watched, sealed, after_seal, rejoined = asyncio.run(main())
    state = f"{settings.namespace}:gw:roll:t1:openrlhf"
    assert watched == {state} and sealed is not None and after_seal == set() and rejoined == {state}


def test_a_rolling_batch_still_within_its_rollover_stays_watched(settings):
    import redis.asyncio as aioredis

    from farm.app.gateway.rolling import Roller, Rolling

    async def main():
        r = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
        roller = Roller(r, settings.namespace)
        try:
            await roller.join(r, 1, "openrlhf", Rolling("t", "math", 8, 30.0), "a" * 64, now=100.0)
            sealed = await roller.idle(r, roller.state_key(1, "openrlhf"), now=101.0)
            return sealed, await roller.states(r)
        finally:
            await r.aclose()
    sealed, watched = asyncio.run(main())
    assert sealed is None and watched == {f"{settings.namespace}:gw:roll:t1:openrlhf"}
