"""An idle worker's event loop: its broker poll and kombu's timers let it sleep for seconds, not wake every second."""

from __future__ import annotations

import time

import pytest
from kombu.asynchronous import Hub

from farm.celery_app import (
    BRPOP_TIMEOUT_S,
    BRPOP_UNIX_TIMEOUT_S,
    brpop_timeout,
    make_app,
)
from workers.broker_poll import slow_binding_refresh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture
def loop(settings):
    """A hub with the worker's broker connection registered on it, as Celery's event loop has."""
    app = make_app(settings)
    hub = Hub()
    connection = app.connection_for_read()
    connection.default_channel  # noqa: B018  (connects: the transport's poller exists once a channel does)
    connection.transport.register_with_event_loop(connection.connection, hub)
    yield hub, connection
    hub.close()
    connection.release()


def first_timer_in(hub: Hub) -> float:
    """Seconds until the hub's first live timer is due (kombu's timers run on the monotonic clock)."""
    return min(s.eta for s in hub.timer.queue if not s.entry.canceled) - time.monotonic()


def test_with_the_binding_check_slowed_no_timer_of_the_broker_wakes_the_loop_within_ten_seconds(loop):
    hub, connection = loop
    assert slow_binding_refresh(hub, connection)
    assert first_timer_in(hub) > 9.5


def test_the_broker_poll_over_tcp_blocks_for_the_long_timeout():
    assert brpop_timeout("redis://127.0.0.1:6379/0") == BRPOP_TIMEOUT_S > BRPOP_UNIX_TIMEOUT_S


def test_the_broker_poll_over_a_unix_socket_stays_short_as_no_shutdown_can_cut_it():
    assert brpop_timeout("redis+socket:///run/redis.sock?virtual_host=0") == BRPOP_UNIX_TIMEOUT_S
