"""Rolling batches decided by one Lua script on real Redis: samples fill a batch of the configured size, an
idle gap seals a partly filled one, and a sample seen before joins the batch it joined then."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from farm.app.gateway.rolling import Roller, Rolling
from farm.protocol.keys import Keys

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

ROLL = Rolling(task="t", pipeline="math", batch_size=3, rollover_s=10.0)


def run(redis_url, namespace, script):
    async def main():
        r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            return await script(r, Roller(r, namespace))
        finally:
            await r.aclose()
    return asyncio.run(main())


def test_samples_fill_a_batch_then_open_the_next(redis_url, namespace):
    async def script(r, roller):
        return [await roller.join(r, 1, "openrlhf", ROLL, f"k{i}", 100.0 + i) for i in range(4)]
    joined = run(redis_url, namespace, script)
    names = [j.batch_id for j in joined]
    assert names[0] == names[1] == names[2] != names[3]
    assert names[0].endswith("-0") and names[3].endswith("-1")
    assert all(j.seal is None for j in joined)  # a full batch needs no seal


def test_a_sample_after_an_idle_gap_seals_the_partly_filled_batch(redis_url, namespace):
    async def script(r, roller):
        first = await roller.join(r, 1, "openrlhf", ROLL, "a", 100.0)
        late = await roller.join(r, 1, "openrlhf", ROLL, "b", 111.0)
        return first, late
    first, late = run(redis_url, namespace, script)
    assert late.seal == first.batch_id and late.batch_id != first.batch_id


def test_the_idle_check_seals_a_quiet_partly_filled_batch_once(redis_url, namespace):
    async def script(r, roller):
        first = await roller.join(r, 4, "sandbox_fusion", ROLL, "a", 100.0)
        state = roller.state_key(4, "sandbox_fusion")
        early = await roller.idle(r, state, 105.0)
        due = await roller.idle(r, state, 111.0)
        again = await roller.idle(r, state, 112.0)
        after = await roller.join(r, 4, "sandbox_fusion", ROLL, "b", 113.0)
        return first, early, due, again, after
    first, early, due, again, after = run(redis_url, namespace, script)
    assert early is None and again is None
    assert due == (4, first.batch_id)
    assert after.batch_id != first.batch_id and after.seal is None


def test_a_retried_sample_joins_the_batch_it_joined_before_without_counting_twice(redis_url, namespace):
    async def script(r, roller):
        a = await roller.join(r, 1, "openrlhf", ROLL, "same", 100.0)
        again = await roller.join(r, 1, "openrlhf", ROLL, "same", 101.0)
        others = [await roller.join(r, 1, "openrlhf", ROLL, f"o{i}", 102.0) for i in range(2)]
        return a, again, others
    a, again, others = run(redis_url, namespace, script)
    assert (again.batch_id, again.request_id, again.seen) == (a.batch_id, a.request_id, True)
    assert [o.batch_id for o in others] == [a.batch_id, a.batch_id]  # the retry took no place of its own


def test_tenants_and_protocols_roll_apart(redis_url, namespace):
    async def script(r, roller):
        return [await roller.join(r, t, p, ROLL, "k", 100.0) for t, p in ((1, "openrlhf"), (2, "openrlhf"),
                                                                           (1, "sandbox_fusion"))]
    joined = run(redis_url, namespace, script)
    assert joined[0].batch_id.startswith("openrlhf-") and joined[2].batch_id.startswith("sandbox_fusion-")
    assert all(j.seal is None for j in joined)


def test_a_sample_whose_result_is_stale_joins_afresh_as_a_rerun_and_concurrent_retries_find_it(redis_url, namespace):
    async def script(r, roller):
        first = await roller.join(r, 1, "openrlhf", ROLL, "k" * 40, 100.0)
        seen = await roller.join(r, 1, "openrlhf", ROLL, "k" * 40, 101.0)
        rerun = await roller.join(r, 1, "openrlhf", ROLL, "k" * 40, 102.0, stale=seen)
        racing = await roller.join(r, 1, "openrlhf", ROLL, "k" * 40, 103.0, stale=seen)
        return first, seen, rerun, racing
    first, seen, rerun, racing = run(redis_url, namespace, script)
    assert not first.seen and seen.seen and seen.request_id == first.request_id == "k" * 32
    assert rerun.request_id == "k" * 32 + "-r1" and not rerun.seen and rerun.batch_id == first.batch_id
    assert racing.seen and racing.request_id == rerun.request_id  # the rerun is made once


def test_a_batch_that_ended_without_its_samples_is_rolled_past_once(redis_url, namespace):
    async def script(r, roller):
        first = await roller.join(r, 1, "openrlhf", ROLL, "a", 100.0)
        moved = [await roller.roll_past(r, 1, "openrlhf", first) for _ in range(2)]
        after = await roller.join(r, 1, "openrlhf", ROLL, "b", 101.0)
        return first, moved, after
    first, moved, after = run(redis_url, namespace, script)
    assert moved == [True, False] and after.index == first.index + 1 and after.seal is None


def test_a_sample_refused_after_joining_leaves_and_the_batch_waits_for_the_rest(redis_url, namespace):
    async def script(r, roller):
        a = await roller.join(r, 1, "openrlhf", ROLL, "a", 100.0)
        b = await roller.join(r, 1, "openrlhf", ROLL, "b", 100.5)
        seal = await roller.leave(r, 1, "openrlhf", ROLL, "b", b)
        c = await roller.join(r, 1, "openrlhf", ROLL, "c", 101.0)
        d = await roller.join(r, 1, "openrlhf", ROLL, "d", 101.5)
        return a, seal, c, d, await r.exists(roller.keys.roll_sample(1, "openrlhf", "b"))
    a, seal, c, d, b_kept = run(redis_url, namespace, script)
    assert seal is None and not b_kept
    assert a.batch_id == c.batch_id == d.batch_id  # b's place went to d: three samples that arrive fill it


def test_the_last_sample_leaving_its_batch_seals_it_and_the_next_opens_another(redis_url, namespace):
    async def script(r, roller):
        a = await roller.join(r, 1, "openrlhf", ROLL, "a", 100.0)
        seal = await roller.leave(r, 1, "openrlhf", ROLL, "a", a)
        return a, seal, await roller.join(r, 1, "openrlhf", ROLL, "b", 100.5)
    a, seal, b = run(redis_url, namespace, script)
    assert seal == a.batch_id and b.batch_id != a.batch_id


def test_a_sample_refused_after_its_batch_filled_seals_that_batch(redis_url, namespace):
    async def script(r, roller):
        joined = [await roller.join(r, 1, "openrlhf", ROLL, f"k{i}", 100.0 + i) for i in range(4)]
        return joined, await roller.leave(r, 1, "openrlhf", ROLL, "k2", joined[2])
    joined, seal = run(redis_url, namespace, script)
    assert seal == joined[0].batch_id != joined[3].batch_id  # its size becomes the two that arrived


def test_a_new_sample_at_the_tenants_limit_is_refused_before_it_joins_but_a_retry_is_not(redis_url, namespace):
    from farm.errors import LimitExceeded

    async def script(r, roller):
        first = await roller.join(r, 1, "openrlhf", ROLL, "a", 100.0)
        with pytest.raises(LimitExceeded, match="limit is 0"):
            await roller.join(r, 1, "openrlhf", ROLL, "b", 100.5, most=0)
        retry = await roller.join(r, 1, "openrlhf", ROLL, "a", 101.0, most=0)
        state = await r.hget(roller.state_key(1, "openrlhf"), "count")
        return first, retry, state, await r.exists(roller.keys.roll_sample(1, "openrlhf", "b"))
    first, retry, count, b_kept = run(redis_url, namespace, script)
    assert retry.batch_id == first.batch_id and count == "1" and not b_kept


def test_a_new_sample_joins_and_is_watched_by_the_idle_check_in_one_round_trip(redis_url, namespace):
    async def script(r, roller):
        sent = []
        real = r.execute_command

        async def counted(*args, **options):
            sent.append(args[0])
            return await real(*args, **options)
        r.execute_command = counted
        await roller.join(r, 1, "openrlhf", ROLL, "a", 100.0)  # loads the script: EVALSHA fails once, then EVAL
        sent.clear()
        await roller.join(r, 1, "openrlhf", ROLL, "b", 101.0)
        return list(sent), await r.smembers(roller.keys.rolls)
    sent, watched = run(redis_url, namespace, script)
    assert sent == ["EVALSHA"]
    assert watched == {Keys(namespace).roll(1, "openrlhf")}


def test_a_retried_sample_does_not_put_back_a_state_the_idle_check_let_go(redis_url, namespace):
    async def script(r, roller):
        await roller.join(r, 1, "openrlhf", ROLL, "a", 100.0)
        await r.srem(roller.keys.rolls, roller.state_key(1, "openrlhf"))  # as roll_idle.lua does once it is sealed
        await roller.join(r, 1, "openrlhf", ROLL, "a", 200.0)  # the retry changes no state: nothing to watch
        return await r.smembers(roller.keys.rolls)
    assert run(redis_url, namespace, script) == set()
