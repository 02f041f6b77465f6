"""Ids and groups of any length the client takes reach the history: the client's limits are stated, refused
at submit with a clear error, and within what the store keys its rows by."""

from __future__ import annotations

import pytest

from farm import registry
from farm.config import Settings
from farm.pipeline import InvalidInput
from farm.protocol.calls import open_call, submit_call
from farm.protocol.ids import MAX_REQUEST_ID_BYTES, check_farm_batch
from farm.store.ingest import MAX_KEY_BYTES, clean

SYNTHETIC = registry.get("synthetic")


def submit(request_id, group=None):
    return submit_call(Settings(), SYNTHETIC, "b", request_id, {"times": [0.1, 0.0]}, group, 1.0)


def test_a_request_id_up_to_the_stated_limit_is_taken():
    submit("r" * MAX_REQUEST_ID_BYTES)
    submit("é" * (MAX_REQUEST_ID_BYTES // 2))  # the limit is in bytes: two each


def test_a_longer_request_id_is_refused_at_submit_saying_the_limit():
    with pytest.raises(InvalidInput, match=f"1 to {MAX_REQUEST_ID_BYTES} bytes in UTF-8"):
        submit("é" * (MAX_REQUEST_ID_BYTES // 2 + 1))


def test_every_id_the_client_takes_fits_a_key_of_the_history_store():
    longest_batch, longest_task = "b" * 128, "t" * 64
    check_farm_batch(longest_batch)
    open_call(longest_task, SYNTHETIC, 1, longest_batch, None, 1.0)
    assert max(MAX_REQUEST_ID_BYTES, len(longest_batch), len(longest_task)) <= MAX_KEY_BYTES
    with pytest.raises(InvalidInput):
        check_farm_batch("b" * 129)


def test_a_group_of_any_length_is_recorded_not_refused():
    group = "a long GRPO prompt " * 1000
    event = clean({"kind": "request_arrived", "batch": "b", "request": "r" * MAX_KEY_BYTES, "arrived_at": 1.0,
                   "group": group, "stages": ["compile"]})
    assert event["group"] == group
