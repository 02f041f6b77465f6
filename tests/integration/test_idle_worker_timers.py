"""An idle worker's event loop: its broker poll, kombu's timers and its pool's upkeep let it sleep for seconds, not wake
every second; a pool process that dies is still replaced at once."""

from __future__ import annotations

import os
import signal
import time

import farm_test_pipelines  # noqa: F401  (registers the `faulty` pipeline in this process too)
import pytest
from kombu.asynchronous import Hub

from farm.celery_app import (
    BRPOP_TIMEOUT_S,
    BRPOP_UNIX_TIMEOUT_S,
    brpop_timeout,
    make_app,
)
from workers.broker_poll import slow_binding_refresh
from workers.process import MAINTAIN_POOL_S, QuietAsynPool

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


def test_the_broker_poll_over_tcp_outlasts_the_workers_ten_second_heartbeat():
    assert BRPOP_TIMEOUT_S >= 30


def test_the_broker_poll_over_a_unix_socket_stays_short_as_no_shutdown_can_cut_it():
    assert brpop_timeout("redis+socket:///run/redis.sock?virtual_host=0") == BRPOP_UNIX_TIMEOUT_S


def test_the_pool_is_looked_over_only_every_thirty_seconds():
    pool = QuietAsynPool.__new__(QuietAsynPool)  # its timers, without starting a process
    assert list(pool.timers.values()) == [MAINTAIN_POOL_S] and MAINTAIN_POOL_S >= 30


def pool_process_of(worker_pid: int) -> int | None:
    with open(f"/proc/{worker_pid}/task/{worker_pid}/children") as f:
        children = [int(pid) for pid in f.read().split()]
    return children[0] if len(children) == 1 else None


def test_a_pool_process_that_dies_is_replaced_at_once_not_at_the_slow_timer_and_serves(start_workers, reward_client):
    [w] = start_workers("faulty.step", imports=("farm_test_pipelines",))
    first = pool_process_of(w.pid)
    os.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    while pool_process_of(w.pid) in (None, first):
        assert time.monotonic() - killed < 2.5  # well within Celery's own 5 s timer, let alone ours
        time.sleep(0.05)
    batch = reward_client.open_batch("t", "faulty", 1)
    batch.submit("r0", {"do": "ok"})
    [result] = batch.gather(timeout=20)
    assert result.ok
