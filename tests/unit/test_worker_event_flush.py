"""A worker's task events go to Flower together, once per EVENT_FLUSH_S, and what is still buffered at a
shutdown goes before the events' connection closes (workers.process.QuietConsumer)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from kombu.asynchronous import Hub

from workers.process import EVENT_FLUSH_S, QuietConsumer


@pytest.fixture
def consumer():
    """The consumer's event-flushing part, on a real event loop's timers, flushing into a list."""
    c = QuietConsumer.__new__(QuietConsumer)  # no broker connection needed for its timers
    c.hub = Hub()
    c._flush_due = False
    c.flushed = []
    c.event_dispatcher = SimpleNamespace(flush=lambda: c.flushed.append(time.monotonic()))
    yield c
    c.hub.close()


def live_timers(hub: Hub) -> list:
    return [entry for entry in hub.timer.queue if not entry.entry.canceled]


def test_events_buffered_in_one_window_arm_one_flush_a_window_later(consumer):
    armed = time.monotonic()
    for _ in range(5):
        consumer.on_send_event_buffered()
    [timer] = live_timers(consumer.hub)
    assert timer.eta - armed == pytest.approx(EVENT_FLUSH_S, abs=0.05)
    assert consumer.flushed == []


def test_the_flush_publishes_once_and_the_next_event_arms_a_new_window(consumer):
    consumer.on_send_event_buffered()
    [timer] = live_timers(consumer.hub)
    timer.entry()  # the timer fires
    assert len(consumer.flushed) == 1 and live_timers(consumer.hub) == [timer]  # not re-armed by itself
    consumer.on_send_event_buffered()
    assert len(live_timers(consumer.hub)) == 2


def test_a_shutdown_publishes_what_is_buffered_before_the_connection_closes(consumer):
    order = []
    consumer.event_dispatcher = SimpleNamespace(flush=lambda: order.append("flushed"))
    consumer.blueprint = SimpleNamespace(shutdown=lambda c: order.append("closed"))
    consumer.shutdown()
    assert order == ["flushed", "closed"]
