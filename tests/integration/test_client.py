"""The trainer client against real Redis and workers: idempotency, cancellation, groups, bad input, history."""

from __future__ import annotations

import json
import math
import time

import pytest
import redis

from farm import registry
from farm.client.sync import RewardClient
from farm.errors import (
    BatchClosed,
    BatchConflict,
    BatchFull,
    BatchNotFound,
    DuplicateRequest,
    InvalidInput,
    PayloadTooLarge,
    UnknownPipeline,
)
from farm.events import decode, stream_key
from farm.protocol.dispatch import Dispatch
from workers.pipelines import synthetic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

COMPILE = "synthetic.compile"
NOTHING = {"times": [0, 0]}  # visits no stage: finishes on arrival


def history(settings) -> list[dict]:
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    return [decode(e) for _, e in r.xrange(stream_key(settings.namespace))]


def test_resubmitting_the_same_request_is_a_no_op(settings, reward_client):
    batch = reward_client.open_batch("t", "synthetic", 2)
    assert batch.submit("r0", {"times": [1, 0]}) == "queued"
    assert batch.submit("r0", {"times": [1, 0]}) == "duplicate"
    assert [p.id for p in Dispatch(settings).inspect([COMPILE]).stages[COMPILE].pending] == ["r0"]
    assert batch.progress().arrived == 1


def test_resubmitting_a_finished_request_after_its_batch_completed_is_a_no_op(settings, reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1)
    assert batch.submit("r0", NOTHING) == "finished"
    assert batch.submit("r0", NOTHING) == "duplicate"
    assert len(batch.gather(timeout=5)) == 1


def test_the_same_id_with_a_different_payload_is_refused(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 2)
    batch.submit("r0", {"times": [1, 0]})
    with pytest.raises(DuplicateRequest, match="different payload"):
        batch.submit("r0", {"times": [2, 0]})


def test_cancelling_a_batch_drops_pending_requests_and_stops_the_running_one(settings, reward_client, start_workers):
    start_workers(COMPILE)
    doomed = reward_client.open_batch("doomed", "synthetic", 4)
    doomed.submit("running", {"times": [20, 0]}, group="g")
    deadline = time.monotonic() + 10
    while not Dispatch(settings).inspect([COMPILE]).stages[COMPILE].running:
        assert time.monotonic() < deadline, "never started"
        time.sleep(0.02)
    doomed.submit("pending", {"times": [20, 0]})
    doomed.submit("done", NOTHING)
    assert doomed.cancel() == "cancelled"
    results = {r.request_id: r for r in doomed.gather(timeout=5)}
    assert {k: r.status.value for k, r in results.items()} == {"running": "cancelled", "pending": "cancelled", "done": "wrong"}
    assert results["running"].group == "g"
    assert Dispatch(settings).inspect([COMPILE]).stages[COMPILE].pending == ()
    with pytest.raises(BatchClosed, match="cancelled"):
        doomed.submit("late", NOTHING)
    # the running stage was told to stop: the worker is free for another tenant long before 20 s
    other = reward_client.open_batch("other", "synthetic", 1)
    other.submit("r0", {"times": [0.01, 0]})
    [result] = other.gather(timeout=5)
    assert result.ok
    kinds = [e["kind"] for e in history(settings) if e.get("batch") == doomed.id]
    assert "batch_cancelled" in kinds and "batch_completed" not in kinds
    assert doomed.cancel() == "cancelled"  # cancelling again changes nothing


def test_groups_are_reported_when_their_last_request_finishes(settings, reward_client, start_workers):
    start_workers(COMPILE)
    batch = reward_client.open_batch("t", "synthetic", 4, group_size=2)
    batch.submit("a0", {"times": [0.01, 0]}, group="a")
    batch.submit("b0", NOTHING, group="b")
    batch.submit("b1", NOTHING, group="b")
    batch.submit("a1", {"times": [0.3, 0]}, group="a")
    seen = []
    groups = list(batch.completed_groups(timeout=10, on_group_done=lambda g, rs: seen.append(g)))
    assert [g for g, _ in groups] == ["b", "a"] == seen
    assert sorted(r.request_id for r in groups[1][1]) == ["a0", "a1"]


def test_without_a_group_size_a_group_completes_once_the_whole_batch_has_arrived(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 3)
    batch.submit("a0", NOTHING, group=7)
    batch.submit("a1", NOTHING, group=7)
    batch.submit("x", NOTHING)
    [(group, results)] = list(batch.completed_groups(timeout=5))
    assert group == "7" and {r.request_id for r in results} == {"a0", "a1"}


def test_results_stream_as_they_complete_and_progress_counts_them(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 2)
    batch.submit("r0", NOTHING)
    it = batch.as_completed(timeout=5)
    assert next(it).request_id == "r0"
    assert (batch.progress().arrived, batch.progress().done, batch.progress().state) == (1, 1, "open")
    with pytest.raises(TimeoutError, match="1 of 2 results still missing"):
        batch.gather(timeout=0.2)
    batch.submit("r1", NOTHING)
    assert next(it).request_id == "r1"
    assert batch.progress().state == "completed"


def test_another_client_can_attach_to_a_batch_by_id(settings, reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1, batch_id="step-17")
    with RewardClient(settings) as other:
        attached = other.batch("step-17")
        assert (attached.task, attached.size) == ("t", 1)
        attached.submit("r0", NOTHING)
        assert reward_client.open_batch("t", "synthetic", 1, batch_id="step-17").id == "step-17"
        with pytest.raises(BatchNotFound):
            other.batch("no-such-batch")
    assert [r.request_id for r in batch.gather(timeout=5)] == ["r0"]


def test_every_fact_of_a_batch_goes_to_the_history_stream(settings, reward_client, start_workers):
    start_workers(COMPILE)
    batch = reward_client.open_batch("t", "synthetic", 2)
    batch.submit("r0", {"times": [0.01, 0]}, group="g")
    batch.submit("r1", NOTHING)
    batch.gather(timeout=10)
    events = [e for e in history(settings) if e.get("batch") == batch.id]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "batch_opened" and kinds[-1] == "batch_completed"
    assert kinds.count("request_arrived") == 2 and kinds.count("request_done") == 2 and kinds.count("stage_done") == 1
    [stage] = [e for e in events if e["kind"] == "stage_done"]
    assert stage["queued_at"] <= stage["started_at"] <= stage["finished_at"]
    assert stage["worker"] == "synthetic.compile-w0" and stage["status"] == "passed"
    assert any(e["kind"] == "worker_ready" and e["worker"] == "synthetic.compile-w0" for e in history(settings))


def test_opening_and_completing_a_batch_is_published_for_the_planner(settings, reward_client):
    pubsub = redis.Redis.from_url(settings.redis_url, decode_responses=True).pubsub()
    pubsub.subscribe(f"{settings.namespace}:epochs")
    pubsub.get_message(timeout=1)
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", NOTHING)
    kinds = []
    while len(kinds) < 2:
        msg = pubsub.get_message(timeout=2)
        assert msg is not None, f"only saw {kinds}"
        if msg["type"] == "message":
            body = json.loads(msg["data"])
            assert body["batch"] == batch.id
            kinds.append(body["kind"])
            last = body
    assert kinds == ["opened", "completed"] and last["state"] == "completed"


# ---- bad input: a clear error, nothing lost, nobody else harmed ----

def test_a_payload_that_is_not_json_is_refused_at_the_client(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1)
    for payload in ({"times": [object(), 0]}, {"times": [math.nan, 0]}):
        with pytest.raises(InvalidInput, match="not JSON-serialisable"):
            batch.submit("r0", payload)
    assert batch.progress().arrived == 0


def test_an_oversized_payload_is_refused_at_the_client(settings):
    with RewardClient(settings.with_(max_payload_bytes=100)) as small:
        batch = small.open_batch("t", "synthetic", 1)
        with pytest.raises(PayloadTooLarge, match="over the limit of 100"):
            batch.submit("r0", {"times": [0, 0], "code": "x" * 200})
        assert batch.progress().arrived == 0


@pytest.mark.parametrize("payload, reason", [
    ({"times": [-1, 0]}, "finite and >= 0"),
    ({"times": ["fast", 0]}, "must be a number"),
    ({"times": [1]}, "1 times for 2 stages"),
    ({"nothing": 1}, "needs 'times'"),
    (["not", "an", "object"], "must be a JSON object"),
])
def test_a_payload_its_pipeline_refuses_becomes_an_invalid_input_result(reward_client, payload, reason):
    batch = reward_client.open_batch("t", "synthetic", 1)
    assert batch.submit("r0", payload) == "finished"
    [result] = batch.gather(timeout=5)
    assert result.status.value == "invalid_input" and reason in result.message and result.stages == ()


def test_unknown_pipelines_and_malformed_batches_are_refused(reward_client):
    with pytest.raises(UnknownPipeline, match="unknown pipeline 'nope'"):
        reward_client.open_batch("t", "nope", 1)
    for task, size in (("", 1), ("a b", 1), ("t", 0), ("t", 2.5), ("t", True)):
        with pytest.raises(InvalidInput):
            reward_client.open_batch(task, "synthetic", size)
    with pytest.raises(InvalidInput, match="batch id"):
        reward_client.open_batch("t", "synthetic", 1, batch_id="has space")


def test_a_task_keeps_its_pipeline_and_a_batch_id_its_shape(reward_client):
    registry.register(synthetic.make("synthetic-b"))
    reward_client.open_batch("t", "synthetic", 2, batch_id="b1")
    with pytest.raises(BatchConflict, match="task 't' belongs to pipeline 'synthetic'"):
        reward_client.open_batch("t", "synthetic-b", 2)
    with pytest.raises(BatchConflict, match="already exists"):
        reward_client.open_batch("t", "synthetic", 3, batch_id="b1")


def test_a_request_beyond_the_batch_size_is_refused(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", {"times": [1, 0]})
    with pytest.raises(BatchFull, match="all of its 1 requests"):
        batch.submit("r1", {"times": [1, 0]})


def test_submitting_to_a_completed_batch_is_refused(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", NOTHING)
    with pytest.raises(BatchClosed, match="completed"):
        batch.submit("r1", NOTHING)


def test_bad_request_ids_and_groups_are_refused(reward_client):
    batch = reward_client.open_batch("t", "synthetic", 1)
    for rid in ("", 7, "x" * 1025, "é" * 513, "a\nb"):
        with pytest.raises(InvalidInput, match="request id"):
            batch.submit(rid, NOTHING)
    with pytest.raises(InvalidInput, match="group"):
        batch.submit("r0", NOTHING, group=1.5)
    with pytest.raises(InvalidInput, match="estimated completion"):
        batch.set_estimate(float("inf"))


def test_one_tenants_bad_input_does_not_harm_another_tenants_batch(settings, reward_client, start_workers):
    start_workers(COMPILE)
    good = reward_client.open_batch("good", "synthetic", 2)
    bad = reward_client.open_batch("bad", "synthetic", 2)
    good.submit("g0", {"times": [0.01, 0]})
    bad.submit("b0", {"times": [-5, 0]})
    with pytest.raises(InvalidInput):
        bad.submit("b1", {"times": [object(), 0]})
    good.submit("g1", {"times": [0.01, 0]})
    assert all(r.ok for r in good.gather(timeout=10))


def test_waiting_longer_than_the_redis_socket_timeout_is_not_an_error(settings, start_workers):
    """A client with the default 10 s lease waits in reads shorter than redis-py's socket timeout."""
    from farm.client.sync import RewardClient

    start_workers("synthetic.compile")
    with RewardClient(settings.with_(lease_s=10.0)) as client:
        batch = client.open_batch("slow-task", "synthetic", 1)
        batch.submit("r0", {"times": [6.0, 0.0]})
        [result] = batch.gather(timeout=30)
    assert result.status.value == "ok"
