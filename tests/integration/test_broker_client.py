"""kombu's Redis channel keeps one redis-py client for its commands (farm.broker_client): building one per
command cost about a millisecond of CPU each (three per request in a worker's main process)."""

from __future__ import annotations

import pytest
import redis

from farm.celery_app import make_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def channel(settings):
    with make_app(settings).connection_for_write() as conn:
        yield conn.default_channel


def test_every_command_of_a_channel_goes_through_one_client(channel):
    with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
        assert first is second
    assert first.connection_pool is channel.pool


def test_a_channel_whose_pool_was_replaced_gets_a_client_of_the_new_pool(channel):
    with channel.conn_or_acquire() as before:
        pass
    channel._pool = None  # as kombu's channel does when it closes its connections
    with channel.conn_or_acquire() as after:
        assert after is not before and after.connection_pool is channel.pool


def test_the_poll_keeps_its_own_asynchronous_client(channel):
    with channel.conn_or_acquire() as commands:
        assert channel.client is not commands
        assert channel.client.connection_pool is channel.async_pool


def test_a_message_published_through_the_shared_client_reaches_its_queue(channel, settings, redis_url):
    queue = f"{settings.namespace}.broker-client"
    channel.queue_declare(queue)
    for n in range(3):
        channel.basic_publish(channel.prepare_message(f"m{n}"), exchange="", routing_key=queue)
    r = redis.Redis.from_url(redis_url)
    try:
        assert r.llen(queue) == 3
    finally:
        r.delete(queue)
        r.close()
