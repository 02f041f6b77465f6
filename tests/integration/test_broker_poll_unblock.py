"""workers.broker_poll: a connection blocked in BRPOP is found by its address and let go at once."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from workers.broker_poll import _address, unblock

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def test_a_brpop_blocked_for_ten_seconds_returns_at_once_when_unblocked(redis_url, namespace):
    waiter = redis.Redis.from_url(redis_url)
    conn = waiter.connection_pool.get_connection()
    returned: list[float] = []

    def wait() -> None:
        conn.send_command("BRPOP", f"{namespace}:nothing", 10)
        conn.read_response()
        returned.append(time.monotonic())

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    with redis.Redis.from_url(redis_url) as other:
        assert unblock(other, _address(conn))
    thread.join(timeout=5)
    assert returned and returned[0] - started < 1.0
    waiter.connection_pool.release(conn)
    waiter.close()


def test_an_address_no_client_has_unblocks_nothing(redis_url):
    with redis.Redis.from_url(redis_url) as client:
        assert not unblock(client, "127.0.0.1:1")
