"""Which of Celery's per-task log lines a worker keeps at each log level."""

from __future__ import annotations

import logging

import pytest
from celery.app import trace

from workers.process import WithoutSuccessLines, quiet_task_lines

STRATEGY = logging.getLogger("celery.worker.strategy")
TRACE = logging.getLogger(trace.__name__)


@pytest.fixture(autouse=True)
def restored():
    level, filters = STRATEGY.level, list(TRACE.filters)
    yield
    STRATEGY.setLevel(level)
    TRACE.filters[:] = filters


def record(msg: str, level: int = logging.INFO) -> logging.LogRecord:
    return TRACE.makeRecord(TRACE.name, level, __file__, 1, msg, ({"name": "t", "id": "1"},), None)


def test_at_info_the_received_line_is_not_written():
    quiet_task_lines(logging.INFO)

    assert not STRATEGY.isEnabledFor(logging.INFO) and STRATEGY.isEnabledFor(logging.WARNING)


def test_at_info_a_success_line_is_dropped_and_a_retry_or_failure_kept():
    quiet_task_lines(logging.INFO)

    assert not TRACE.filter(record(trace.LOG_SUCCESS))
    assert TRACE.filter(record(trace.LOG_RETRY)) and TRACE.filter(record(trace.LOG_FAILURE, logging.ERROR))


def test_at_debug_every_line_is_kept():
    STRATEGY.setLevel(logging.NOTSET)
    quiet_task_lines(logging.DEBUG)

    assert STRATEGY.level == logging.NOTSET and TRACE.filter(record(trace.LOG_SUCCESS))


def test_asked_twice_the_filter_is_added_once():
    quiet_task_lines(logging.INFO)
    quiet_task_lines(logging.INFO)

    assert sum(isinstance(f, WithoutSuccessLines) for f in TRACE.filters) == 1
