"""The gateway client's protocol without I/O: the calls it makes, and how it reads answers and errors."""

from __future__ import annotations

import json

import pytest

from farm.client import http_core as core
from farm.config import Settings
from farm.errors import (
    HTTP_STATUS,
    BatchClosed,
    BatchNotFound,
    FarmError,
    FarmUnavailable,
    InvalidInput,
    LimitReached,
    PayloadTooLarge,
    Unauthorized,
)


def error(kind: str, message: str = "m") -> bytes:
    return json.dumps({"error": {"type": kind, "message": message}}).encode()


def test_a_2xx_answer_is_its_json_body():
    assert core.answer(200, b'{"kinds": ["queued"]}', {}) == {"kinds": ["queued"]}


@pytest.mark.parametrize("status,kind,raised", [
    (404, "BatchNotFound", BatchNotFound), (409, "BatchClosed", BatchClosed), (413, "TooLarge", PayloadTooLarge),
    (400, "UnknownPipeline", InvalidInput), (401, "Unauthenticated", Unauthorized), (400, "BodyRefused", InvalidInput),
])
def test_the_gateways_errors_become_the_farms_own(status, kind, raised):
    with pytest.raises(raised, match="m"):
        core.answer(status, error(kind), {})


@pytest.mark.parametrize("kind,status", [(k, s) for k, s in HTTP_STATUS if k not in (InvalidInput, FarmError)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_named_refusal_the_gateway_answers_comes_back_as_its_own_class(kind, status):
    with pytest.raises(kind) as raised:
        core.answer(status, error(kind.__name__, "what was wrong"), {})
    assert type(raised.value) is kind and str(raised.value) == "what was wrong"


def test_a_validation_answer_says_what_was_wrong():
    with pytest.raises(InvalidInput, match="size"):
        core.answer(422, json.dumps({"detail": [{"loc": ["body", "size"], "msg": "bad"}]}).encode(), {})


def test_a_limit_is_busy_for_as_long_as_the_gateway_says():
    with pytest.raises(core.Busy) as busy:
        core.answer(429, error("LimitExceeded", "full"), {"retry-after": "3"})
    assert busy.value.delay == 3.0 and isinstance(busy.value.error, LimitReached)


def test_an_unavailable_gateway_or_a_page_that_is_not_json_from_a_proxy_is_busy():
    with pytest.raises(core.Busy):
        core.answer(503, error("FarmUnavailable"), {})
    with pytest.raises(core.Busy):
        core.answer(502, b"<html>bad gateway</html>", {})
    with pytest.raises(FarmError, match="not JSON"):
        core.answer(200, b"<html>", {})


def test_retrying_waits_out_busy_answers_then_raises_the_farms_error():
    retrying = core.Retrying(Settings(reconnect_s=1.0), "http://gw")
    busy = core.Busy(0.5, LimitReached("full"))
    assert retrying.delay(busy, 0.0) == 0.5
    with pytest.raises(LimitReached):
        retrying.delay(busy, 2.0)
    with pytest.raises(FarmUnavailable, match="http://gw"):
        core.Retrying(Settings(reconnect_s=0.0), "http://gw").delay(OSError("refused"), 0.0)


def test_a_bulk_submit_goes_in_chunks_with_groups_only_where_given():
    calls = core.submit_calls("b", [(f"r{i}", {}, None if i else 3) for i in range(core.SUBMIT_CHUNK + 1)])
    assert [len(c.body["requests"]) for c in calls] == [core.SUBMIT_CHUNK, 1]
    assert calls[0].body["requests"][0] == {"request_id": "r0", "payload": {}, "group": 3}
    assert "group" not in calls[0].body["requests"][1]


def test_a_batch_id_that_would_change_the_path_is_refused():
    with pytest.raises(InvalidInput, match="without '/'"):
        core.status_call("a/../b")


def test_a_page_hands_out_each_result_once_and_times_out_saying_how_many_came():
    page = core.Page("b", timeout=5.0, now=0.0)
    row = {"request_id": "r", "batch_id": "b", "status": "ok"}
    assert len(page.feed({"results": [row], "cursor": "1-0", "complete": False})) == 1
    assert page.feed({"results": [row], "cursor": "2-0", "complete": True}) == [] and page.complete
    assert page.next_call(1.0).params == {"cursor": "2-0", "wait_s": 4.0}
    with pytest.raises(TimeoutError, match="1 results after 5 s"):
        page.next_call(5.0)
