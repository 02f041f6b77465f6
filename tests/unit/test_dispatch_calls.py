"""The pure half of the dispatch: validation, script arguments and reply parsing (no services)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm import events
from farm.client.core import GroupTracker, ResultReader, Session
from farm.config import Settings
from farm.errors import (
    BatchClosed,
    BatchConflict,
    BatchFull,
    BatchNotFound,
    DuplicateRequest,
    InvalidInput,
    PayloadTooLarge,
)
from farm.protocol.calls import (
    admit,
    admitted_calls,
    canonical_json,
    open_call,
    parse_open,
    parse_submit,
    set_estimate_call,
    submit_call,
)
from farm.protocol.scripts import SOURCES, SUBMIT
from farm.protocol.state import RequestState
from farm.protocol.ids import GROUP, REQUEST
from farm.protocol.tokens import hard_limit, serves_on, task_name
from farm.results import Result, Status
from workers.pipelines import synthetic

PIPELINE = synthetic.pipeline
SETTINGS = Settings(namespace="unit", max_payload_bytes=200)


def submit(payload, request_id="r0", group=None):
    return submit_call(SETTINGS, PIPELINE, "b0", request_id, payload, group, 100.0)


@given(st.lists(st.tuples(st.text(min_size=1, max_size=20).filter(REQUEST.accepts),
                            st.none() | st.text(max_size=20).filter(GROUP.accepts),
                            st.sampled_from([[0, 1], [1, 0], [1, 1], [0, 0]])), min_size=1, max_size=6,
                unique_by=lambda r: r[0]))
def test_arrivals_encoded_together_say_exactly_what_each_encoded_alone_says(requests):
    admitted = [admit(SETTINGS, PIPELINE, rid, {"times": times}, group) for rid, group, times in requests]
    for a, call in zip(admitted, admitted_calls(PIPELINE, "b0", admitted, 100.5)):
        assert call.arg("state") == RequestState(a.group, a.stages, queued_at=100.5).encode()
        assert call.arg("arrived_event") == events.encode("request_arrived", batch="b0", request=a.request_id,
                                                          arrived_at=100.5, group=a.group, stages=list(a.stages))["e"]


def test_a_request_is_queued_to_the_first_stage_it_visits():
    call = submit({"times": [0, 2.5]})
    assert call.script is SUBMIT and call.arg("first_queue") == "synthetic.execute" and call.arg("result") == ""
    assert json.loads(call.arg("state"))["st"] == ["execute"]


def test_a_request_visiting_no_stage_carries_its_admission_verdict_as_its_result():
    call = submit({"times": [0, 0]})
    result = Result.from_dict(json.loads(call.arg("result")))
    assert call.arg("first_queue") == "" and result.status is Status.WRONG and result.finished_at == 100.0


def test_a_payload_the_pipeline_refuses_carries_an_invalid_input_result():
    call = submit({"times": [-1, 0]})
    result = Result.from_dict(json.loads(call.arg("result")))
    assert result.status is Status.INVALID_INPUT and "finite and >= 0" in result.message
    assert json.loads(call.arg("done_event"))["kind"] == "request_done"


def test_payloads_are_compared_in_canonical_form():
    assert canonical_json({"b": 1, "a": [1, 2]}) == canonical_json({"a": [1, 2], "b": 1})
    assert submit({"b": 1, "times": [1, 0]}).arg("payload") == submit({"times": [1, 0], "b": 1}).arg("payload")


@pytest.mark.parametrize("payload", [{"times": {1, 2}}, {"x": float("inf")}, {"f": print}])
def test_a_payload_that_is_not_json_is_refused(payload):
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        submit(payload)


def test_an_oversized_payload_is_refused_with_its_size():
    with pytest.raises(PayloadTooLarge, match="over the limit of 200"):
        submit({"times": [1, 0], "pad": "x" * 300})


def test_groups_are_strings_and_request_ids_are_checked():
    assert json.loads(submit({"times": [1, 0]}, group=3).args[3])["g"] == "3"
    for bad in ("", None, "\x00", "x" * 1025):
        with pytest.raises(InvalidInput, match="request id"):
            submit({"times": [1, 0]}, request_id=bad)
    for bad in ("", 1.0, True, []):
        with pytest.raises(InvalidInput, match="group"):
            submit({"times": [1, 0]}, group=bad)


@pytest.mark.parametrize("task, size, group_size, batch_id", [
    ("", 1, None, "b"), ("a/b", 1, None, "b"), ("t", 0, None, "b"), ("t", "3", None, "b"),
    ("t", 10**7, None, "b"), ("t", 1, 0, "b"), ("t", 1, None, "a b"), ("t", 1, None, ""),
])
def test_malformed_batches_are_refused(task, size, group_size, batch_id):
    with pytest.raises(InvalidInput):
        open_call(task, PIPELINE, size, batch_id, group_size, 1.0)


def test_opening_a_batch_names_every_queue_of_its_pipeline():
    call = open_call("t", PIPELINE, 4, "b0", 2, 1.5)
    assert call.arg("queues") == "synthetic.compile,synthetic.execute" and call.arg("group_size") == "2"
    assert json.loads(call.arg("opened_event")) == {"kind": "batch_opened", "batch": "b0", "task": "t", "pipeline": "synthetic",
                                        "size": 4, "opened_at": 1.5}


@pytest.mark.parametrize("reply, error", [
    (["unknown"], BatchNotFound), (["conflict"], DuplicateRequest), (["closed", "cancelled"], BatchClosed),
    (["full", "4"], BatchFull),
])
def test_submit_refusals_become_clear_exceptions(reply, error):
    with pytest.raises(error, match="b0"):
        parse_submit(reply, "b0", "r0")


def test_open_refusals_become_clear_exceptions():
    assert parse_open(["opened"], "b0", "t") is True and parse_open(["exists"], "b0", "t") is False
    with pytest.raises(BatchConflict, match="size 3"):
        parse_open(["conflict", "t", "synthetic", "3"], "b0", "t")
    with pytest.raises(BatchConflict, match="belongs to pipeline 'cuda'"):
        parse_open(["task", "cuda"], "b0", "t")


def test_an_estimate_must_be_a_finite_time():
    assert set_estimate_call("b0", 12.25).arg("key") == "12.25"
    for bad in (float("nan"), "soon", True):
        with pytest.raises(InvalidInput):
            set_estimate_call("b0", bad)


def test_the_hard_time_limit_sits_above_the_stage_timeout_and_tasks_are_named_by_stage():
    assert hard_limit(1.0) == 6.0 and hard_limit(120.0) == 132.0
    assert task_name("cuda.compile") == "farm.stage.cuda.compile"


def test_a_worker_serves_on_only_while_the_next_request_keeps_its_timeout_and_half_the_margin():
    # a 120 s stage: hard limit 132 s, so a request taken in the loop needs 126 s left
    assert serves_on(5.9, 132.0, 120.0) and not serves_on(6.1, 132.0, 120.0)
    assert serves_on(2.4, 6.0, 1.0) and not serves_on(2.6, 6.0, 1.0)  # a 1 s stage: 5 s margin, 3.5 s needed


def test_a_token_without_a_hard_limit_serves_no_more_than_its_own_request():
    assert not serves_on(0.0, None, 1.0)


def test_every_script_includes_the_shared_helpers():
    assert all("local function reclaim" in src for src in SOURCES.values())


def test_the_done_stream_yields_results_and_its_end_marker():
    r = Result("r0", "b0", Status.OK, 1.0)
    reader = ResultReader(Session(SETTINGS), "b0", 3, None, 0.0)
    results = reader.feed([("done", [("1-0", {"r": json.dumps(r.to_dict())}), ("2-0", {"end": "cancelled"})])])
    assert results == [r] and reader.ended and reader.last == "2-0"


def result(i: int, group: str | None) -> Result:
    return Result(f"r{i}", "b0", Status.OK, group=group)


@given(st.lists(st.sampled_from(["a", "b", "c", None]), max_size=30), st.integers(1, 4))
def test_a_group_is_reported_once_when_it_reaches_its_size(groups, size):
    tracker = GroupTracker(size)
    reported = []
    for i, g in enumerate(groups):
        tracker.add(result(i, g))
        for group, results in tracker.ready(None):
            assert len(results) == size and group not in [x for x, _ in reported]
            reported.append((group, results))
    expected = {g for g in set(groups) - {None} if groups.count(g) >= size}
    assert {g for g, _ in reported} == expected
    assert {g for g, _ in tracker.rest()} == set(groups) - {None} - expected


def test_without_a_size_a_group_waits_for_the_arrivals_of_its_batch():
    tracker = GroupTracker(None)
    tracker.add(result(0, "a"))
    assert tracker.ready(None) == []  # the batch has not fully arrived
    assert tracker.ready({"a": 2}) == []
    tracker.add(result(1, "a"))
    assert [g for g, _ in tracker.ready({"a": 2})] == ["a"]


def test_the_broker_is_the_farms_redis_unless_told_otherwise_and_socket_urls_suit_kombu():
    from farm.celery_app import broker_url
    from farm.protocol.scripts import lua_tokens

    assert broker_url(Settings(redis_url="redis://h:1/2")) == "redis://h:1/2"
    assert broker_url(Settings(redis_url="unix:///tmp/r.sock?db=0")) == "redis+socket:///tmp/r.sock?virtual_host=0"
    assert lua_tokens(Settings(redis_url="redis://h:1/2"))
    assert lua_tokens(Settings(redis_url="redis://h:1/2", broker_url="redis://h:1/2"))
    assert not lua_tokens(Settings(redis_url="redis://h:1/2", broker_url="amqp://rabbit//"))
