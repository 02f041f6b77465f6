"""The client's sans-I/O core: what to read and when, what a reply means, when a group is complete."""

from __future__ import annotations

import json

import pytest

from farm.client.core import (
    MAX_BLOCK_S,
    Outage,
    ResultReader,
    Session,
    Submitted,
    arrivals,
    client_settings,
    safe_url,
    sweep_interval,
    unpack_requests,
)
from farm.config import Settings
from farm.errors import FarmNotConfigured, InvalidInput
from farm.knobs import Knobs, KnobsCache
from farm.results import Result, Status

SETTINGS = Settings(namespace="unit", lease_s=4.0)


def entry(i: int) -> tuple[str, dict]:
    return f"{i}-0", {"r": json.dumps(Result(f"r{i}", "b0", Status.OK).to_dict())}


def test_a_read_blocks_no_longer_than_a_socket_timeout_allows_nor_past_the_next_sweep():
    reader = ResultReader(Session(SETTINGS), "b0", 2, None, now=0.0)
    assert reader.next_read(0.0).block_ms == int(MAX_BLOCK_S * 1000)
    assert reader.next_read(sweep_interval(SETTINGS) - 0.25).block_ms == 250


def test_a_read_ends_with_the_callers_timeout_saying_how_many_results_are_missing():
    reader = ResultReader(Session(SETTINGS), "b0", 3, 5.0, now=10.0)
    reader.feed([("done", [entry(1)])])
    reader.swept(14.0)
    assert reader.next_read(14.5).block_ms == 500
    with pytest.raises(TimeoutError, match="2 of 3 results still missing after 5 s"):
        reader.next_read(15.0)


def test_reading_goes_on_after_the_last_entry_seen():
    reader = ResultReader(Session(SETTINGS), "b0", 3, None, now=0.0)
    assert reader.next_read(0.0).after == "0-0"
    reader.feed([("done", [entry(1), entry(2)])])
    assert reader.next_read(0.0).after == "2-0" and reader.seen == 2 and not reader.done


def test_a_batch_is_read_to_its_end_at_its_size_or_at_its_end_marker():
    whole = ResultReader(Session(SETTINGS), "b0", 1, None, now=0.0)
    whole.feed([("done", [entry(1)])])
    cancelled = ResultReader(Session(SETTINGS), "b0", 5, None, now=0.0)
    cancelled.feed([("done", [("9-0", {"end": "cancelled"})])])
    assert whole.done and cancelled.done and cancelled.ended


def test_a_waiting_client_gives_lapsed_leases_back_every_half_lease():
    reader = ResultReader(Session(SETTINGS), "b0", 1, None, now=0.0)
    assert not reader.sweep_due(1.9) and reader.sweep_due(2.0)
    reader.swept(2.0)
    assert not reader.sweep_due(3.9) and reader.sweep_due(4.0)


def test_only_a_queued_request_needs_a_token_from_the_client_and_only_when_lua_cannot_publish_it():
    from farm.protocol.scripts import SUBMIT

    call = SUBMIT.call(batch="b0", request="r0", payload="{}", state="{}", first_queue="synthetic.compile",
                       at="1.0", result="", arrived_event="", done_event="", group="", limit="6.0",
                       tenant="", most_outstanding="")
    own_broker = Session(Settings(redis_url="redis://h:1/0", broker_url="amqp://rabbit//"))
    assert own_broker.submitted(call, ["queued"]) == ("queued", "synthetic.compile")
    assert own_broker.submitted(call, ["duplicate"]) == ("duplicate", None)
    assert Session(Settings(redis_url="redis://h:1/0")).submitted(call, ["queued"]) == ("queued", None)


def test_group_arrivals_are_known_only_once_the_whole_batch_arrived():
    assert arrivals("3", {"a": "2", "b": "1"}, 4) is None
    assert arrivals("4", {"a": "3", "b": "1"}, 4) == {"a": 3, "b": 1}


def test_the_live_knobs_are_read_again_once_they_are_a_second_old():
    cache = KnobsCache()
    assert cache.stale(0.0) and cache.knobs == Knobs()
    cache.update(json.dumps(Knobs(delay_s=3.0).to_dict()), now=10.0)
    assert not cache.stale(10.9) and cache.stale(11.1) and cache.knobs.delay_s == 3.0
    assert cache.stale(10.5, max_age_s=0.25)


def test_the_callback_hears_of_each_group_just_before_the_client_hands_it_out():
    from farm.client.core import GroupTracker

    heard = []
    tracker = GroupTracker(1, on_done=lambda group, results: heard.append(group))
    tracker.add(Result("r0", "b0", Status.OK, group="a"))
    tracker.add(Result("r1", "b0", Status.OK, group="b"))
    handed = tracker.emit(tracker.ready(None))
    assert next(handed)[0] == "a" and heard == ["a"]
    assert next(handed)[0] == "b" and heard == ["a", "b"]


def test_a_result_reported_again_after_a_restored_batch_is_handed_out_once():
    reader = ResultReader(Session(SETTINGS), "b0", 2, None, now=0.0)
    assert [r.request_id for r in reader.feed([("done", [entry(1)])])] == ["r1"]
    reader.restart()
    assert reader.next_read(0.0).after == "0-0"
    assert [r.request_id for r in reader.feed([("done", [entry(1), entry(2)])])] == ["r2"]
    assert reader.done


def test_an_outage_backs_off_exponentially_and_gives_up_when_the_budget_is_spent():
    outage = Outage(Settings(redis_url="redis://u:secret@h:1/0", reconnect_s=3.0), now=0.0)
    delays = [outage.next_delay(0.0) for _ in range(8)]
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert outage.next_delay(2.5) == 0.5  # never past the budget
    assert outage.next_delay(3.0) is None
    assert "secret" not in str(outage.unavailable(OSError("refused")))


def test_a_redis_url_in_a_message_hides_its_password():
    assert safe_url("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0"
    assert safe_url("redis://host:6379/0") == "redis://host:6379/0"


def test_a_client_names_no_farm_by_guessing():
    with pytest.raises(FarmNotConfigured, match="FARM_REDIS_URL"):
        client_settings(Settings())
    assert client_settings(Settings(), redis_url="redis://h:1/0", namespace=None).redis_url == "redis://h:1/0"


def test_bulk_requests_come_as_pairs_triples_or_mappings():
    assert unpack_requests([("a", 1), ["b", 2, "g"], {"id": "c", "payload": 3}]) == [
        ("a", 1, None), ("b", 2, "g"), ("c", 3, None)]
    with pytest.raises(InvalidInput, match="request #1 of the bulk submit"):
        unpack_requests([("a", 1), {"id": "b", "payload": 2, "extra": 0}])


def test_results_come_in_submission_order_and_others_after_in_completion_order():
    submitted = Submitted()
    for rid in ("a", "b", "c"):
        submitted.add(rid, {}, None)
    done = [Result(rid, "b0", Status.OK) for rid in ("x", "c", "a", "b")]
    assert [r.request_id for r in submitted.ordered(done)] == ["a", "b", "c", "x"]
