"""Abandoned batches against real Redis and PostgreSQL: a batch whose trainer went silent expires, its queued
requests get results, the planner stops planning for it, the history says it was abandoned, and a trainer that
comes back is told so."""

from __future__ import annotations

import asyncio
import json
import random
import time

import pytest
import redis
from sqlalchemy import select

from farm.client.sync import RewardClient
from farm.errors import BatchAbandoned
from farm.events import decode, stream_key
from farm.knobs import Knobs, redis_key
from farm.protocol.calls import finish_call
from farm.protocol.dispatch import Dispatch
from farm.results import Result, Status
from farm.store.models import Batch
from farm.store.recorder import Recorder
from planner.policy.decide import decide
from planner.runtime.live import LiveFarm
from planner.runtime.view import decision_workers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

COMPILE = "synthetic.compile"
QUEUED = {"times": [5, 0]}  # no worker runs in these tests: it waits in the compile queue
NOTHING = {"times": [0, 0]}  # visits no stage: finishes as it arrives


def set_knobs(settings, knobs: Knobs) -> None:
    r = redis.Redis.from_url(settings.redis_url)
    r.set(redis_key(settings.namespace), json.dumps(knobs.to_dict()))
    r.close()


@pytest.fixture
def silent_after(settings):
    """set(seconds): the farm abandons a batch silent that long."""
    return lambda seconds: set_knobs(settings, Knobs(abandon_after_s=seconds))


@pytest.fixture
def trainer(settings):
    """A trainer's client without the keep-alive: only its own calls are signs of life."""
    client = RewardClient(settings, keep_alive=False)
    yield client
    client.close()


@pytest.fixture
def sweeper(settings):
    """What a worker's heartbeat thread runs: give lapsed leases back, abandon silent batches."""
    d = Dispatch(settings)
    yield d
    d.close()


def history(settings, batch_id: str) -> list[dict]:
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    events = [decode(e) for _, e in r.xrange(stream_key(settings.namespace))]
    r.close()
    return [e for e in events if e.get("batch") == batch_id]


def results(settings, batch_id: str) -> dict[str, dict]:
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    raw = r.hgetall(f"{settings.namespace}:b:{batch_id}:res")
    r.close()
    return {rid: json.loads(v) for rid, v in raw.items()}


def test_a_silent_batch_is_abandoned_after_the_knobs_time_and_its_queued_requests_get_results(
        settings, silent_after, trainer, sweeper):
    silent_after(0.5)
    batch = trainer.open_batch("crashed", "synthetic", 4)
    batch.submit_many([("q0", QUEUED), ("q1", QUEUED), ("done", NOTHING)])
    sweeper.sweep()
    assert batch.progress().state == "open"  # not silent long enough yet
    time.sleep(0.6)
    sweeper.sweep()
    assert batch.progress().state == "abandoned"
    assert sweeper.inspect([COMPILE]).stages[COMPILE].pending == ()
    got = results(settings, batch.id)
    assert {rid: r["status"] for rid, r in got.items()} == {"q0": "cancelled", "q1": "cancelled", "done": "wrong"}
    assert "batch abandoned: no submit, result wait or heartbeat from its trainer" in got["q0"]["message"]
    kinds = [e["kind"] for e in history(settings, batch.id)]
    assert kinds.count("batch_abandoned") == 1 and "batch_cancelled" not in kinds


def test_a_batch_whose_trainer_submits_heartbeats_or_waits_is_not_abandoned(settings, silent_after, trainer, sweeper):
    silent_after(2.0)
    batch = trainer.open_batch("alive", "synthetic", 3)

    def after_a_while():
        time.sleep(1.2)
        sweeper.sweep()
        assert batch.progress().state == "open"

    after_a_while()
    batch.submit("q0", QUEUED)
    after_a_while()  # 2.4 s since it opened
    assert batch.heartbeat() == "open"
    after_a_while()  # 2.4 s since the submit
    with pytest.raises(TimeoutError):  # it waits 1.5 s, touching the batch after 1 s (half the lease here)
        batch.gather(timeout=1.5)
    time.sleep(0.5)
    sweeper.sweep()
    assert batch.progress().state == "open"  # 3.2 s since the heartbeat


def test_a_zero_knob_never_abandons(settings, silent_after, trainer, sweeper):
    silent_after(0)
    batch = trainer.open_batch("patient", "synthetic", 2)
    batch.submit("q0", QUEUED)
    time.sleep(0.3)
    sweeper.sweep()
    assert batch.progress().state == "open"


def test_a_trainer_coming_back_to_its_abandoned_batch_is_told_so(settings, silent_after, trainer, sweeper):
    silent_after(0.3)
    batch = trainer.open_batch("paused", "synthetic", 3)
    batch.submit("q0", QUEUED)
    time.sleep(0.4)
    sweeper.sweep()
    with pytest.raises(BatchAbandoned, match=r"abandoned by the farm.*abandon_after_s is 0\.3 s") as submitted:
        batch.submit("q1", QUEUED)
    assert submitted.value.after_s == 0.3 and submitted.value.silent_s >= 0
    with pytest.raises(BatchAbandoned, match="no submit, result wait or heartbeat"):
        batch.heartbeat()
    with pytest.raises(BatchAbandoned):
        batch.gather(timeout=5)  # at once: the results are in and the stream says why
    assert batch.submit("q0", QUEUED) == "duplicate"  # what it had sent is still known
    assert batch.cancel() == "abandoned"
    assert trainer.batch(batch.id).progress().state == "abandoned"


def test_several_sweepers_abandon_a_batch_once(settings, silent_after, trainer):
    silent_after(0.3)
    batch = trainer.open_batch("once", "synthetic", 2)
    batch.submit("q0", QUEUED)
    time.sleep(0.4)
    sweepers = [Dispatch(settings) for _ in range(3)]
    for d in sweepers:
        d.sweep()
        d.close()
    kinds = [e["kind"] for e in history(settings, batch.id)]
    assert kinds.count("batch_abandoned") == 1 and kinds.count("request_done") == 1
    r = redis.Redis.from_url(settings.redis_url)
    assert r.zscore(f"{settings.namespace}:seen", batch.id) is None  # it left the index
    r.close()


def test_a_request_running_when_its_batch_is_abandoned_is_stopped_and_its_late_result_discarded(
        settings, silent_after, trainer, sweeper):
    silent_after(0.3)
    batch = trainer.open_batch("running", "synthetic", 2)
    batch.submit("r0", QUEUED)
    picked = sweeper.pick(COMPILE, "w", "ebf", "lease-1")
    assert picked[2] == "r0"
    time.sleep(0.4)
    assert sweeper.heartbeat("lease-1", batch.id) == "open"  # a worker's lease is no sign of the trainer's life
    sweeper.sweep()
    assert sweeper.heartbeat("lease-1", batch.id) == "abandoned"  # the stage is told to stop
    assert results(settings, batch.id)["r0"]["status"] == "cancelled"
    late = Result("r0", batch.id, Status.OK, 1.0, finished_at=time.time())
    assert sweeper.run(finish_call(late, "lease-1", "w", COMPILE, '{"kind":"stage_done"}')) == "discarded"
    assert results(settings, batch.id)["r0"]["status"] == "cancelled"


def test_a_client_keeps_the_batches_it_holds_alive_until_it_closes(settings, silent_after, sweeper):
    silent_after(0.8)  # the keep-alive touches every 0.2 s
    client = RewardClient(settings)
    batch = client.open_batch("hinted", "synthetic", 2)  # the hint: rollout started, no request yet
    try:
        time.sleep(1.5)
        sweeper.sweep()
        assert batch.progress().state == "open"
    finally:
        client.close()  # the trainer is gone
    time.sleep(1.0)
    sweeper.sweep()
    assert sweeper.progress(batch.id).state == "abandoned"


def test_the_planner_plans_for_a_silent_batch_no_more_even_before_a_sweep_abandons_it(
        settings, engine, silent_after, trainer, sweeper):
    silent_after(0.5)
    batch = trainer.open_batch("planned", "synthetic", 8)
    batch.submit_many([(f"q{i}", QUEUED) for i in range(4)])
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    farm = LiveFarm(settings, r, engine, startup_s=1.0)
    knobs = sweeper.knobs()

    def planned(now: float):
        views = [v for v in farm.read(now, knobs, []) if v.pipeline == "synthetic"]
        snapshot = views[0].snapshot if views else None
        batches = [b.id for b in snapshot.batches] if snapshot else []
        workers = decision_workers(decide(snapshot, knobs, random.Random(0)), views[0].stages) if snapshot else {}
        return batches, sum(workers.values())

    assert planned(time.time())[0] == [batch.id] and planned(time.time())[1] > 0
    time.sleep(0.6)
    assert planned(time.time()) == ([], 0)  # still open in Redis, but past its trainer's allowed silence
    sweeper.sweep()
    assert batch.progress().state == "abandoned"
    assert planned(time.time()) == ([], 0)
    r.close()


def test_the_history_records_an_abandoned_batch_apart_from_a_cancelled_one(settings, engine, silent_after, trainer,
                                                                           sweeper):
    silent_after(0.3)
    abandoned = trainer.open_batch("gone", "synthetic", 2)
    abandoned.submit("q0", QUEUED)
    cancelled = trainer.open_batch("quit", "synthetic", 2)
    cancelled.submit("q0", QUEUED)
    cancelled.cancel()
    time.sleep(0.4)
    sweeper.sweep()
    Recorder(settings, engine).run_once()
    with engine.connect() as conn:
        rows = {b.id: b for b in conn.execute(select(Batch).where(Batch.id.in_([abandoned.id, cancelled.id])))}
    gone, quit_ = rows[abandoned.id], rows[cancelled.id]
    assert gone.abandoned_at is not None and gone.cancelled_at == gone.abandoned_at and gone.completed_at is None
    assert quit_.cancelled_at is not None and quit_.abandoned_at is None


def test_an_asyncio_trainer_is_kept_alive_and_told_when_its_batch_was_abandoned(settings, silent_after, sweeper):
    from farm.client.aio import AsyncRewardClient

    silent_after(0.6)

    async def step():
        async with AsyncRewardClient(settings) as farm:
            kept = await farm.open_batch("kept", "synthetic", 2)
            silent = AsyncRewardClient(settings, keep_alive=False)
            left = await silent.open_batch("left", "synthetic", 2)
            await left.submit("q0", QUEUED)
            await asyncio.sleep(0.8)
            sweeper.sweep()
            assert await kept.heartbeat() == "open"
            with pytest.raises(BatchAbandoned, match="abandoned by the farm"):
                await left.heartbeat()
            with pytest.raises(BatchAbandoned):
                await left.gather(timeout=5)
            await silent.close()

    asyncio.run(step())
