"""The planner daemon on a real farm: real Redis, PostgreSQL, the recorder and `farm worker` processes."""

from __future__ import annotations

import time

import pytest
import redis as redis_lib

from tests.integration.daemon_support import C, alive, daemon, farm, small_knobs, wait_for  # noqa: F401

E = "synthetic.execute"
pytestmark = pytest.mark.timeout(150)


def decisions(engine):
    from farm.store.queries import decisions as read

    return read(engine)


def test_opening_a_batch_starts_workers_before_its_first_request_and_idle_ones_are_retired_after(farm, daemon):
    from farm.client.sync import RewardClient

    settings, engine = farm
    with RewardClient(settings) as client:
        batch = client.open_batch("hint", "synthetic", 4)
        wait_for(lambda: alive(settings, C) and alive(settings, E), 15, "workers started on the hint alone")
        # a tick that came first may have started them: the hint's own decision follows it (on a loaded
        # machine the workers can be up before that tick's step, and so the hint's, is recorded)
        wait_for(lambda: any(d.reason == "opened" for d in decisions(engine)), 15, "the decision at the hint")
        for i in range(4):
            batch.submit(str(i), {"times": [0.3, 0.1]})
        results = batch.gather(timeout=60)
    assert sorted(r.request_id for r in results) == ["0", "1", "2", "3"]
    assert {r.status.value for r in results} == {"ok"}
    wait_for(lambda: not alive(settings), 30, "the idle workers retired once no batch is active")
    recorded = decisions(engine)
    assert recorded[-1].workers == {C: 0, E: 0}
    assert all(d.runtime_s >= 0 and d.policy == "distrs" for d in recorded)
    assert any(d.estimates for d in recorded)  # each batch's T was written where EBF reads it


def test_a_knobs_change_takes_effect_at_the_next_decision(farm, daemon):
    from farm.store.knob_store import KnobStore

    settings, engine = farm
    KnobStore(engine, daemon.redis, settings.namespace).save(small_knobs().with_stage(C, min_workers=2, max_workers=3))
    wait_for(lambda: len(alive(settings, C)) == 2, 20, "the compile pool held at its new minimum")
    assert wait_for(lambda: [d for d in decisions(engine) if d.workers.get(C) == 2], 10, "a decision with it")


def test_a_killed_daemon_leaves_the_farm_serving_and_its_successor_adopts_the_workers(farm):
    from farm.app.planner_process import DaemonProcess
    from farm.client.sync import RewardClient
    from farm.store.knob_store import KnobStore
    from farm.protocol import heartbeat

    settings, engine = farm
    client_redis = redis_lib.Redis.from_url(settings.redis_url)
    KnobStore(engine, client_redis, settings.namespace).save(small_knobs().with_stage(C, min_workers=2, max_workers=3)
                                                             .with_stage(E, min_workers=1, max_workers=2))
    first = DaemonProcess(settings, ["--backend", "local", "--startup-s", "1"])
    try:
        first.wait_ready(client_redis, settings.namespace)
        wait_for(lambda: len(alive(settings)) == 3, 30, lambda: f"the minimum pools: {alive(settings)}")
        before = sorted(w.name for w in alive(settings))
        first.kill()  # kill -9
        with RewardClient(settings) as client:
            batch = client.open_batch("restart", "synthetic", 3)
            for i in range(3):
                batch.submit(str(i), {"times": [0.2, 0.1]})
            assert len(batch.gather(timeout=30)) == 3  # served with the workers it has
        assert sorted(w.name for w in alive(settings)) == before
        second = DaemonProcess(settings, ["--backend", "local", "--startup-s", "1"])
        try:
            second.wait_ready(client_redis, settings.namespace)
            time.sleep(2.5)  # a couple of ticks
            assert sorted(w.name for w in alive(settings)) == before  # adopted: no duplicates, no orphans
            assert heartbeat.read(client_redis, settings.namespace).pid == second.pid
        finally:
            second.stop()
    finally:
        first.kill()
        client_redis.close()
