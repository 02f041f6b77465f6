"""`farm replay` on a real elastic farm: a tiny trace end to end, and `kill -9` of workers during a replay."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import numpy as np
import pytest

from tests.integration.daemon_support import alive, daemon, farm  # noqa: F401

pytestmark = pytest.mark.timeout(200)

EVAL_KEYS = {"policy", "scheduler", "batches", "requests", "extra_delay_mean_s", "extra_delay_p95_s",
             "extra_delay_max_s", "stages", "resources", "planner_runtime_mean_s", "planner_runtime_max_s"}


def tiny_trace(batches=2, size=6, seed=3):
    """Two tasks of a few small batches: compile up to 0.8 s, execute up to 0.3 s, one request that
    visits no stage and one that runs to the compile timeout."""
    from planner.eval.trace import Trace, TraceBatch, TraceStage

    rng = np.random.default_rng(seed)
    stages = (TraceStage("compile", "cpu", 1.0, 3.0), TraceStage("execute", "gpu", 8.0, 3.0))
    out = []
    for t, task in enumerate(("a", "b")):
        for k in range(batches):
            rows = np.column_stack([rng.uniform(0.2, 1.5, size), rng.uniform(0.3, 0.8, size), rng.uniform(0.1, 0.3, size)])
            rows[0, 1:] = 0.0  # generation failed
            rows[1, 1], rows[1, 2] = 3.0, 0.0  # killed at the compile timeout
            out.append(TraceBatch(task, k, 0.5 * t + 6.0 * k, np.round(rows, 3)))
    return Trace(stages, tuple(out))


def run_replay(settings, engine, trace, speed):
    from farm.app import live_replay as rp

    return rp.run(settings, engine, trace, rp.ReplayOptions(speed=speed, startup_s=1.0, record_timeout_s=60))


def test_a_tiny_trace_replays_end_to_end_with_the_eval_keys_measured_and_predicted(farm, daemon):
    settings, engine = farm
    trace = tiny_trace()
    report = run_replay(settings, engine, trace, speed=2.0)
    measured, predicted = report["measured"], report["predicted"]
    assert EVAL_KEYS <= set(measured) and EVAL_KEYS <= set(predicted)
    assert report["results"] == {"expected": 24, "received": 24, "lost": 0, "duplicated": 0,
                                 "statuses": {"ok": 16, "timeout": 4, "wrong": 4}}
    assert measured["batches"] == 4 and measured["requests"] == 24
    assert 0 <= measured["extra_delay_mean_s"] <= measured["extra_delay_max_s"]
    for name in ("compile", "execute"):
        stage = measured["stages"][name]
        # busy seconds are the trace's sum of s_ij, scaled back (plus the farm's own overhead per request)
        expected = float(sum(b.times[:, ("compile", "execute").index(name)].sum() for b in trace.batches))
        assert expected * 0.95 <= stage["busy_s"] <= expected * 1.5
        assert stage["allocated_s"] >= stage["busy_s"]
    assert report["fidelity"]["extra_delay_mean_s"]["predicted"] == predicted["extra_delay_mean_s"]
    # the prediction's worker physics, measured on this run: the planner spawned workers that took requests
    physics = report["physics"]
    assert physics["startup_samples"] >= 3 and physics["startup_s"] + physics["startup_per_start_s"] > 0
    assert physics["dispatch_samples"] >= 3 and 0 < physics["dispatch_s"] < 5.0
    assert physics["retire_s"] >= 0


def test_a_two_tenant_trace_replays_under_the_tenants_names_with_their_shares_and_errors_per_tenant(farm, daemon):
    from dataclasses import replace

    from farm.app import fair_shares
    from farm.app import live_replay as rp
    from farm.protocol.shares import FairShare
    from planner.eval.trace import Trace

    settings, engine = farm
    trace = tiny_trace(batches=1, size=4)
    trace = Trace(trace.stages, tuple(replace(b, tenant={"a": "alpha", "b": "t5"}[b.task]) for b in trace.batches))
    in_force = []
    options = rp.ReplayOptions(speed=2.0, startup_s=1.0, record_timeout_s=60,
                               shares={"alpha": FairShare(2.0), "t5": FairShare(max_workers={"gpu": 1})})
    report = rp.run(settings, engine, trace, options,
                    on_result=lambda task: in_force.append(fair_shares.read(daemon.redis, settings.namespace)))
    assert report["tenants"] == {"alpha": "t1", "t5": "t5"}
    assert in_force and all(s == {"t1": FairShare(2.0), "t5": FairShare(max_workers={"gpu": 1})} for s in in_force)
    assert fair_shares.read(daemon.redis, settings.namespace) == {}  # the entries of before: none
    assert set(report["measured"]["tenants"]) == set(report["predicted"]["tenants"]) == {"alpha", "t5"}
    assert {"tenants.alpha.extra_delay_mean_s", "tenants.t5.extra_delay_mean_s"} <= set(report["fidelity"])
    assert report["results"]["lost"] == 0 and report["results"]["received"] == 8


@pytest.fixture
def one_gpu(monkeypatch):
    """The farm's workers hold at most one GPU (the local backend's capacity: one GPU worker)."""
    monkeypatch.setenv("FARM_MAX_GPUS", "1")


def test_a_replay_is_predicted_on_the_cluster_its_planner_planned_within(one_gpu, farm, daemon):
    settings, engine = farm
    report = run_replay(settings, engine, tiny_trace(batches=1), speed=2.0)
    assert report["capacity"] == {"gpu": 1}
    assert report["predicted"]["capacity"] == {"gpu": 1}


def test_the_replay_restores_the_operators_knobs(farm, daemon):
    from farm.store.knob_store import KnobStore

    settings, engine = farm
    store = KnobStore(engine, daemon.redis, settings.namespace)
    before = store.load()
    run_replay(settings, engine, tiny_trace(batches=1, size=3), speed=4.0)
    assert store.load() == before


def test_killing_workers_during_a_replay_loses_and_duplicates_nothing(farm, daemon):
    from farm.protocol.live import inspect

    settings, engine = farm
    trace = tiny_trace(batches=2, size=8, seed=5)
    box = {}
    runner = threading.Thread(target=lambda: box.update(report=run_replay(settings, engine, trace, speed=1.0)))
    runner.start()
    killed = []
    rng = random.Random(7)
    deadline = time.monotonic() + 60
    while len(killed) < 3 and runner.is_alive() and time.monotonic() < deadline:
        live = inspect(daemon.redis, settings)
        busy = {r.worker for st in live.stages.values() for r in st.running}
        victims = [w for w in alive(settings) if w.name in busy and w.name not in killed and w.ref.isdigit()]
        if victims:
            victim = rng.choice(victims)
            os.kill(int(victim.ref), signal.SIGKILL)  # mid-request
            killed.append(victim.name)
            time.sleep(1.0)
        time.sleep(0.1)
    runner.join(180)
    assert len(killed) >= 1, "no busy worker to kill: the replay ended too soon"
    results = box["report"]["results"]
    assert (results["lost"], results["duplicated"]) == (0, 0)
    assert results["received"] == results["expected"] == 32
    assert set(results["statuses"]) <= {"ok", "wrong", "timeout"}  # a killed worker's request ran again elsewhere


def test_farm_replay_json_prints_measured_and_predicted_with_the_eval_keys(farm, daemon, tmp_path):
    import json

    from click.testing import CliRunner

    from farm.app.cli.replay import replay
    from planner.eval import trace as tracefile

    settings, engine = farm
    path = tmp_path / "tiny.jsonl"
    tracefile.write(path, tiny_trace(batches=1, size=4))
    env = {"FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace,
           "FARM_DATABASE_URL": settings.database_url, "FARM_LEASE_S": "2"}
    result = CliRunner().invoke(replay, [str(path), "--speed", "4", "--tasks", "a", "--json"], env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert EVAL_KEYS <= set(report["measured"]) and EVAL_KEYS <= set(report["predicted"])
    assert report["measured"]["batches"] == 1 and report["results"]["lost"] == 0


def test_the_demo_runs_an_embedded_elastic_farm_and_draws_the_workers_over_time(tmp_path):
    from farm.app.demo import run_demo
    from planner.eval import trace as tracefile

    path = tmp_path / "tiny.jsonl"
    tracefile.write(path, tiny_trace(batches=2, size=4))
    report, png = run_demo(speed=2.0, trace_spec=str(path), data_dir=str(tmp_path / "farm"), out=tmp_path,
                           max_workers=3, say=lambda msg: None)
    assert report["results"]["lost"] == 0 and report["results"]["received"] == 16
    assert report["measured"]["batches"] == 4 and report["predicted"]["batches"] == 4
    assert png == tmp_path / "demo-workers.png" and png.stat().st_size > 10_000
