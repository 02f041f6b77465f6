"""The daemon's decision epochs with a stand-in policy, an in-memory live view and a fake backend."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from farm.config import Settings
from farm.knobs import Knobs
from planner.backends.fake import FakeBackend, FakeWorld
from planner.policy.snapshot import Need, Snapshot, StageState
from planner.runtime.daemon import Daemon
from planner.runtime.view import PipelineView, cold_floor, decision_workers

C, E = "synthetic.compile", "synthetic.execute"


class Clock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


def fake_backend(*busy_and_idle, clock=None):
    """A fake backend whose world already runs the named workers of stage C (name, busy)."""
    world = FakeWorld(clock or Clock())
    backend = FakeBackend(Settings(namespace="t"), world=world, timeout_for=lambda stage: 60.0)
    return backend, world


def names(backend, stage=None):
    return sorted(w.name for w in backend.list(stage) if w.alive)


class StaticView:
    """The live farm as a list of pipeline views the test edits between epochs."""

    def __init__(self, *views):
        self.views = list(views)
        self.reads = []

    def read(self, now, knobs, workers):
        self.reads.append((now, knobs, workers))
        return list(self.views)


def view(snapshot=None, *, busy=None, cold=(), sizes=None):
    return PipelineView("synthetic", (C, E), snapshot, dict(sizes or {}), tuple(cold), dict(busy or {}))


def policy_from_snapshot(snapshot, knobs, rng):
    """A stand-in policy: the snapshot says what it wants."""
    return SimpleNamespace(workers=snapshot["workers"], estimates=snapshot.get("T", {}), reason="stand-in")


def make_daemon(view_, backend, knobs=None, **kw):
    knobs_box = {"k": knobs or Knobs()}
    records, estimates = [], {}
    daemon = Daemon(
        view=view_,
        backend=backend,
        decide=kw.pop("decide", policy_from_snapshot),
        knobs=lambda: knobs_box["k"],
        set_estimate=lambda b, t: estimates.__setitem__(b, t),
        record=records.append,
        clock=lambda: 100.0,
        **kw,
    )
    return daemon, knobs_box, records, estimates


def count(backend, stage):
    return sum(1 for w in backend.list(stage) if w.alive)


def spawned(backend, stage, n):
    """Workers already running before the test's decision."""
    return [w.name for w in backend.spawn(stage, n)]


def test_an_epoch_spawns_the_workers_the_policy_asks_for_and_writes_each_batch_estimate():
    backend, _ = fake_backend()
    daemon, _, records, estimates = make_daemon(StaticView(view({"workers": {C: 3, E: 1}, "T": {"b1": 250.0}})), backend)
    daemon.step("opened")
    assert (count(backend, C), count(backend, E)) == (3, 1)
    assert estimates == {"b1": 250.0}
    assert records[0].workers == {C: 3, E: 1} and records[0].reason == "opened"


def test_scaling_down_retires_idle_workers_and_keeps_the_busy_ones():
    backend, world = fake_backend()
    busy, *idle = spawned(backend, C, 3)
    world.set_busy(busy)
    live = StaticView(view({"workers": {C: 1, E: 0}}, busy={busy: 50.0}))
    daemon, *_ = make_daemon(live, backend)
    daemon.step("completed")
    assert names(backend, C) == [busy]
    assert not [e for e in world.lives("worker_retired") if e["worker"] == busy]


def test_a_busy_worker_is_retired_warm_only_when_too_few_are_idle():
    backend, world = fake_backend()
    first, second = spawned(backend, C, 2)
    world.set_busy(first)
    world.set_busy(second)
    daemon, *_ = make_daemon(StaticView(view({"workers": {C: 1, E: 0}}, busy={first: 10.0, second: 20.0})), backend)
    daemon.step("completed")
    states = {w.name: w.state.value for w in backend.list(C)}
    assert states == {first: "stopping", second: "running"}  # the longest-running request goes first, warm


def test_a_knobs_change_takes_effect_at_the_next_decision():
    backend, _ = fake_backend()
    daemon, knobs, records, _ = make_daemon(StaticView(view({"workers": {C: 10, E: 10}})), backend)
    daemon.step("tick")
    assert count(backend, C) == 10
    knobs["k"] = Knobs().with_stage(C, max_workers=4).with_stage(E, min_workers=12)
    daemon.step("tick")
    assert (count(backend, C), count(backend, E)) == (4, 12)
    assert records[-1].workers == {C: 4, E: 12}


def test_every_decision_is_recorded_with_its_reason_policy_runtime_and_changes():
    backend, _ = fake_backend()
    daemon, _, records, _ = make_daemon(StaticView(view({"workers": {C: 2, E: 1}, "T": {"b": 9.0}})), backend, Knobs(policy="history"))
    daemon.step("opened")
    daemon.step("tick")
    assert [r.reason for r in records] == ["opened", "tick"]
    first = records[0]
    assert first.policy == "history" and first.runtime_s >= 0 and first.estimates == {"b": 9.0}
    assert first.details["spawned"] == {C: 2, E: 1} and first.details["policy_reason"] == "stand-in"
    assert records[1].details["spawned"] == {}


def test_a_cold_batch_gets_the_operators_floor_within_max_workers_and_the_batch_size():
    backend, _ = fake_backend()
    knobs = Knobs().with_stage(E, max_workers=3)
    live = StaticView(view({"workers": {C: 0, E: 0}}, cold=("b0",), sizes={"b0": 5}))
    daemon, *_ = make_daemon(live, backend, knobs, cold_workers=8)
    daemon.step("opened")
    assert (count(backend, C), count(backend, E)) == (5, 3)


def test_without_a_floor_a_cold_batch_gets_what_the_policy_says():
    backend, _ = fake_backend()
    live = StaticView(view({"workers": {C: 1, E: 1}}, cold=("b0",), sizes={"b0": 5}))
    daemon, *_ = make_daemon(live, backend)
    daemon.step("opened")
    assert (count(backend, C), count(backend, E)) == (1, 1)


def test_cold_floor_is_empty_when_every_batch_has_history():
    assert cold_floor(view(sizes={"b": 8}), Knobs(), 4) == {}


def test_a_failing_policy_leaves_the_pools_as_they_are():
    backend, _ = fake_backend()
    before = spawned(backend, C, 1)

    def broken(snapshot, knobs, rng):
        raise RuntimeError("boom")

    daemon, _, records, _ = make_daemon(StaticView(view({})), backend, decide=broken)
    assert daemon.step("tick") == []
    assert names(backend) == before and records == []


def test_a_decision_that_omits_a_stage_is_an_error_naming_it():
    with pytest.raises(ValueError, match="synthetic.execute"):
        decision_workers(SimpleNamespace(workers={C: 1}), (C, E))


def test_workers_of_other_pipelines_are_not_touched():
    backend, _ = fake_backend()
    other = spawned(backend, "math.verify", 1)
    daemon, *_ = make_daemon(StaticView(view({"workers": {C: 0, E: 0}})), backend)
    daemon.step("tick")
    assert names(backend, "math.verify") == other


def test_a_restarted_daemon_adopts_the_workers_it_finds_and_spawns_no_duplicates():
    backend, world = fake_backend()
    live = StaticView(view({"workers": {C: 2, E: 1}}))
    first, *_ = make_daemon(live, backend)
    first.step("opened")
    before = names(backend)
    restarted = FakeBackend(Settings(namespace="t"), world=world, timeout_for=lambda stage: 60.0)
    second, *_ = make_daemon(live, restarted)
    second.start()
    second.step("start")
    assert names(restarted) == before


class ScriptedWakeup:
    """Epoch messages from a list; then nothing, as a quiet farm."""

    def __init__(self, reasons, stop):
        self.reasons, self.stop, self.waits = list(reasons), stop, 0

    def wait(self, timeout):
        self.waits += 1
        if self.reasons:
            return self.reasons.pop(0)
        self.stop.set()
        return None


def test_serve_reconciles_first_then_decides_at_start_and_at_each_epoch():
    backend, world = fake_backend()
    (left_over,) = spawned(backend, C, 1)  # a previous daemon's worker
    stop = threading.Event()
    daemon, _, records, _ = make_daemon(StaticView(view({"workers": {C: 1, E: 1}})), backend)
    daemon.serve(ScriptedWakeup(["opened", "completed"], stop), stop)
    assert [e["worker"] for e in world.lives("worker_spawned")].count(left_over) == 2  # adopted: announced again
    assert [r.reason for r in records] == ["start", "opened", "completed"]
    assert (count(backend, C), count(backend, E)) == (1, 1)


def test_the_hint_scales_up_before_the_first_request_arrives():
    # The batch is open with none of its requests arrived: the view's snapshot says so, and the policy
    # (here its stand-in) sizes from history; the daemon must act on the open message alone.
    backend, _ = fake_backend()
    snapshot = {"workers": {C: 2, E: 1}, "arrived": 0}
    stop = threading.Event()
    daemon, _, records, _ = make_daemon(StaticView(view(snapshot)), backend)
    daemon.start()
    wake = ScriptedWakeup(["opened"], stop)
    daemon.step(wake.wait(1.0))
    assert records[0].reason == "opened" and (count(backend, C), count(backend, E)) == (2, 1)


def test_with_the_real_policy_the_open_hint_alone_starts_workers_for_the_coming_requests():
    from planner.policy.decide import decide
    from planner.policy.snapshot import ActiveBatch
    from planner.runtime.live import HistoryCache, snapshot

    pipeline = SimpleNamespace(name="synthetic", stages=(
        SimpleNamespace(name="compile", resource="cpu", cost=1.0, timeout_s=120.0, queue=C),
        SimpleNamespace(name="execute", resource="gpu", cost=8.0, timeout_s=60.0, queue=E),
    ))
    rows = [[1.0 + 0.1 * i, 5.0, 1.0] for i in range(20)]  # the previous batch: 20 requests from 1 s on
    history = HistoryCache(lambda task, queues: SimpleNamespace(id="prev", requests=np.array(rows)))

    class OpenBatchView:
        def read(self, now, knobs, workers):
            snap, cold = snapshot(now, pipeline, knobs, {}, [ActiveBatch("b1", "t", now, 20)], history)
            return [PipelineView("synthetic", (C, E), snap, {"b1": 20}, cold, {})]

    backend, _ = fake_backend()
    daemon, _, records, estimates = make_daemon(OpenBatchView(), backend, Knobs(delay_s=1.0, tick_s=5.0), decide=decide)
    daemon.step("opened")
    assert count(backend, C) >= 2  # compile now; execute only once its requests are due within the look-ahead
    assert estimates["b1"] > 100.0  # T: the batch's start plus its estimated duration


def test_an_estimate_that_is_not_a_finite_time_is_not_written():
    backend, _ = fake_backend()
    daemon, _, records, estimates = make_daemon(
        StaticView(view({"workers": {C: 1, E: 1}, "T": {"ok": 5.0, "bad": float("nan"), "worse": float("inf")}})),
        backend)
    daemon.step("tick")
    assert estimates == {"ok": 5.0} and records[0].estimates == {"ok": 5.0}


class TimedWakeup:
    """A wake-up on a fake clock: epoch messages at given times, otherwise the wait's timeout passes."""

    def __init__(self, clock, messages, until, stop):
        self.clock, self.messages, self.until, self.stop = clock, sorted(messages), until, stop

    def wait(self, timeout):
        if self.messages and self.messages[0][0] <= self.clock.t + timeout:
            at, reason = self.messages.pop(0)
            self.clock.t = max(self.clock.t, at)
            return reason
        self.clock.t += timeout
        if self.clock.t >= self.until:
            self.stop.set()
        return None


def test_ticks_keep_their_grid_whatever_epoch_messages_come_between_them():
    clock = Clock(0.0)
    backend, _ = fake_backend()
    stop = threading.Event()
    daemon, _, records, _ = make_daemon(StaticView(view({"workers": {C: 0, E: 0}, "T": {"b": 50.0}})), backend,
                                        Knobs(tick_s=10.0), monotonic=clock)
    daemon.serve(TimedWakeup(clock, [(4.0, "opened"), (13.0, "completed")], until=35.0, stop=stop), stop)
    assert [r.reason for r in records] == ["start", "opened", "tick", "completed", "tick", "tick"]


def test_a_shorter_tick_in_the_knobs_takes_effect_at_once():
    clock = Clock(0.0)
    backend, _ = fake_backend()
    stop = threading.Event()
    daemon, knobs_box, records, _ = make_daemon(StaticView(view({"workers": {C: 0, E: 0}, "T": {"b": 50.0}})),
                                                backend, Knobs(tick_s=100.0), monotonic=clock)

    class Shorten(TimedWakeup):
        def wait(self, timeout):
            if self.clock.t >= 3.0:
                knobs_box["k"] = Knobs(tick_s=2.0)  # as a replay sets the compressed clock's knobs
            return super().wait(timeout)

    daemon.serve(Shorten(clock, [], until=8.5, stop=stop), stop)
    ticks = [r.at for r in records if r.reason == "tick"]
    # the knobs change at 3: the tick due at 2 under the new period comes at once (at 4), then at 6 and 8;
    # under the old period the next tick would have come at 100
    assert [r.reason for r in records][:1] == ["start"] and len(ticks) == 3


def test_an_idle_tick_that_leaves_the_pools_as_they_were_is_not_recorded():
    backend, _ = fake_backend()
    daemon, _, records, _ = make_daemon(StaticView(view({"workers": {C: 0, E: 0}})), backend)
    daemon.step("start")
    daemon.step("tick")
    daemon.step("tick")
    assert [r.reason for r in records] == ["start"]


def test_an_idle_tick_that_changes_a_pool_is_recorded():
    backend, _ = fake_backend()
    farm = StaticView(view({"workers": {C: 0, E: 0}}))
    daemon, _, records, _ = make_daemon(farm, backend)
    daemon.step("tick")
    farm.views[0] = view({"workers": {C: 2, E: 0}})
    daemon.step("tick")
    daemon.step("tick")
    assert [r.reason for r in records] == ["tick", "tick"] and records[-1].workers == {C: 2, E: 0}


class MeetingBackend(FakeBackend):
    """A backend whose spawn returns only once every stage's spawn of the decision has begun."""

    def __init__(self, stages: int, **kw):
        super().__init__(**kw)
        self.meeting = threading.Barrier(stages, timeout=5.0)

    def spawn(self, stage, n, *, request_id=None):
        self.meeting.wait()  # a daemon that spawns one stage after another breaks the barrier here
        return super().spawn(stage, n, request_id=request_id)


def test_a_decisions_stages_are_spawned_side_by_side_not_one_after_another():
    backend = MeetingBackend(2, settings=Settings(namespace="t"), world=FakeWorld(Clock()),
                             timeout_for=lambda stage: 60.0)
    daemon, *_ = make_daemon(StaticView(view({"workers": {C: 2, E: 3}})), backend)
    daemon.step("tick")
    assert (count(backend, C), count(backend, E)) == (2, 3)


def test_the_daemon_passes_the_policys_latest_needs_back_to_it():
    stages = (StageState("compile", "cpu", 1.0, 120.0, C), StageState("execute", "gpu", 8.0, 60.0, E))
    seen = []

    def policy(snapshot, knobs, rng):
        seen.append(snapshot.recent)
        need = Need(snapshot.now, {C: len(seen), E: 0})
        return SimpleNamespace(workers={C: 0, E: 0}, estimates={}, reason="stand-in", need=need)

    backend, _ = fake_backend()
    daemon, *_ = make_daemon(StaticView(view(Snapshot(now=100.0, pipeline="synthetic", stages=stages))), backend,
                             decide=policy)
    records = [daemon.step("tick")[0] for _ in range(4)]
    assert records[0].details["need"] == {C: 1, E: 0}  # recorded beside the steadied target
    assert seen[0] == ()
    assert [n.workers[C] for n in seen[1]] == [1]
    assert [n.workers[C] for n in seen[3]] == [1, 2, 3]
