"""Leases: a request whose worker dies goes back to the head of its batch's queue and finishes exactly once."""

from __future__ import annotations

import time

import pytest
import redis

from farm import registry
from farm.protocol import counters
from farm.protocol.calls import MAX_ATTEMPTS, submit_call
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import QueuePart, stamp
from farm.protocol.scripts import COMPLETE, Call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

COMPILE = "synthetic.compile"


def running_on(settings, request_id: str, timeout: float = 10.0) -> str:
    d = Dispatch(settings)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in d.inspect([COMPILE]).stages[COMPILE].running:
                if r.id == request_id:
                    return r.worker
            time.sleep(0.02)
        raise TimeoutError(f"{request_id} never ran")
    finally:
        d.close()


def test_a_request_whose_worker_is_killed_finishes_on_another_worker_exactly_once(settings, reward_client, start_workers):
    workers = {w.name: w for w in start_workers(COMPILE, count=2)}
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", {"times": [1.0, 0]})
    victim = running_on(settings, "r0")
    workers[victim].kill()
    [result] = batch.gather(timeout=30)
    [survivor] = set(workers) - {victim}
    assert result.ok and [s.worker for s in result.stages] == [survivor]
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    assert r.hlen(f"{settings.namespace}:b:{batch.id}:res") == 1
    assert len([e for _, e in r.xrange(f"{settings.namespace}:b:{batch.id}:done") if "r" in e]) == 1
    assert batch.progress().done == 1 and batch.progress().state == "completed"


def leased(d: Dispatch, token: str, worker: str = "w"):
    reply = d.pick(COMPILE, worker, "ebf", token)
    assert len(reply) > 1, "nothing to pick"
    return reply


def complete_call(batch_id: str, request_id: str, token: str, result_json: str) -> Call:
    event = '{"kind":"stage_done"}'
    return COMPLETE.call(batch=batch_id, request=request_id, token=token, worker="w", queue=COMPILE,
                         at=stamp(time.time()), stage_event=event, next_queue="", state="", result=result_json,
                         done_event='{"kind":"request_done"}', limit="")


def test_a_lapsed_lease_goes_back_to_the_head_of_its_batch_and_a_late_completion_is_discarded(settings, reward_client):
    quick = settings.with_(lease_s=0.2)
    d = Dispatch(quick)
    batch = reward_client.open_batch("t", "synthetic", 2)
    batch.submit("first", {"times": [1, 0]})
    batch.submit("second", {"times": [1, 0]})
    assert leased(d, "t1")[2] == "first"
    time.sleep(0.3)
    assert reward_client.sweep() == 1  # the client's sweep gives it back even when no worker picks
    assert [p.id for p in d.inspect([COMPILE]).stages[COMPILE].pending] == ["first", "second"]
    assert leased(d, "t2")[2] == "first"
    result = '{"request_id":"first","batch_id":"%s","status":"ok","reward":1.0}' % batch.id
    assert d.run(complete_call(batch.id, "first", "t1", result)) == "lost"
    assert d.run(complete_call(batch.id, "first", "t2", result)) == "finished"
    assert batch.progress().done == 1


def test_a_request_that_loses_its_worker_again_and_again_fails_alone_as_infra_error(settings, reward_client):
    d = Dispatch(settings.with_(lease_s=0.05))
    batch = reward_client.open_batch("t", "synthetic", 2)
    batch.submit("poison", {"times": [1, 0]})
    batch.submit("fine", {"times": [0, 0]})
    for attempt in range(MAX_ATTEMPTS):
        assert leased(d, f"t{attempt}")[2] == "poison"
        time.sleep(0.1)
        d.sweep()
    results = {r.request_id: r for r in batch.gather(timeout=5)}
    assert results["poison"].status.value == "infra_error"
    assert f"lost its worker {MAX_ATTEMPTS} times" in results["poison"].message
    assert results["fine"].status.value == "wrong"  # visits no stage: its admission's verdict


def test_every_lease_lost_by_an_unfinished_request_is_counted_at_its_stage_and_a_late_one_is_not(settings, reward_client):
    d = Dispatch(settings.with_(lease_s=0.05))
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("poison", {"times": [1, 0]})
    for attempt in range(MAX_ATTEMPTS):
        leased(d, f"t{attempt}")
        time.sleep(0.1)
        d.sweep()
    result = '{"request_id":"poison","batch_id":"%s","status":"ok","reward":1.0}' % batch.id
    assert d.run(complete_call(batch.id, "poison", "t0", result)) == "lost"
    assert counters.read(d.redis, settings.namespace).lease_recovered == {COMPILE: MAX_ATTEMPTS}


def test_a_worker_heartbeat_keeps_its_lease_while_the_stage_runs_longer_than_the_lease(settings, reward_client, start_workers):
    start_workers(COMPILE)
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("long", {"times": [settings.lease_s * 1.5, 0]})
    [result] = batch.gather(timeout=20)
    assert result.ok and len(result.stages) == 1
    attempts = redis.Redis.from_url(settings.redis_url).hget(f"{settings.namespace}:b:{batch.id}:att", "long")
    assert attempts is None, "the lease lapsed although the worker was alive"


def test_a_busy_workers_beat_renews_its_lease_and_notes_it_seen_on_its_roster(settings, reward_client):
    d = Dispatch(settings)
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", {"times": [1, 0]})
    leased(d, "t1", worker="w")
    lease_before = d.redis.zscore(d.keys.leases, "t1")
    assert d.heartbeat("t1", batch.id, COMPILE, "w", 1700000000.25) == "open"
    assert d.redis.zscore(d.keys.leases, "t1") > lease_before
    assert d.redis.hget(d.keys.queue(COMPILE, QueuePart.seen), "w") == repr(1700000000.25)


def test_a_request_whose_wake_up_token_was_lost_is_still_served(settings, reward_client, start_workers):
    start_workers(COMPILE)
    batch = reward_client.open_batch("t", "synthetic", 1)
    # enqueue without publishing the token, as if the client died in between
    call = submit_call(settings, registry.get("synthetic"), batch.id, "orphan", {"times": [0.01, 0]}, None, time.time())
    assert Dispatch(settings).run(call) == ["queued"]
    [result] = batch.gather(timeout=settings.lease_s * 3 + 5)
    assert result.ok


def test_the_lease_of_a_worker_its_backend_saw_die_lapses_at_once(settings, reward_client):
    from planner.backends.common import Lives

    d = Dispatch(settings)  # lease_s 10 s: only the backend's word can give it back this soon
    batch = reward_client.open_batch("t", "synthetic", 2)
    batch.submit("held", {"times": [1, 0]})
    batch.submit("next", {"times": [1, 0]})
    assert leased(d, "t1", worker="dead")[2] == "held"
    lives = Lives(redis.Redis.from_url(settings.redis_url), settings.namespace, "local")
    lives.retired("dead", COMPILE, time.time())
    assert d.sweep() == [COMPILE]
    assert [p.id for p in d.inspect([COMPILE]).stages[COMPILE].pending] == ["held", "next"]
    assert lives.lapse("dead", COMPILE) is False  # given back once: the worker holds nothing now


def test_a_worker_its_backend_saw_die_leaves_its_stages_roster_at_once(settings):
    from planner.backends.common import Lives

    d = Dispatch(settings)
    seen, leaving = d.keys.queue(COMPILE, QueuePart.seen), d.keys.queue(COMPILE, QueuePart.leaving)
    d.redis.hset(seen, mapping={"dead": repr(time.time()), "alive": repr(time.time())})
    d.redis.hset(leaving, "dead", repr(time.time()))
    Lives(redis.Redis.from_url(settings.redis_url), settings.namespace, "local").lapse("dead", COMPILE)
    assert not d.redis.hexists(leaving, "dead")
    assert [w.name for w in d.inspect([COMPILE]).stages[COMPILE].workers] == ["alive"]


def test_a_gone_worker_that_held_nothing_changes_no_lease(settings, reward_client):
    from planner.backends.common import Lives

    d = Dispatch(settings)
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("held", {"times": [1, 0]})
    assert leased(d, "t1", worker="alive")[2] == "held"
    lives = Lives(redis.Redis.from_url(settings.redis_url), settings.namespace, "local")
    assert lives.lapse("idle", COMPILE) is False
    assert d.sweep() == []
    assert [r.id for r in d.inspect([COMPILE]).stages[COMPILE].running] == ["held"]


def test_a_local_worker_killed_hard_gives_its_request_back_once_its_backend_sees_it_gone(settings, reward_client):
    import os
    import signal

    from planner.backends import WorkerState
    from planner.backends.local import LocalBackend
    from tests.support.waiting import eventually

    backend = LocalBackend(settings)
    try:
        backend.spawn(COMPILE, 1)
        eventually(lambda: any(w.state is WorkerState.RUNNING for w in backend.list()), 60, what="the worker")
        batch = reward_client.open_batch("t", "synthetic", 1)
        batch.submit("long", {"times": [30.0, 0]})
        victim = running_on(settings, "long")
        os.kill(int(next(w.ref for w in backend.list() if w.name == victim)), signal.SIGKILL)
        eventually(lambda: backend.list() == [], 10, what="the backend to see the worker gone")
        d = Dispatch(settings)
        assert d.sweep() == [COMPILE]  # lease_s is 10 s: the lease lapsed because the backend said so
        assert [p.id for p in d.inspect([COMPILE]).stages[COMPILE].pending] == ["long"]
    finally:
        backend.retire([w.name for w in backend.list()])
        backend.close()
