"""The operator's knobs as data, and settings from the environment."""

from __future__ import annotations

import json
import os

import pytest

from farm.config import ENDPOINT_FILE, from_env
from farm.knobs import Knobs, StageKnobs, from_json


def test_knobs_survive_a_round_trip_through_their_dict():
    knobs = Knobs(delay_s=3.0, scheduler="fcfs").with_stage("synthetic.execute", timeout_s=30.0, max_workers=8)
    assert Knobs.from_dict(json.loads(json.dumps(knobs.to_dict()))) == knobs


def test_missing_knobs_read_as_the_defaults():
    assert from_json(None) == Knobs()


@pytest.mark.parametrize("kw, message", [
    ({"delay_s": -1}, "delay_s"),
    ({"scheduler": "lifo"}, "scheduler"),
    ({"tick_s": 0}, "tick_s"),
])
def test_a_bad_knob_is_refused_with_its_name(kw, message):
    with pytest.raises(ValueError, match=message):
        Knobs(**kw)


def test_min_workers_above_max_workers_is_refused():
    with pytest.raises(ValueError, match="exceeds"):
        StageKnobs(min_workers=5, max_workers=2)


def test_unknown_keys_in_saved_knobs_are_ignored():
    assert Knobs.from_dict({"delay_s": 1.0, "from_the_future": True}).delay_s == 1.0


def test_settings_come_from_farm_variables():
    s = from_env({"FARM_REDIS_URL": "redis://h:1/0", "FARM_NAMESPACE": "x", "FARM_LEASE_S": "3"})
    assert (s.redis_url, s.namespace, s.lease_s, s.broker) == ("redis://h:1/0", "x", 3.0, "redis://h:1/0")


def test_without_a_redis_url_clients_find_the_embedded_farm_running_here(tmp_path):
    (tmp_path / ENDPOINT_FILE).write_text(json.dumps({"pid": os.getpid(), "redis_url": "redis://127.0.0.1:9/0",
                                                      "namespace": "emb"}))
    s = from_env({"FARM_DATA_DIR": str(tmp_path)})
    assert (s.redis_url, s.namespace) == ("redis://127.0.0.1:9/0", "emb")


def test_the_endpoint_of_a_farm_that_died_is_ignored(tmp_path):
    (tmp_path / ENDPOINT_FILE).write_text(json.dumps({"pid": 2**22 + 12345, "redis_url": "redis://127.0.0.1:9/0"}))
    assert from_env({"FARM_DATA_DIR": str(tmp_path)}).redis_url is None
