"""Flower run as farm.app.quiet_flower captures the workers' events without waking every second."""

from __future__ import annotations

import sys

import flower.events

from farm.app import quiet_flower


def test_its_event_receiver_drains_a_minute_at_a_time_not_kombus_second(monkeypatch):
    drains = []
    receiver = quiet_flower.QuietReceiver.__new__(quiet_flower.QuietReceiver)  # no connection needed to capture
    monkeypatch.setattr(receiver, "consume", lambda **kwargs: drains.append(kwargs) or iter(()), raising=False)
    receiver.capture(limit=None, timeout=None, wakeup=True)
    assert drains == [{"limit": None, "timeout": None, "wakeup": True,
                       "safety_interval": quiet_flower.SAFETY_INTERVAL_S}] and quiet_flower.SAFETY_INTERVAL_S >= 10


def test_flower_captures_with_it_once_started_through_it(monkeypatch):
    import celery.__main__

    monkeypatch.setattr(flower.events, "EventReceiver", flower.events.EventReceiver)  # restored afterwards
    monkeypatch.setattr(celery.__main__, "main", lambda: None)
    monkeypatch.setattr(sys, "argv", ["quiet_flower.py", "--broker", "redis://", "flower"])
    quiet_flower.main()
    assert flower.events.EventReceiver is quiet_flower.QuietReceiver
