"""How `farm status` shows the cluster's capacity and the stages it holds below what they want."""

from __future__ import annotations

from farm.app.cli.status import capacity_lines, status_report
from farm.knobs import Knobs
from farm.protocol.heartbeat import Bound, Heartbeat, KindCapacity
from farm.protocol.live import LiveState

EMPTY = LiveState(now=0.0, scheduler="ebf", batches=(), stages={})


def beat(**fields):
    return Heartbeat(pid=1, at=0.0, backend="ray", **fields)


def test_the_report_carries_the_capacity_per_kind_and_the_bound_stage_with_its_shortfall():
    planner = beat(capacity={"gpu": KindCapacity(2, 2)},
                   bound={"cuda.execute": Bound("gpu", wanted=12, held=2, delay_mean_s=50.0, delay_max_s=80.0,
                                                delay_s=30.0)})

    report = status_report(EMPTY, Knobs(), planner)

    assert report["capacity"] == {"gpu": {"placeable": 2, "most": 2}}
    assert report["stages"]["cuda.execute"]["bound"]["short"] == 10
    assert report["stages"]["cuda.execute"]["bound"]["delay_max_s"] == 80.0


def test_the_bound_stage_is_named_with_how_many_it_lacks_and_the_delay_expected_against_d():
    planner = beat(capacity={"gpu": KindCapacity(2, 2)},
                   bound={"cuda.execute": Bound("gpu", wanted=12, held=2, delay_mean_s=50.0, delay_max_s=80.0,
                                                delay_s=30.0)})

    lines = capacity_lines(status_report(EMPTY, Knobs(), planner))

    assert lines[0] == "capacity (workers placeable now): gpu 2"
    assert "cuda.execute: wants 12 gpu workers, the cluster holds 2 (10 short)" in lines[1]
    assert "expected extra delay 50.0 s (max 80.0 s) against D = 30 s" in lines[1] and "OVER D" in lines[1]


def test_an_autoscalers_maximum_and_its_node_start_up_are_shown():
    report = status_report(EMPTY, Knobs(), beat(capacity={"gpu": KindCapacity(2, 8)}, node_startup_s=120.0))

    assert capacity_lines(report) == ["capacity (workers placeable now): gpu 2 (at most 8); a new node in 120 s"]


def test_an_unbounded_backend_shows_no_capacity_and_nothing_bound():
    report = status_report(EMPTY, Knobs(), beat())

    assert report["capacity"] == {} and capacity_lines(report) == []


def test_without_a_daemon_there_is_no_capacity_to_show():
    assert status_report(EMPTY, Knobs(), None)["capacity"] == {}
