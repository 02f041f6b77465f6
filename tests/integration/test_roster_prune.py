"""A stage's roster sheds the workers that died unseen by any backend: when another worker of the stage announces
itself, entries silent for `roster.prune_s` go (their `leaving` marks with them); the rest stay."""

from __future__ import annotations

import time

import pytest
import redis

from farm.protocol import roster
from farm.protocol.keys import Keys, QueuePart

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]
QUEUE = "synthetic.compile"
LEASE_S = 10.0


@pytest.fixture
def farm_redis(redis_url, namespace):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client, Keys(namespace)
    client.close()


def beat_ago(r, keys: Keys, worker: str, seconds: float) -> None:
    r.hset(keys.queue(QUEUE, QueuePart.seen), worker, repr(time.time() - seconds))


def on_roster(r, keys: Keys) -> list[str]:
    return sorted(r.hkeys(keys.queue(QUEUE, QueuePart.seen)))


def test_a_worker_silent_past_the_prune_horizon_leaves_when_another_announces(farm_redis):
    r, keys = farm_redis
    beat_ago(r, keys, "died-unseen", roster.prune_s(LEASE_S) + 1)
    r.hset(keys.queue(QUEUE, QueuePart.leaving), "died-unseen", repr(time.time() - 400))
    assert roster.announce(r, keys, QUEUE, "new", time.time(), LEASE_S) == ["died-unseen"]
    assert on_roster(r, keys) == ["new"]
    assert not r.hexists(keys.queue(QUEUE, QueuePart.leaving), "died-unseen")


def test_a_worker_silent_for_less_stays_on_the_roster(farm_redis):
    r, keys = farm_redis
    beat_ago(r, keys, "stuck-a-while", roster.prune_s(LEASE_S) - 5)  # long past serving, not yet past the horizon
    beat_ago(r, keys, "beating", 1)
    assert roster.announce(r, keys, QUEUE, "new", time.time(), LEASE_S) == []
    assert on_roster(r, keys) == ["beating", "new", "stuck-a-while"]


def test_an_entry_whose_beat_does_not_parse_is_dropped(farm_redis):
    r, keys = farm_redis
    r.hset(keys.queue(QUEUE, QueuePart.seen), "garbled", "not a time")
    assert roster.announce(r, keys, QUEUE, "new", time.time(), LEASE_S) == ["garbled"]


def test_the_announcing_worker_is_never_dropped_even_after_a_long_silence(farm_redis):
    r, keys = farm_redis
    beat_ago(r, keys, "back", roster.prune_s(LEASE_S) * 3)  # the same name, announced anew (an adopted worker)
    assert roster.announce(r, keys, QUEUE, "back", time.time(), LEASE_S) == []
    assert on_roster(r, keys) == ["back"]


def test_a_dropped_worker_that_was_only_stuck_comes_back_with_its_next_beat(farm_redis):
    r, keys = farm_redis
    beat_ago(r, keys, "stuck", roster.prune_s(LEASE_S) + 1)
    roster.announce(r, keys, QUEUE, "new", time.time(), LEASE_S)
    roster.beat(r, keys, QUEUE, "stuck", time.time())
    assert on_roster(r, keys) == ["new", "stuck"]
