"""An artificial cold start for workers (FARM_WORKER_STARTUP_DELAY_S): read strictly, off by default."""

from __future__ import annotations

import pytest

from farm.config import STARTUP_DELAY_ENV
from workers.process import WorkerArgumentError, startup_delay


def test_a_worker_starts_at_once_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv(STARTUP_DELAY_ENV, raising=False)
    assert startup_delay() == 0.0


def test_a_worker_told_to_take_its_time_waits_that_many_seconds(monkeypatch):
    monkeypatch.setenv(STARTUP_DELAY_ENV, "1.5")
    assert startup_delay() == 1.5


@pytest.mark.parametrize("raw", ["soon", "-1", "inf", "nan"])
def test_a_start_up_delay_that_is_not_seconds_stops_the_worker_saying_so(monkeypatch, raw):
    monkeypatch.setenv(STARTUP_DELAY_ENV, raw)
    with pytest.raises(WorkerArgumentError, match=STARTUP_DELAY_ENV):
        startup_delay()
