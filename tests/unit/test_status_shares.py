"""How `farm status` shows each tenant's fair share: its share, its busy workers against its caps, and how late
its active batches run."""

from __future__ import annotations

import io

from rich.console import Console

from farm.app.cli.status import _print_shares, busy_cell, status_report
from farm.knobs import Knobs
from farm.protocol.live import LiveState, Progress, QueueState, RunningRequest
from farm.protocol.shares import FairShare

NOW = 1000.0


def shown(report: dict) -> str:
    out = io.StringIO()
    _print_shares(Console(file=out, width=200), report)
    return out.getvalue()


def test_busy_workers_are_shown_against_a_cap_and_a_tenant_at_its_cap_is_marked():
    assert busy_cell({"cpu": 3, "gpu": 4}, {"gpu": 4}) == "cpu 3, gpu 4 of 4 [bold yellow]AT CAP[/]"
    assert busy_cell({}, {"io": 2}) == "io 0 of 2"
    assert busy_cell({}, {}) == "-"


def test_the_report_reads_each_stages_kind_and_the_table_shows_share_busy_and_lateness():
    running = (RunningRequest("r0", "t1:a", NOW, "w0"),)
    stage = QueueState("synthetic.execute", (), running, ())
    state = LiveState(NOW, "ebf", (Progress("t1:a", "t", "synthetic", 2, 2, 0, "open", 900.0, NOW - 6.0),),
                      {"synthetic.execute": stage})
    report = status_report(state, Knobs(), shares={"t1": FairShare(2.0, {"gpu": 1})})
    assert report["fair_shares"]["t1"]["busy"] == {"gpu": 1}
    text = shown(report)
    assert "t1" in text and "gpu 1 of 1 AT CAP" in text and "6.0 / 6.0 s" in text


def test_with_no_tenant_and_no_work_there_is_no_share_table():
    assert shown(status_report(LiveState(NOW, "ebf", (), {}), Knobs())) == ""
