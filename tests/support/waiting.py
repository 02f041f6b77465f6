"""Polling for something that happens eventually (workers starting, leaving), with a clear failure."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest

PATIENCE_S = 60.0  # generous: two cores shared by every test of the machine; a pass takes seconds


def eventually(check: Callable[[], Any], timeout: float = PATIENCE_S, interval: float = 0.1, what: str = "condition"):
    """The check's first truthy value, polled; fails the test with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"{what} did not happen within {timeout:g} s (last: {value!r})")
        time.sleep(interval)
