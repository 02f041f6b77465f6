"""The recorder drains the history stream into PostgreSQL: exactly once, in bulk, skipping bad entries."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
import redis
from sqlalchemy import func, select

from farm.store.models import Batch, Request, RequestStage, Task, Worker
from farm.store.recorder import Recorder, next_id

pytestmark = pytest.mark.integration


def _batch(engine, batch_id):
    with engine.connect() as conn:
        return conn.execute(select(Batch).where(Batch.id == batch_id)).one()


def _count(engine, model):
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(model)).scalar_one()


def test_a_completed_batch_gets_its_earliest_completion_and_extra_delay(settings, engine, emit):
    # r=10 then 10 s compile + 3 s execute -> 23; r=5 with 1 s compile -> 6; T = 100 + 23
    emit.batch("b1", "t1", 100.0, [[10.0, 10.0, 3.0], [5.0, 1.0, 0.0]], completed_at=127.5)
    Recorder(settings, engine).run_once()
    batch = _batch(engine, "b1")
    assert (batch.task, batch.size, batch.opened_at, batch.first_arrival_at) == ("t1", 2, 100.0, 105.0)
    assert batch.earliest_at == pytest.approx(123.0)
    assert batch.extra_delay_s == pytest.approx(4.5)


def test_a_batch_finishing_before_its_recorded_T_has_zero_extra_delay(settings, engine, emit):
    emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 0.0]], completed_at=102.9)  # clocks disagree by 0.1 s
    Recorder(settings, engine).run_once()
    assert _batch(engine, "b1").extra_delay_s == 0.0


def test_a_request_that_visits_no_stage_counts_toward_T_on_arrival(settings, engine, emit):
    emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 0.0], [30.0, 0.0, 0.0]], completed_at=131.0)
    Recorder(settings, engine).run_once()
    batch = _batch(engine, "b1")
    assert batch.earliest_at == pytest.approx(130.0)
    assert batch.extra_delay_s == pytest.approx(1.0)


def test_a_stage_time_recorded_after_batch_completed_still_counts_toward_T(settings, engine, emit):
    recorder = Recorder(settings, engine)
    emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=1, opened_at=100.0)
    emit("request_arrived", batch="b1", request="r0", arrived_at=101.0, group="g", stages=["compile"])
    emit("batch_completed", batch="b1", completed_at=120.0)
    recorder.run_once()
    assert _batch(engine, "b1").earliest_at == pytest.approx(101.0)
    emit("stage_done", batch="b1", request="r0", stage="compile", queued_at=101.0, started_at=102.0,
         finished_at=117.0, status="ok", worker="w1")
    recorder.run_once()
    batch = _batch(engine, "b1")
    assert batch.earliest_at == pytest.approx(116.0)
    assert batch.extra_delay_s == pytest.approx(4.0)


def test_a_bare_stage_name_is_recorded_under_its_queue(settings, engine, emit):
    emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=1, opened_at=100.0)
    Recorder(settings, engine).run_once()
    emit("stage_done", batch="b1", request="r0", stage="execute", queued_at=1.0, started_at=2.0,
         finished_at=3.0, status="ok", worker="w1")
    Recorder(settings, engine).run_once()
    with engine.connect() as conn:
        assert conn.execute(select(RequestStage.stage)).scalars().all() == ["synthetic.execute"]


def test_every_field_of_a_request_and_its_stages_is_recorded(settings, engine, emit):
    emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=1, opened_at=100.0)
    emit("request_arrived", batch="b1", request="r0", arrived_at=101.0, group="g7", stages=["compile"])
    emit("stage_done", batch="b1", request="r0", stage="synthetic.compile", queued_at=101.5, started_at=102.0,
         finished_at=122.0, status="timeout", worker="w9")
    emit("request_done", batch="b1", request="r0", status="timeout", reward=0.0, outcome="compile_failed",
         finished_at=122.0, message="killed at 20 s")
    Recorder(settings, engine).run_once()
    with engine.connect() as conn:
        req = conn.execute(select(Request)).one()
        stage = conn.execute(select(RequestStage)).one()
        task = conn.execute(select(Task)).one()
    assert (req.group, req.arrived_at, req.stages, req.status, req.reward, req.outcome, req.finished_at, req.message) == (
        "g7", 101.0, ["compile"], "timeout", 0.0, "compile_failed", 122.0, "killed at 20 s")
    assert (stage.queued_at, stage.started_at, stage.finished_at, stage.status, stage.worker) == (
        101.5, 102.0, 122.0, "timeout", "w9")
    assert (task.name, task.pipeline) == ("t1", "synthetic")


def test_the_planner_deadline_and_a_cancellation_are_recorded(settings, engine, emit):
    emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=4, opened_at=100.0)
    emit("batch_deadline", batch="b1", estimated_at=180.0)
    emit("batch_deadline", batch="b1", estimated_at=175.0)
    emit("batch_cancelled", batch="b1", cancelled_at=150.0)
    Recorder(settings, engine).run_once()
    batch = _batch(engine, "b1")
    assert (batch.estimated_at, batch.cancelled_at, batch.completed_at) == (175.0, 150.0, None)


def test_bad_entries_are_logged_and_skipped_and_the_rest_recorded(settings, engine, emit, caplog):
    emit.raw({"e": "not json"})
    emit.raw({"other": "field"})
    emit.raw({"e": json.dumps({"kind": "nonsense", "batch": "b1"})})
    emit.raw({"e": json.dumps({"kind": "batch_completed", "batch": "b1"})})
    emit.raw({"e": json.dumps({"kind": "batch_completed", "batch": "b1", "completed_at": "soon"})})
    emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=1, opened_at=100.0)
    recorder = Recorder(settings, engine)
    with caplog.at_level(logging.WARNING, logger="farm.store.recorder"):
        assert recorder.run_once() == 6
    assert recorder.skipped == 5
    assert "unknown event kind 'nonsense'" in caplog.text
    assert "lacks ['completed_at']" in caplog.text
    assert _batch(engine, "b1").size == 1


def test_an_entry_the_database_refuses_is_skipped_alone(settings, engine, emit, caplog):
    emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=1, opened_at=100.0)
    emit("batch_opened", batch="b2", task="t1", pipeline="synthetic", size=2**40, opened_at=100.0)  # overflows
    emit("batch_opened", batch="b3", task="t1", pipeline="synthetic", size=3, opened_at=100.0)
    recorder = Recorder(settings, engine)
    with caplog.at_level(logging.WARNING, logger="farm.store.recorder"):
        assert recorder.run_once() == 3
    assert recorder.skipped == 1
    assert "the store refused it" in caplog.text
    with engine.connect() as conn:
        assert dict(conn.execute(select(Batch.id, Batch.size)).all()) == {"b1": 1, "b3": 3}


def test_a_restarted_recorder_neither_loses_nor_duplicates(settings, engine, emit):
    emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 1.0]] * 3, completed_at=110.0)
    first = Recorder(settings, engine, trim=False)  # keep the entries: a restart must not take them again
    assert first.run_once() == 14
    emit.batch("b2", "t1", 200.0, [[1.0, 2.0, 1.0]] * 2, completed_at=210.0)
    second = Recorder(settings, engine, trim=False)
    assert second.run_once() == 10
    assert second.run_once() == 0
    assert _count(engine, Request) == 5
    assert _count(engine, RequestStage) == 10


def test_replaying_the_same_events_changes_nothing(settings, engine, emit):
    emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 1.0], [2.0, 3.0, 0.0]], completed_at=110.0)
    Recorder(settings, engine).run_once()
    before = _batch(engine, "b1")
    emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 1.0], [2.0, 3.0, 0.0]], completed_at=110.0)
    Recorder(settings, engine).run_once()
    assert _batch(engine, "b1") == before
    assert (_count(engine, Request), _count(engine, RequestStage), _count(engine, Task)) == (2, 3, 1)


def test_what_was_recorded_is_trimmed_from_the_stream(settings, engine, emit, redis_url):
    emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 1.0]] * 4, completed_at=110.0)
    client = redis.Redis.from_url(redis_url)
    assert client.xlen(emit.key) == 18
    Recorder(settings, engine, chunk=5).run_once()
    assert client.xlen(emit.key) == 0
    client.close()
    assert _count(engine, Request) == 4


def test_many_chunks_record_everything(settings, engine, emit):
    for b in range(5):
        emit.batch(f"b{b}", "t1", 100.0 * b, [[1.0, 2.0, 1.0]] * 3, completed_at=100.0 * b + 10)
    assert Recorder(settings, engine, chunk=7).run_once() == 70
    assert _count(engine, Request) == 15
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).where(Batch.extra_delay_s.is_not(None))).scalar_one() == 5


def test_a_worker_life_is_recorded_and_a_reused_name_gets_a_second_life(settings, engine, emit):
    emit("worker_spawned", worker="w1", stage="synthetic.compile", backend="local", at=10.0)
    emit("worker_ready", worker="w1", stage="synthetic.compile", at=12.0)
    emit("worker_retired", worker="w1", stage="synthetic.compile", at=50.0)
    emit("worker_spawned", worker="w1", stage="synthetic.compile", backend="local", at=60.0)
    emit("worker_ready", worker="w1", stage="synthetic.compile", at=61.0)
    emit("worker_ready", worker="w2", stage="synthetic.execute", at=70.0)  # never seen spawning
    Recorder(settings, engine).run_once()
    with engine.connect() as conn:
        lives = conn.execute(select(Worker.name, Worker.backend, Worker.spawned_at, Worker.ready_at, Worker.retired_at)
                             .order_by(Worker.spawned_at)).all()
    assert lives == [("w1", "local", 10.0, 12.0, 50.0), ("w1", "local", 60.0, 61.0, None), ("w2", None, 70.0, 70.0, None)]


def test_run_forever_records_new_entries_until_stopped(settings, engine, emit):
    recorder = Recorder(settings, engine, block_ms=100)
    stop = threading.Event()
    thread = threading.Thread(target=recorder.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=1, opened_at=100.0)
        for _ in range(100):
            if _count(engine, Batch) == 1:
                break
            stop.wait(0.05)
        assert _count(engine, Batch) == 1
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_an_idle_recorder_woken_by_an_entry_writes_what_follows_within_its_gather_time_in_one_chunk(
        settings, engine, emit):
    chunks = []
    recorder = Recorder(settings, engine, block_ms=100, gather_s=1.0, on_recorded=chunks.append)
    stop = threading.Event()
    thread = threading.Thread(target=recorder.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        stop.wait(0.3)  # drained the empty stream: waiting for an entry
        emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=2, opened_at=100.0)
        stop.wait(0.2)
        emit("request_arrived", batch="b1", request="r0", arrived_at=101.0, group=None, stages=["compile"])
        emit("request_arrived", batch="b1", request="r1", arrived_at=102.0, group=None, stages=["compile"])
        for _ in range(100):
            if chunks:
                break
            stop.wait(0.05)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert [[e["kind"] for e in chunk] for chunk in chunks] == [["batch_opened", "request_arrived", "request_arrived"]]


def test_an_open_batchs_first_arrival_follows_an_earlier_arrival_recorded_later(settings, engine, emit):
    recorder = Recorder(settings, engine)
    emit("batch_opened", batch="b1", task="t1", pipeline="synthetic", size=2, opened_at=100.0)
    emit("request_arrived", batch="b1", request="r1", arrived_at=105.0, group=None, stages=["compile"])
    recorder.run_once()
    emit("stage_done", batch="b1", request="r1", stage="compile", queued_at=105.0, started_at=106.0,
         finished_at=107.0, status="passed", worker="w1")
    recorder.run_once()
    assert _batch(engine, "b1").first_arrival_at == 105.0
    emit("request_arrived", batch="b1", request="r0", arrived_at=101.0, group=None, stages=["compile"])
    recorder.run_once()
    batch = _batch(engine, "b1")
    assert (batch.first_arrival_at, batch.earliest_at, batch.extra_delay_s) == (101.0, None, None)


def test_the_next_stream_id_follows_the_given_one():
    assert next_id("1700000000000-7") == "1700000000000-8"


def test_two_recorders_on_one_namespace_take_each_entry_once(settings, engine, emit):
    for b in range(4):
        emit.batch(f"b{b}", "t1", 100.0 * b, [[1.0, 2.0, 1.0]] * 5, completed_at=100.0 * b + 10)
    recorders = [Recorder(settings, engine, chunk=4, trim=False) for _ in range(2)]
    threads = [threading.Thread(target=r.run_once) for r in recorders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sum(r.consumed for r in recorders) == 4 * 22
    assert _count(engine, Request) == 20


def test_a_worker_announced_again_on_adoption_keeps_one_life(settings, engine, emit):
    emit("worker_spawned", worker="w1", stage="synthetic.compile", backend="docker", at=10.0)
    emit("worker_ready", worker="w1", stage="synthetic.compile", at=13.0)
    emit("worker_spawned", worker="w1", stage="synthetic.compile", backend="docker", at=10.0004)  # a restarted daemon
    emit("worker_retired", worker="w1", stage="synthetic.compile", at=40.0)
    Recorder(settings, engine).run_once()
    with engine.connect() as conn:
        lives = conn.execute(select(Worker.spawned_at, Worker.ready_at, Worker.retired_at)).all()
    assert lives == [(10.0, 13.0, 40.0)]


def test_a_worker_ready_before_its_spawn_is_recorded_keeps_one_life_from_the_spawn(settings, engine, emit):
    emit("worker_ready", worker="w1", stage="synthetic.compile", at=10.5)  # the worker's clock, a bit ahead
    emit("worker_spawned", worker="w1", stage="synthetic.compile", backend="local", at=10.0)
    Recorder(settings, engine).run_once()
    with engine.connect() as conn:
        lives = conn.execute(select(Worker.backend, Worker.spawned_at, Worker.ready_at, Worker.retired_at)).all()
    assert lives == [("local", 10.0, 10.5, None)]


def test_a_new_life_of_a_name_ends_an_old_life_whose_retirement_was_never_recorded(settings, engine, emit):
    emit("worker_spawned", worker="w1", stage="synthetic.compile", backend="local", at=10.0)
    emit("worker_spawned", worker="w1", stage="synthetic.compile", backend="local", at=100.0)
    Recorder(settings, engine).run_once()
    with engine.connect() as conn:
        lives = conn.execute(select(Worker.spawned_at, Worker.retired_at).order_by(Worker.spawned_at)).all()
    assert lives == [(10.0, 100.0), (100.0, None)]


def test_a_sealed_batch_is_recorded_with_the_size_that_arrived(settings, engine, reward_client):
    batch = reward_client.open_batch("task-window", "synthetic", 100)
    batch.submit_many([(f"r{i}", {"times": [0.0, 0.0]}) for i in range(3)])  # visit no stage: done at once
    assert batch.seal() == "completed"
    Recorder(settings, engine).run_once()
    row = _batch(engine, batch.id)
    assert (row.size, row.completed_at is not None, row.cancelled_at) == (3, True, None)


def test_a_request_with_a_1_kb_id_and_a_1_kb_group_is_recorded_end_to_end(settings, engine, reward_client):
    request_id, group = "r" * 1024, "".join(f"prompt token {i} " for i in range(700))[:1024]  # the ids' bound
    batch = reward_client.open_batch("task-long", "synthetic", 1)
    batch.submit(request_id, {"times": [0.0, 0.0]}, group=group)  # visits no stage: its result comes at once
    [result] = batch.gather(timeout=10)
    assert (result.request_id, result.group) == (request_id, group)

    recorder = Recorder(settings, engine)
    recorder.run_once()
    assert recorder.skipped == 0
    with engine.connect() as conn:
        row = conn.execute(select(Request).where(Request.request_id == request_id)).one()
    assert (row.group, row.status) == (group, result.status.value)


def test_the_longest_keys_the_store_takes_fit_its_indexes(settings, engine, emit):
    import secrets

    from farm.store.ingest import MAX_KEY_BYTES

    batch, request, task = (secrets.token_hex(MAX_KEY_BYTES // 2) for _ in range(3))  # incompressible
    emit("batch_opened", batch=batch, task=task, pipeline="synthetic", size=1, opened_at=100.0)
    emit("request_arrived", batch=batch, request=request, arrived_at=101.0, group=None, stages=["compile"])
    emit("stage_done", batch=batch, request=request, stage="compile", queued_at=101.0, started_at=101.5,
         finished_at=102.0, status="ok", worker="w1")
    recorder = Recorder(settings, engine)
    recorder.run_once()
    assert recorder.skipped == 0
    assert _batch(engine, batch).task == task
    assert _count(engine, RequestStage) == 1


def test_a_key_longer_than_the_store_takes_is_logged_and_counted(settings, engine, emit, caplog):
    emit("batch_opened", batch="b" * 1025, task="t1", pipeline="synthetic", size=1, opened_at=100.0)
    recorder = Recorder(settings, engine)
    with caplog.at_level(logging.WARNING, logger="farm.store.recorder"):
        assert recorder.run_once() == 1
    assert recorder.skipped == 1
    assert "batch is longer than the 1024 bytes a key of the history store may have" in caplog.text


def test_an_idle_recorder_waits_long_for_entries_yet_a_woken_stop_ends_its_wait_at_once(settings, engine):
    recorder = Recorder(settings, engine)  # the default wait: seconds, not a tick a second
    stop = threading.Event()
    thread = threading.Thread(target=recorder.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        stop.wait(0.5)  # drained the empty stream: waiting for an entry
        told = time.monotonic()
        stop.set()
        recorder.wake()
        thread.join(timeout=recorder.block_ms / 1000)
        assert not thread.is_alive() and time.monotonic() - told < 1.0 and recorder.block_ms >= 4_000
    finally:
        stop.set()
        recorder.wake()
        thread.join(timeout=15)
        recorder.close()


def test_the_recorders_wait_for_an_entry_may_outlast_the_clients_socket_timeout(settings):
    from farm.store.recorder import waiting_client

    shared = redis.Redis.from_url(settings.redis_url, socket_timeout=1.0)
    waiter = waiting_client(shared, 4.0)
    try:
        started = time.monotonic()
        assert waiter.xread({f"{settings.namespace}:nothing-here": "0-0"}, count=1, block=2_000) == []
        assert time.monotonic() - started >= 1.9  # the shared client's own timeout would have cut it at 1 s
        with pytest.raises(redis.TimeoutError):
            shared.xread({f"{settings.namespace}:nothing-here": "0-0"}, count=1, block=2_000)
    finally:
        waiter.close()
        waiter.connection_pool.disconnect()
        shared.close()


def test_an_idle_recorder_does_not_look_at_the_streams_fill_after_every_empty_wait(settings, engine, monkeypatch):
    monkeypatch.setattr("farm.store.recorder.CHECK_EVERY_S", 0.0)  # due on every turn of the loop
    recorder = Recorder(settings, engine, block_ms=100)
    checks = []
    real = recorder.check_stream
    recorder.check_stream = lambda *a, **k: checks.append(time.monotonic()) or real(*a, **k)
    stop = threading.Event()
    thread = threading.Thread(target=recorder.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        stop.wait(1.5)  # about 15 empty waits
        assert len(checks) == 1  # the first turn's, before anything was drained
    finally:
        stop.set()
        recorder.wake()
        thread.join(timeout=15)
        recorder.close()
