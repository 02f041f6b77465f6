"""The live view's pure parts: a batch's requests from its Redis hashes, the history cache, the snapshot."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from farm.knobs import Knobs
from planner.policy.snapshot import DONE, QUEUED, RUNNING, ActiveBatch
from planner.runtime.live import HistoryCache, active_batch, snapshot

NAMES = ["compile", "execute"]
PIPELINE = SimpleNamespace(
    name="synthetic",
    stages=(
        SimpleNamespace(name="compile", resource="cpu", cost=1.0, timeout_s=120.0, queue="synthetic.compile"),
        SimpleNamespace(name="execute", resource="gpu", cost=8.0, timeout_s=60.0, queue="synthetic.execute"),
    ),
)


def progress(batch_id="b1", task="t", opened_at=100.0, size=4, key=100.0):
    return SimpleNamespace(batch_id=batch_id, task=task, opened_at=opened_at, size=size, key=key)


def state(qa, stages=("compile", "execute"), records=()):
    return json.dumps({"g": None, "st": list(stages), "c": {}, "r": list(records), "qa": qa})


def test_each_arrived_request_is_placed_where_it_is_with_its_arrival_from_the_batch_start():
    states = {
        "q": state(103.0),
        "r": state(104.0, records=[{"name": "compile", "queued_at": 101.0, "started_at": 101.5, "finished_at": 104.0}]),
        "d": state(102.0, stages=()),
    }
    results = {"d": json.dumps({"finished_at": 102.0})}
    b = active_batch(progress(), NAMES, states, results, pending={"q": (0, 103.0)}, running={"r": (1, 104.5)})
    assert list(b.arrival) == [1.0, 2.0, 3.0]  # r (first queued at 101), d, q
    assert list(b.state) == [RUNNING, DONE, QUEUED]
    assert list(b.stage)[0] == 1 and list(b.stage)[2] == 0
    assert list(b.since) == [104.5, 102.0, 103.0]
    assert b.outstanding == 1


def test_a_request_seen_nowhere_counts_as_queued_at_its_next_stage():
    states = {"x": state(105.0, records=[{"name": "compile", "queued_at": 101.0, "started_at": 101.0, "finished_at": 105.0}])}
    b = active_batch(progress(), NAMES, states, {}, {}, {})
    assert (b.state[0], b.stage[0], b.since[0]) == (QUEUED, 1, 105.0)


def test_an_unreadable_request_state_is_skipped():
    b = active_batch(progress(), NAMES, {"bad": "{not json"}, {}, {}, {})
    assert len(b.arrival) == 0


class Loads:
    def __init__(self, by_task):
        self.by_task, self.calls = by_task, []

    def __call__(self, task, queues):
        self.calls.append(task)
        return self.by_task.get(task)


def completed(bid, task, rows):
    return SimpleNamespace(id=bid, task=task, requests=np.array(rows, dtype=float))


def batch(bid, task):
    return ActiveBatch(bid, task, 100.0, 4)


def test_history_is_read_once_per_task_until_one_of_its_batches_completes():
    load = Loads({"t": completed("old", "t", [[1.0, 2.0, 1.0]])})
    cache = HistoryCache(load)
    for _ in range(3):
        cache.observe([batch("b1", "t")])
        cache.get("t", [])
    assert load.calls == ["t"]
    cache.observe([])  # b1 completed
    load.by_task["t"] = completed("b1", "t", [[2.0, 3.0, 1.0]])
    assert cache.get("t", [])[0, 0] == 2.0
    cache.get("t", [])
    assert load.calls == ["t", "t"]


def test_history_is_asked_again_until_the_recorder_has_written_the_completed_batch():
    load = Loads({"t": completed("old", "t", [[1.0, 2.0, 1.0]])})
    cache = HistoryCache(load)
    cache.observe([batch("b1", "t")])
    cache.get("t", [])
    cache.observe([])
    cache.get("t", [])  # the store still says "old"
    cache.get("t", [])
    assert len(load.calls) == 3


def test_a_task_without_history_gets_its_pipelines_other_histories_in_the_snapshot():
    load = Loads({"a": completed("a0", "a", [[1.0, 2.0, 1.0]])})
    cache = HistoryCache(load)
    snap, cold = snapshot(200.0, PIPELINE, Knobs(), {}, [batch("x", "a"), batch("y", "new")], cache)
    assert set(snap.history) == {"a"} and cold == ()


def test_after_a_restart_the_store_lends_the_pipelines_latest_batch():
    lent = completed("z9", "other", [[1.0, 2.0, 1.0]])
    cache = HistoryCache(Loads({}), latest=lambda queues, exclude: lent)
    snap, cold = snapshot(200.0, PIPELINE, Knobs(), {}, [batch("y", "new")], cache)
    assert set(snap.history) == {"other"} and cold == ()


def test_a_pipeline_without_any_history_is_cold():
    snap, cold = snapshot(200.0, PIPELINE, Knobs(), {}, [batch("y", "new")], HistoryCache(Loads({})))
    assert cold == ("y",) and snap.history == {}


def test_the_snapshot_carries_the_knobs_overrides_and_the_pools():
    knobs = Knobs().with_stage("synthetic.execute", timeout_s=3.0, cost=2.0)
    snap, _ = snapshot(200.0, PIPELINE, knobs, {"synthetic.execute": (4, 1)}, [], HistoryCache(Loads({})), 1.5)
    execute = snap.stages[1]
    assert (execute.timeout_s, execute.cost, execute.workers, execute.starting) == (3.0, 2.0, 4, 1)
    assert snap.startup_s == pytest.approx(1.5) and snap.stages[0].workers == 0


def test_the_start_up_the_policy_plans_with_is_read_again_soon_while_unobserved(monkeypatch):
    import planner.runtime.live as live
    from planner.policy.startup import StartupStats

    slow = {"cuda.execute": StartupStats("local", "cuda.execute", 5, 2.0, 2.5, 3.0)}
    fast = {"cuda.execute": StartupStats("local", "cuda.execute", 5, 0.5, 0.7, 0.8)}
    answers = [{}, {}, slow, fast]
    reads = []

    def observed(engine, since, backend=None):
        reads.append((since, backend))
        return answers[len(reads) - 1]

    monkeypatch.setattr(live, "observed_startups", observed)
    farm = live.LiveFarm(SimpleNamespace(namespace="t"), redis=None, engine=None, startup_s=1.0, backend="local")

    assert farm.startup(100.0) == 1.0  # nothing observed yet: the configured prior
    assert farm.startup(100.0 + live.STARTUP_RETRY_S / 2) == 1.0 and len(reads) == 1
    assert farm.startup(101.0 + live.STARTUP_RETRY_S) == 1.0 and len(reads) == 2  # asked again a second later
    assert farm.startup(102.1 + 2 * live.STARTUP_RETRY_S) == 2.5  # observed: slower than the prior, its p90
    assert farm.startup(103.0 + 2 * live.STARTUP_RETRY_S) == 2.5 and len(reads) == 3  # kept for a while
    assert farm.startup(110.0 + live.STARTUP_REFRESH_S) == 1.0 and len(reads) == 4  # faster: the prior stays
    assert {backend for _, backend in reads} == {"local"}  # only this backend's workers


def test_a_pipeline_plans_with_the_slowest_start_up_of_its_own_stages(monkeypatch):
    import planner.runtime.live as live
    from planner.policy.startup import StartupStats

    seen = {"cuda.compile": StartupStats("docker", "cuda.compile", 9, 4.0, 6.0, 7.0),
            "cuda.execute": StartupStats("docker", "cuda.execute", 9, 30.0, 45.0, 50.0),
            "code.run": StartupStats("docker", "code.run", 9, 2.0, 3.0, 3.0)}
    monkeypatch.setattr(live, "observed_startups", lambda engine, since, backend=None: seen)
    farm = live.LiveFarm(SimpleNamespace(namespace="t"), redis=None, engine=None, startup_s=5.0, backend="docker")
    assert farm.startup(0.0, ("cuda.compile", "cuda.execute")) == 45.0
    assert farm.startup(0.0, ("code.run",)) == 5.0  # quicker than configured: plan with the configured one


def test_the_time_each_request_spent_at_the_stages_it_finished_is_read_from_its_records():
    compile_record = {"name": "compile", "queued_at": 101.0, "started_at": 101.5, "finished_at": 104.0}
    execute_record = {"name": "execute", "queued_at": 104.0, "started_at": 105.0, "finished_at": 108.0}
    states = {"r": state(101.0, records=[compile_record]), "d": state(101.0, records=[compile_record])}
    # the state is not written after the last stage: a done request's times come from its result
    results = {"d": json.dumps({"finished_at": 108.0, "stages": [compile_record, execute_record]})}
    b = active_batch(progress(), NAMES, states, results, pending={}, running={"r": (1, 104.5)})
    by_state = {int(s): list(row) for s, row in zip(b.state, b.served)}
    assert by_state[RUNNING] == [2.5, 0.0]
    assert by_state[DONE] == [2.5, 3.0]


def test_a_result_without_stage_records_keeps_the_times_its_state_has():
    record = {"name": "compile", "queued_at": 101.0, "started_at": 101.5, "finished_at": 104.0}
    states = {"d": state(101.0, records=[record])}
    b = active_batch(progress(), NAMES, states, {"d": json.dumps({"finished_at": 104.0})}, {}, {})
    assert (int(b.state[0]), list(b.served[0])) == (DONE, [2.5, 0.0])


def test_a_stage_record_without_its_times_teaches_nothing():
    states = {"x": state(105.0, records=[{"name": "compile", "queued_at": 101.0, "started_at": None,
                                          "finished_at": 105.0}])}
    b = active_batch(progress(), NAMES, states, {}, {}, {})
    assert list(b.served[0]) == [0.0, 0.0]
