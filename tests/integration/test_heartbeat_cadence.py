"""A stage worker's heartbeat: slow while idle (only the roster's `seen` to keep fresh), slower still on an idle
farm (nothing to sweep), the busy cadence at once when a request is held."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from farm.celery_app import make_app
from farm.config import Settings
from farm.protocol import roster
from farm.protocol.dispatch import Preempted
from farm.protocol.keys import Keys, QueuePart
from workers.sandbox import live
from workers.stage import Cadence, Hold, StageWorker, beat_intervals

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
QUEUE = "synthetic.compile"


@pytest.fixture
def worker(redis_url, namespace, tmp_path):
    settings = Settings(redis_url=redis_url, namespace=namespace, lease_s=9.0, data_dir=str(tmp_path))
    w = StageWorker(make_app(settings), settings, QUEUE, "beater")
    renewed = threading.Event()
    w.dispatch.heartbeat = lambda token, batch, *beat: renewed.set() or "open"
    yield w, renewed
    w.stop()
    if w.hold is not None:  # its heartbeat waits on the hold's notices (30 s in some tests): one wakes it now
        w.dispatch.redis.lpush(w.keys.notice(w.hold.token), "1")
    w._thread.join(timeout=5)


def test_an_idle_worker_beats_every_third_of_a_lease_not_every_half_second(worker):
    w, _ = worker
    seen = []
    w.start()
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        value = w.dispatch.redis.hget(w.keys.queue(QUEUE, QueuePart.seen), "beater")
        if value is not None and value not in seen:
            seen.append(value)
        time.sleep(0.05)
    assert 1 <= len(seen) <= 2  # at 3 s; the half-second cadence would have beaten 7 times


def test_a_request_taken_during_the_idle_wait_is_renewed_within_the_busy_period(worker):
    w, renewed = worker
    w.start()
    time.sleep(0.2)  # the heartbeat is in its 3 s idle wait
    taken = time.monotonic()
    w.take(Hold("token", "batch"))
    assert renewed.wait(2.0)
    assert time.monotonic() - taken < beat_intervals(9.0)[0] + 0.3


def test_a_request_served_within_the_busy_period_of_its_pick_costs_no_beat(worker):
    w, renewed = worker
    w.start()
    time.sleep(1.0)  # the last beat is older than the busy period: only the pick, just taken, counts
    w.take(Hold("token", "batch"))
    time.sleep(0.1)
    w.hold = None
    assert not renewed.wait(1.0)


def test_the_idle_period_never_exceeds_a_third_of_the_lease_nor_undercuts_the_busy_one():
    assert beat_intervals(9.0) == (0.5, 3.0, 9.0)
    assert beat_intervals(0.9) == pytest.approx((0.3, 0.3, 0.9))


def test_an_idle_farms_beats_keep_three_within_the_rosters_freshness():
    assert beat_intervals(9.0).quiet * 3 == roster.fresh_s(9.0)


def beat_times(w, seconds: float, monkeypatch) -> list[float]:
    """When the worker's idle beats went, over `seconds` from its start."""
    times, real = [], roster.beat

    def counted(*args):
        times.append(time.monotonic())
        return real(*args)

    monkeypatch.setattr(roster, "beat", counted)
    w.start()
    time.sleep(seconds)
    return list(times)


@pytest.fixture
def slow_worker(redis_url, namespace, tmp_path):
    """A worker with a 3 s lease: beats every second on a farm at work, every 3 s on an idle one."""
    settings = Settings(redis_url=redis_url, namespace=namespace, lease_s=3.0, data_dir=str(tmp_path))
    w = StageWorker(make_app(settings), settings, QUEUE, "slow-beater")
    yield w
    w.stop()
    w._thread.join(timeout=5)


def test_an_idle_worker_on_an_idle_farm_beats_once_a_lease(slow_worker, monkeypatch):
    times = beat_times(slow_worker, 6.5, monkeypatch)  # beats at 1 s (a farm at work, until a beat finds it idle), 4 s
    assert 1 <= len(times) <= 3  # the third-of-a-lease cadence would have beaten 6 times


def test_an_idle_worker_beats_every_third_of_a_lease_while_a_batch_is_open(slow_worker, monkeypatch):
    slow_worker.dispatch.redis.zadd(slow_worker.keys.seen, {"a-batch": time.time()})
    slow_worker.dispatch.sweep = lambda: []  # the open batch is a stand-in: nothing to abandon
    times = beat_times(slow_worker, 6.5, monkeypatch)
    assert len(times) >= 4  # 6 at 1 s each (a loaded machine may slip one); the quiet cadence beats at 1 and 4 s


@pytest.fixture
def farm_redis(redis_url, namespace):
    client = redis.Redis.from_url(redis_url)
    yield client, Keys(namespace)
    client.close()


def test_an_idle_beat_on_an_idle_farm_finds_nothing_to_sweep(farm_redis):
    r, keys = farm_redis
    assert roster.beat(r, keys, QUEUE, "beater", time.time()) == (False, 0)


def test_an_idle_beat_counts_the_batches_waiting_at_its_stage(farm_redis):
    r, keys = farm_redis
    r.zadd(keys.queue(QUEUE, QueuePart.ebf), {"b1": 1.0, "b2": 2.0})
    assert roster.beat(r, keys, QUEUE, "beater", time.time()).waiting == 2


def test_an_idle_beat_finds_something_to_sweep_while_a_lease_is_held(farm_redis):
    r, keys = farm_redis
    r.zadd(keys.leases, {"a-token": time.time() + 60})
    assert roster.beat(r, keys, QUEUE, "beater", time.time()).sweepable is True


def test_an_idle_beat_finds_something_to_sweep_while_a_batch_is_open(farm_redis):
    r, keys = farm_redis
    r.zadd(keys.seen, {"a-batch": time.time()})
    assert roster.beat(r, keys, QUEUE, "beater", time.time()).sweepable is True


def test_an_idle_worker_on_an_idle_farm_does_not_sweep(worker):
    w, _ = worker
    swept = []
    w.dispatch.sweep = lambda: swept.append(True) or []
    w.start()
    time.sleep(3.5)  # the first beat, a third of the 9 s lease in, is when it would sweep
    assert roster.beat(w.dispatch.redis, w.keys, QUEUE, "beater", time.time()).sweepable is False and swept == []


def test_a_beat_that_finds_the_batch_cancelled_stops_the_stage_and_kills_its_sandboxed_runs(worker):
    w, _ = worker
    w.dispatch.heartbeat = lambda token, batch, *beat: "cancelled"
    hold = Hold("token", "batch")
    killed = threading.Event()
    w.start()
    w.take(hold)
    with live.scope(hold.runs), pytest.raises(live.RunsEnded):
        with live.tracked(killed.set):  # what would kill a run's programs
            assert killed.wait(beat_intervals(9.0)[0] + 2.0)
    assert hold.stop.is_set()


def test_a_notice_for_the_held_lease_makes_the_beat_come_at_once_not_at_the_busy_period(worker, monkeypatch):
    w, renewed = worker
    # only a notice wakes it
    monkeypatch.setattr("workers.stage.beat_intervals", lambda lease_s: Cadence(30.0, 30.0, 30.0))
    w.dispatch.heartbeat = lambda token, batch, *beat: renewed.set() or "cancelled"
    hold = Hold("token", "batch")
    w.start()
    w.take(hold)
    time.sleep(0.3)  # the heartbeat waits on its notices
    assert not renewed.is_set()
    w.dispatch.redis.lpush(w.keys.notice("token"), "1")  # what a cancel or a stop leaves (common.lua's `tell`)
    assert renewed.wait(5.0) and hold.stop.is_set()


def test_a_busy_worker_that_pops_its_stages_notice_runs_the_preemption_decision(worker, monkeypatch):
    w, _ = worker
    monkeypatch.setattr("workers.stage.beat_intervals", lambda lease_s: Cadence(30.0, 30.0, 30.0))
    decided = threading.Event()
    w.dispatch.preempt = lambda queue, kind, kind_queues: decided.set() or Preempted([], [])
    w.start()
    w.take(Hold("token", "batch"))
    time.sleep(0.3)
    w.dispatch.redis.lpush(w.keys.queue(QUEUE, QueuePart.notice), "1")  # a batch began to wait (begun_waiting)
    assert decided.wait(5.0)
    assert not w.dispatch.redis.exists(w.keys.queue(QUEUE, QueuePart.notice))


def test_with_another_broker_the_worker_sends_the_wake_up_token_of_each_request_a_stop_put_back(worker, monkeypatch):
    w, _ = worker
    monkeypatch.setattr("workers.stage.beat_intervals", lambda lease_s: Cadence(30.0, 30.0, 30.0))
    w.dispatch.lua_tokens = False  # the broker is not the farm's Redis: the script could not publish the token
    w.dispatch.preempt = lambda queue, kind, kind_queues: Preempted(["other"], [QUEUE])
    sent = []
    w.tokens.send = lambda queue, limit: sent.append(queue)
    w.start()
    w.take(Hold("token", "batch"))
    time.sleep(0.3)
    w.dispatch.redis.lpush(w.keys.queue(QUEUE, QueuePart.notice), "1")
    deadline = time.monotonic() + 5.0
    while not sent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sent == [QUEUE]
