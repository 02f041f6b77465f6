"""`farm planner --retire-all` (planner.runtime.service.retire_all) on the fake backend: every worker of the
farm retires, busy ones finish first, and what is still there after the wait is named."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from click.testing import CliRunner

from farm.app.cli.planner import planner
from farm.config import Settings
from planner.backends.fake import FakeBackend, FakeWorld
from planner.runtime.service import retire_all


def _farm(world: FakeWorld, namespace: str = "t") -> SimpleNamespace:
    return SimpleNamespace(backend=FakeBackend(Settings(namespace=namespace), world=world,
                                               timeout_for=lambda stage: 60.0))


def test_retiring_all_leaves_no_worker_of_any_stage():
    world = FakeWorld()
    farm = _farm(world)
    farm.backend.spawn("synthetic.compile", 2)
    farm.backend.spawn("synthetic.execute", 3)
    assert retire_all(farm, wait_s=5.0, poll_s=0.01) == []
    assert farm.backend.list() == []
    assert sorted(e["kind"] for e in world.events).count("worker_retired") == 5


def test_retiring_all_waits_for_a_busy_worker_to_finish_its_request():
    world = FakeWorld()
    farm = _farm(world)
    (busy,) = farm.backend.spawn("synthetic.execute", 1)
    world.set_busy(busy.name)
    finished = threading.Event()

    def finish() -> None:
        finished.set()
        world.set_busy(busy.name, False)

    timer = threading.Timer(0.3, finish)
    timer.start()
    try:
        assert retire_all(farm, wait_s=10.0, poll_s=0.01) == []
    finally:
        timer.cancel()
    assert finished.is_set()  # it returned only once the request was done
    assert [e["worker"] for e in world.events if e["kind"] == "worker_retired"] == [busy.name]


def test_a_worker_still_stopping_after_the_wait_is_named():
    world = FakeWorld()
    farm = _farm(world)
    (busy,) = farm.backend.spawn("synthetic.execute", 1)
    world.set_busy(busy.name)
    assert retire_all(farm, wait_s=0.1, poll_s=0.01) == [busy.name]


def test_retiring_all_leaves_another_farms_workers_alone():
    world = FakeWorld()
    mine, theirs = _farm(world, "mine"), _farm(world, "theirs")
    mine.backend.spawn("synthetic.compile", 1)
    theirs.backend.spawn("synthetic.compile", 2)
    assert retire_all(mine, wait_s=5.0, poll_s=0.01) == []
    assert len(theirs.backend.list()) == 2


def test_retire_all_and_once_are_refused_together():
    result = CliRunner().invoke(planner, ["--retire-all", "--once"])
    assert result.exit_code == 2
    assert "--once and --retire-all are exclusive" in result.output
