"""`farm status` on the history stream: quiet while the recorder keeps up, loud when it falls behind or the
stream's cap drops history."""

from __future__ import annotations

import io

from rich.console import Console

from farm.app.cli.status import _print_history, history_report
from farm.protocol.counters import Counters
from farm.protocol.stream import StreamHealth


def shown(length: int, cap: int = 1000, counted: Counters = Counters()) -> str:
    out = io.StringIO()
    report = history_report(StreamHealth(length, cap, 12.0, "1-0" if length else None), counted)
    _print_history(Console(file=out, width=300), report, now=100.0)
    return out.getvalue()


def test_a_recorder_that_keeps_up_is_one_quiet_line():
    assert shown(3).strip() == "history: 3 of at most 1000 events wait for the recorder (oldest 12.0 s)"


def test_a_recorder_behind_by_half_the_cap_is_a_warning():
    assert "recorder behind: 600 of at most 1000 events wait (oldest 12 s)" in shown(600)


def test_a_stream_at_its_cap_says_history_is_being_lost():
    assert "history stream AT ITS CAP (1000 of at most 1000 events): unrecorded history is being lost" in shown(1000)


def test_history_lost_before_is_said_with_when_and_which_ids():
    counted = Counters(history_overflows=2, history_lost_at=40.0, history_lost="(5-0, 9-0)")
    assert "history LOST 2 time(s), last 60.0 s ago (stream ids (5-0, 9-0))" in shown(0, counted=counted)
