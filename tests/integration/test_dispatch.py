"""Exact EBF dispatch with real workers: order across batches, deadline changes, fcfs, stage routing."""

from __future__ import annotations

import json
import time

import pytest
import redis

from farm.knobs import Knobs, redis_key
from farm.protocol.dispatch import Dispatch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

COMPILE = "synthetic.compile"


def wait_running(settings, request_id: str, timeout: float = 10.0):
    d = Dispatch(settings)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = d.inspect([COMPILE]).stages[COMPILE].running
            if any(r.id == request_id for r in running):
                return running
            time.sleep(0.02)
        raise TimeoutError(f"{request_id} never ran")
    finally:
        d.close()


def start_order(results, stage: str = "compile") -> list[str]:
    timed = [(next(s.started_at for s in r.stages if s.name == stage), r.request_id) for r in results]
    return [rid for _, rid in sorted(timed)]


def busy_worker(client, settings, seconds: float = 0.4):
    """Keep the only worker busy so the requests that follow queue up behind it."""
    blocker = client.open_batch("blocker", "synthetic", 1)
    blocker.submit("blocker", {"times": [seconds, 0]})
    wait_running(settings, "blocker")
    return blocker


def test_a_later_batch_with_an_earlier_deadline_is_served_first(settings, reward_client, start_workers):
    start_workers(COMPILE)
    busy_worker(reward_client, settings)
    early = reward_client.open_batch("early", "synthetic", 2)
    late = reward_client.open_batch("late", "synthetic", 2)
    assert late.set_estimate(early.progress().key - 60)
    for i in range(2):
        early.submit(f"early{i}", {"times": [0.01, 0]})
    for i in range(2):
        late.submit(f"late{i}", {"times": [0.01, 0]})
    results = early.gather(timeout=20) + late.gather(timeout=20)
    assert start_order(results) == ["late0", "late1", "early0", "early1"]


def test_batches_are_served_in_open_order_until_a_deadline_is_set(settings, reward_client, start_workers):
    start_workers(COMPILE)
    busy_worker(reward_client, settings)
    first = reward_client.open_batch("first", "synthetic", 2)
    second = reward_client.open_batch("second", "synthetic", 2)
    second.submit("second0", {"times": [0.01, 0]})
    first.submit("first0", {"times": [0.01, 0]})
    second.submit("second1", {"times": [0.01, 0]})
    first.submit("first1", {"times": [0.01, 0]})
    results = first.gather(timeout=20) + second.gather(timeout=20)
    assert start_order(results) == ["first0", "first1", "second0", "second1"]


def test_changing_a_deadline_reorders_requests_already_queued(settings, reward_client, start_workers):
    start_workers(COMPILE)
    busy_worker(reward_client, settings, seconds=0.6)
    first = reward_client.open_batch("first", "synthetic", 2)
    second = reward_client.open_batch("second", "synthetic", 2)
    for b in (first, second):
        for i in range(2):
            b.submit(f"{b.task}{i}", {"times": [0.01, 0]})
    queued = Dispatch(settings).inspect([COMPILE]).stages[COMPILE].pending
    assert [p.id for p in queued] == ["first0", "first1", "second0", "second1"]
    assert reward_client.set_estimate(first.id, second.progress().key + 60)
    queued = Dispatch(settings).inspect([COMPILE]).stages[COMPILE].pending
    assert [p.id for p in queued] == ["second0", "second1", "first0", "first1"]
    results = first.gather(timeout=20) + second.gather(timeout=20)
    assert start_order(results) == ["second0", "second1", "first0", "first1"]
    history = [json.loads(e["e"]) for _, e in redis.Redis.from_url(settings.redis_url, decode_responses=True)
               .xrange(f"{settings.namespace}:events")]
    assert {"kind": "batch_deadline", "batch": first.id, "estimated_at": second.progress().key + 60} in history


def test_fcfs_mode_serves_strictly_in_enqueue_order_across_batches(settings, reward_client, start_workers):
    r = redis.Redis.from_url(settings.redis_url)
    r.set(redis_key(settings.namespace), json.dumps(Knobs(scheduler="fcfs").to_dict()))
    start_workers(COMPILE)
    busy_worker(reward_client, settings)
    first = reward_client.open_batch("first", "synthetic", 2)
    second = reward_client.open_batch("second", "synthetic", 2)
    second.set_estimate(first.progress().key - 60)  # would win under EBF
    first.submit("first0", {"times": [0.01, 0]})
    second.submit("second0", {"times": [0.01, 0]})
    first.submit("first1", {"times": [0.01, 0]})
    second.submit("second1", {"times": [0.01, 0]})
    results = first.gather(timeout=20) + second.gather(timeout=20)
    assert start_order(results) == ["first0", "second0", "first1", "second1"]


def test_a_request_moves_through_the_stages_it_visits_and_skips_the_others(settings, reward_client, start_workers):
    start_workers(COMPILE)
    start_workers("synthetic.execute")
    batch = reward_client.open_batch("t", "synthetic", 2)
    batch.submit("both", {"times": [0.01, 0.01], "reward": 0.5})
    batch.submit("execute-only", {"times": [0, 0.01]})
    by_id = {r.request_id: r for r in batch.gather(timeout=20)}
    assert [s.name for s in by_id["both"].stages] == ["compile", "execute"]
    assert by_id["both"].reward == 0.5 and by_id["both"].ok
    assert [s.worker for s in by_id["both"].stages] == ["synthetic.compile-w0", "synthetic.execute-w1"]
    assert [s.name for s in by_id["execute-only"].stages] == ["execute"]


def test_a_stage_timeout_from_the_live_knobs_reports_timeout_at_that_stage(settings, reward_client, start_workers):
    r = redis.Redis.from_url(settings.redis_url)
    r.set(redis_key(settings.namespace), json.dumps(Knobs().with_stage(COMPILE, timeout_s=0.2).to_dict()))
    start_workers(COMPILE)
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("slow", {"times": [5, 0]})
    [result] = batch.gather(timeout=10)
    assert result.status.value == "timeout" and result.stage == "compile"
    assert result.stages[0].seconds < 1.0
