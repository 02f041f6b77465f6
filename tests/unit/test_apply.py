"""Pool changes from a decision: spawn what is missing, retire idle workers first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.runtime.pools import PoolWorker, clamp, plan

C, E = "synthetic.compile", "synthetic.execute"


def test_a_missing_worker_is_spawned():
    changes = plan([PoolWorker("c1", C)], {C: 3})
    assert changes.spawn == {C: 2}
    assert changes.retire == ()


def test_idle_workers_are_retired_before_busy_ones():
    workers = [
        PoolWorker("busy", C, started_at=1.0, busy_since=5.0),
        PoolWorker("idle-old", C, started_at=1.0),
        PoolWorker("idle-young", C, started_at=9.0),
    ]
    changes = plan(workers, {C: 1})
    assert [w.name for w in changes.retire] == ["idle-young", "idle-old"]


def test_a_busy_worker_is_retired_only_when_too_few_are_idle_and_the_longest_running_goes_first():
    workers = [
        PoolWorker("late", C, busy_since=20.0),
        PoolWorker("early", C, busy_since=10.0),
        PoolWorker("idle", C),
    ]
    changes = plan(workers, {C: 0})
    assert [w.name for w in changes.retire] == ["idle", "early", "late"]


def test_workers_already_retiring_do_not_count_toward_the_pool():
    changes = plan([PoolWorker("leaving", E, retiring=True)], {E: 1})
    assert changes.spawn == {E: 1}
    assert changes.retire == ()


def test_a_stage_without_a_target_is_left_alone():
    changes = plan([PoolWorker("other", "math.verify")], {C: 0})
    assert changes.empty


def test_clamp_holds_the_target_within_the_knobs_bounds():
    assert clamp({C: 0, E: 100}, {C: (1, 8), E: (0, 16)}) == {C: 1, E: 16}


def test_clamp_fills_a_stage_the_decision_left_out_with_its_minimum():
    assert clamp({C: 2}, {E: (3, 5)}) == {C: 2, E: 3}


def test_clamp_rejects_a_negative_target_with_a_message():
    with pytest.raises(ValueError, match="whole number"):
        clamp({C: -1}, {})


workers_strategy = st.lists(
    st.tuples(st.sampled_from([C, E]), st.one_of(st.none(), st.floats(0, 100)), st.floats(0, 100)),
    max_size=12,
)


@given(workers_strategy, st.integers(0, 10), st.integers(0, 10))
def test_after_the_changes_each_stage_has_its_target_and_no_busy_worker_goes_while_an_idle_one_stays(raw, nc, ne):
    workers = [PoolWorker(f"w{i}", s, started_at=t, busy_since=b) for i, (s, b, t) in enumerate(raw)]
    target = {C: nc, E: ne}
    changes = plan(workers, target)
    retired = {w.name for w in changes.retire}
    for stage, want in target.items():
        have = [w for w in workers if w.stage == stage]
        left = [w for w in have if w.name not in retired]
        assert len(left) + changes.spawn.get(stage, 0) == want
        if any(w.busy for w in have if w.name in retired):
            assert not any(not w.busy for w in left)
