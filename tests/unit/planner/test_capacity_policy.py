"""decide() within a capacity: the pools that can really run, and what the capacity holds back (issue 36)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from farm.knobs import Knobs
from planner.policy.capacity import Capacity, fit
from planner.policy.decide import decide
from planner.policy.snapshot import DONE, QUEUED, ActiveBatch, Snapshot, StageState

POLICIES = ("distrs", "history", "zq-dedicated", "static:9,5")


def _snapshot(seed=0, now=150.0, workers=(0, 0), startup_s=0.0, tasks=1, capacity=Capacity()):
    """A compile (cpu) / execute (gpu) pipeline with one open batch of 200 per task, part arrived."""
    rng = np.random.default_rng(seed)
    history, batches = {}, []
    for t in range(tasks):
        r = np.sort(100 + rng.gamma(2.0, 30.0, 200))
        h = np.column_stack([r, rng.normal(50, 5, 200).clip(1, 120), rng.normal(3, 1, 200).clip(0.1, 60)])
        history[f"t{t}"] = h
        arrived = h[h[:, 0] <= now]
        at_execute = arrived[:, 0] + arrived[:, 1] <= now
        done = arrived[:, 0] + arrived[:, 1] + arrived[:, 2] <= now
        batches.append(ActiveBatch(
            f"t{t}/1", f"t{t}", 0.0, 200, arrival=arrived[:, 0], stage=at_execute.astype(int),
            state=np.where(done, DONE, QUEUED),
            since=np.where(at_execute, arrived[:, 0] + arrived[:, 1], arrived[:, 0])))
    stages = (StageState("compile", "cpu", 1.0, 120.0, "cuda.compile", workers=workers[0]),
              StageState("execute", "gpu", 8.0, 60.0, "cuda.execute", workers=workers[1]))
    return Snapshot(now=now, pipeline="cuda", stages=stages, batches=tuple(batches), history=history,
                    startup_s=startup_s, capacity=capacity)


def _with(snap: Snapshot, capacity: Capacity) -> Snapshot:
    return Snapshot(now=snap.now, pipeline=snap.pipeline, stages=snap.stages, batches=snap.batches,
                    history=snap.history, startup_s=snap.startup_s, recent=snap.recent, capacity=capacity)


def _wanted(snap: Snapshot, knobs: Knobs, seed: int) -> dict[str, int]:
    """What each stage's plan wants without a capacity, as an autoscaler with nothing placed reports it."""
    nothing = Capacity(most={"cpu": 0, "gpu": 0}, node_startup_s=1.0)
    nothing = decide(_with(snap, nothing), knobs, random.Random(seed))
    return {b.queue: b.wanted for b in nothing.binding}


def _used(workers, snap: Snapshot) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in snap.stages:
        out[s.resource] = out.get(s.resource, 0) + workers[s.queue]
    return out


snapshots = st.builds(
    _snapshot, seed=st.integers(0, 50), now=st.floats(100.0, 400.0), workers=st.tuples(st.integers(0, 30), st.integers(0, 8)),
    startup_s=st.sampled_from([0.0, 30.0]), tasks=st.integers(1, 2))


@settings(max_examples=40, deadline=None)
@given(snapshots, st.sampled_from(POLICIES), st.integers(0, 40), st.integers(0, 12), st.sampled_from([0.0, 120.0]))
def test_the_pools_asked_for_never_exceed_the_capacity_of_their_resource_kind(snap, policy, cpu, gpu, node_s):
    capacity = Capacity(placeable={"cpu": cpu // 2, "gpu": gpu // 2}, most={"cpu": cpu, "gpu": gpu}, node_startup_s=node_s)
    decision = decide(_with(snap, capacity), Knobs(policy=policy), random.Random(1))
    used = _used(decision.workers, snap)
    assert used["cpu"] <= cpu and used["gpu"] <= gpu
    for pools in (decision.dedicated or {}).values():
        assert _used(pools, snap)["gpu"] <= gpu


@settings(max_examples=30, deadline=None)
@given(snapshots, st.sampled_from(POLICIES), st.integers(0, 5))
def test_a_fixed_cluster_that_holds_the_pools_asked_for_changes_nothing(snap, policy, spare):
    knobs = Knobs(policy=policy)
    free = decide(snap, knobs, random.Random(3))
    room = {kind: n + spare for kind, n in _used(free.workers, snap).items()}
    assert decide(_with(snap, Capacity(room)), knobs, random.Random(3)) == free


@settings(max_examples=30, deadline=None)
@given(snapshots, st.sampled_from(POLICIES), st.integers(0, 5))
def test_an_autoscaler_that_places_what_the_plan_wants_now_changes_nothing(snap, policy, spare):
    knobs = Knobs(policy=policy)
    wanted = _wanted(snap, knobs, 3)
    room = {kind: n + spare for kind, n in _used({s.queue: wanted.get(s.queue, 0) for s in snap.stages}, snap).items()}
    capacity = Capacity(placeable=room, most={k: 2 * n for k, n in room.items()}, node_startup_s=120.0)
    assert decide(_with(snap, capacity), knobs, random.Random(3)) == decide(snap, knobs, random.Random(3))


@settings(max_examples=30, deadline=None)
@given(snapshots, st.sampled_from(POLICIES), st.floats(0.0, 0.9))
def test_a_fixed_cluster_below_the_pools_asked_for_names_the_stage_it_holds_below_its_want(snap, policy, share):
    knobs = Knobs(policy=policy)
    gpus = decide(snap, knobs, random.Random(3)).workers["cuda.execute"]
    assume(gpus > 0)
    capacity = Capacity({"gpu": int(share * gpus)})
    decision = decide(_with(snap, capacity), knobs, random.Random(3))
    binding = {b.queue: b for b in decision.binding}
    assert binding["cuda.execute"].wanted >= gpus > binding["cuda.execute"].held
    assert decision.workers["cuda.execute"] <= int(share * gpus)
    assert all(b.short > 0 and b.delay_s == knobs.delay_s for b in decision.binding)


def test_a_fixed_cluster_holds_the_plan_to_its_gpus_and_says_what_delay_that_costs():
    snap = _snapshot(now=200.0)
    free = decide(snap, Knobs(), random.Random(1))
    held = decide(_with(snap, Capacity({"gpu": 1})), Knobs(), random.Random(1))
    assert not free.binding and free.workers["cuda.execute"] > 1
    assert held.workers["cuda.execute"] == 1
    (b,) = held.binding
    assert (b.queue, b.resource, b.held) == ("cuda.execute", "gpu", 1) and b.wanted > 1
    assert b.delay_max_s >= b.delay_mean_s > Knobs().delay_s
    assert "capacity binds: cuda.execute" in held.reason


def test_an_autoscaler_is_asked_for_workers_beyond_what_is_placeable_now():
    snap = _snapshot(now=200.0)
    wanted = decide(snap, Knobs(), random.Random(1)).workers["cuda.execute"]
    autoscaled = Capacity(placeable={"gpu": 1}, most={"gpu": 100}, node_startup_s=60.0)
    decision = decide(_with(snap, autoscaled), Knobs(), random.Random(1))
    assert 1 < decision.workers["cuda.execute"] <= 100 and wanted > 1


def test_an_autoscaler_whose_nodes_start_slowly_is_planned_with_more_delay_than_one_whose_nodes_start_at_once():
    snap = _snapshot(now=200.0)
    most = {"gpu": 2}  # below the 3 it wants
    quick = decide(_with(snap, Capacity({"gpu": 1}, most, node_startup_s=1.0)), Knobs(), random.Random(1))
    slow = decide(_with(snap, Capacity({"gpu": 1}, most, node_startup_s=300.0)), Knobs(), random.Random(1))
    assert slow.binding[0].delay_mean_s > quick.binding[0].delay_mean_s


def test_static_pools_over_the_capacity_are_cut_to_it_with_the_delay_expected():
    decision = decide(_with(_snapshot(), Capacity({"gpu": 2})), Knobs(policy="static:9,5"), random.Random(1))
    assert decision.workers == {"cuda.compile": 9, "cuda.execute": 2}
    (b,) = decision.binding
    assert (b.wanted, b.held) == (5, 2) and b.delay_mean_s is not None


def test_zq_dedicated_pools_share_the_capacity_between_tasks():
    snap = _snapshot(tasks=2)
    decision = decide(_with(snap, Capacity({"cpu": 10})), Knobs(policy="zq-dedicated"), random.Random(1))
    assert decision.workers["cuda.compile"] <= 10
    assert decision.workers == {q: sum(d[q] for d in decision.dedicated.values()) for q in decision.workers}
    assert decision.binding[0].queue == "cuda.compile" and decision.binding[0].delay_mean_s is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.sampled_from(["cpu", "gpu", "io"])), min_size=1, max_size=6),
       st.dictionaries(st.sampled_from(["cpu", "gpu"]), st.integers(0, 60)))
def test_fit_keeps_each_kind_within_its_limit_and_no_pool_above_its_count(pools, limits):
    counts, kinds = [c for c, _ in pools], [k for _, k in pools]
    out = fit(counts, kinds, limits)
    assert all(0 <= o <= c for o, c in zip(out, counts))
    for kind, limit in limits.items():
        total = sum(c for c, k in pools if k == kind)
        assert sum(o for o, k in zip(out, kinds) if k == kind) == min(total, limit)
    assert [o for o, k in zip(out, kinds) if k not in limits] == [c for c, k in pools if k not in limits]


@pytest.mark.parametrize("placeable, most", [({"gpu": 3}, {"gpu": 2}), ({"gpu": -1}, {}), ({"": 1}, {})])
def test_a_capacity_that_cannot_be_is_refused(placeable, most):
    with pytest.raises(ValueError):
        Capacity(placeable, most)
