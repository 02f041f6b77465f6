"""The daemon and the backend's capacity: read every epoch, shared among pipelines, passed to the policy
in the snapshot, never exceeded by the pools, and the stages it binds recorded for `farm status`."""

from __future__ import annotations

from types import SimpleNamespace

from farm.config import Settings
from planner.backends.fake import FakeBackend, FakeWorld
from planner.policy.capacity import Capacity
from planner.policy.snapshot import Binding, Snapshot, StageState
from planner.runtime.view import PipelineView
from tests.unit.test_daemon import C, E, Clock, StaticView, count, make_daemon

STAGES = (StageState("compile", "cpu", 1.0, 120.0, C), StageState("execute", "gpu", 8.0, 60.0, E))

def pipeline(name="synthetic"):
    stages = tuple(StageState(s.name, s.resource, s.cost, s.timeout_s, f"{name}.{s.name}") for s in STAGES)
    return PipelineView(name, tuple(s.queue for s in stages), Snapshot(now=100.0, pipeline=name, stages=stages))

class Asking:
    """A stand-in policy that asks for `want` workers per stage and keeps the snapshots it was given."""

    def __init__(self, want, binding=()):
        self.want, self.binding, self.seen = want, binding, []

    def __call__(self, snapshot, knobs, rng):
        self.seen.append(snapshot)
        workers = {s.queue: self.want.get(s.name, 0) for s in snapshot.stages}
        return SimpleNamespace(workers=workers, estimates={}, reason="asking", binding=self.binding)

def on_world(capacity):
    world = FakeWorld(Clock())
    world.capacity = capacity
    return FakeBackend(Settings(namespace="t"), world=world, timeout_for=lambda stage: 60.0), world

def test_the_policy_plans_with_the_capacity_the_backend_reports_at_that_epoch():
    backend, world = on_world(Capacity(placeable={"gpu": 2}))
    policy = Asking({"compile": 1, "execute": 1})
    daemon, *_ = make_daemon(StaticView(pipeline()), backend, decide=policy)

    daemon.step("tick")
    world.capacity = Capacity(placeable={"gpu": 3})
    daemon.step("tick")

    assert [s.capacity.limit("gpu") for s in policy.seen] == [2, 3]
    assert daemon.capacity == Capacity(placeable={"gpu": 3})

def test_the_pools_never_exceed_what_the_capacity_holds():
    backend, _ = on_world(Capacity(placeable={"gpu": 2}))
    daemon, _, records, _ = make_daemon(StaticView(pipeline()), backend, decide=Asking({"compile": 3, "execute": 5}))

    daemon.step("tick")

    assert count(backend, E) == 2 and count(backend, C) == 3
    assert records[-1].workers == {C: 3, E: 2}

def test_an_autoscalers_maximum_is_asked_for_beyond_what_is_placeable():
    backend, _ = on_world(Capacity(placeable={"gpu": 2}, most={"gpu": 4}, node_startup_s=60.0))
    daemon, _, records, _ = make_daemon(StaticView(pipeline()), backend, decide=Asking({"execute": 5}))

    daemon.step("tick")

    assert records[-1].workers[E] == 4

def test_two_pipelines_share_the_gpus_and_each_sees_its_share():
    backend, _ = on_world(Capacity(placeable={"gpu": 4}))
    policy = Asking({"execute": 4})
    daemon, *_ = make_daemon(StaticView(pipeline("synthetic"), pipeline("cuda")), backend, decide=policy)

    daemon.step("tick")

    assert sorted(s.capacity.placeable["gpu"] for s in policy.seen) == [2, 2]

def test_the_stages_the_capacity_binds_are_recorded_with_the_delay_expected_against_d():
    binding = (Binding(E, "gpu", wanted=5, held=2, delay_mean_s=40.0, delay_max_s=70.0, delay_s=30.0),)
    backend, _ = on_world(Capacity(placeable={"gpu": 2}))
    daemon, _, records, _ = make_daemon(StaticView(pipeline()), backend, decide=Asking({"execute": 2}, binding))

    daemon.step("tick")

    details = records[-1].details
    assert details["binding"] == {E: {"resource": "gpu", "wanted": 5, "held": 2, "delay_mean_s": 40.0,
                                      "delay_max_s": 70.0, "delay_s": 30.0}}
    assert details["capacity"] == {"gpu": {"placeable": 2, "most": 2}}

class Unreachable(FakeBackend):
    fail = False

    def capacity(self):
        if self.fail:
            raise ConnectionError("the cluster is away")
        return super().capacity()

def test_a_capacity_that_cannot_be_read_is_planned_as_last_read():
    world = FakeWorld(Clock())
    world.capacity = Capacity(placeable={"gpu": 2})
    backend = Unreachable(Settings(namespace="t"), world=world, timeout_for=lambda stage: 60.0)
    policy = Asking({"execute": 1})
    daemon, *_ = make_daemon(StaticView(pipeline()), backend, decide=policy)
    daemon.step("tick")

    backend.fail = True
    daemon.step("tick")

    assert policy.seen[-1].capacity.limit("gpu") == 2

def test_an_unbounded_backend_leaves_the_snapshot_unbounded():
    backend, _ = on_world(None)
    policy = Asking({"execute": 7})
    daemon, _, records, _ = make_daemon(StaticView(pipeline()), backend, decide=policy)

    daemon.step("tick")

    assert policy.seen[-1].capacity.unbounded and records[-1].workers[E] == 7
