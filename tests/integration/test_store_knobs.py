"""The knob store: the store holds the knobs in force, Redis a live copy for workers."""

from __future__ import annotations

import json

import pytest
import redis

from farm.knobs import Knobs, from_json, redis_key
from farm.store.knob_store import KnobStore

pytestmark = pytest.mark.integration


@pytest.fixture
def client(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_the_defaults_are_in_force_until_knobs_are_saved(engine, client, namespace):
    assert KnobStore(engine, client, namespace).load() == Knobs()


def test_saved_knobs_are_persisted_and_published_where_workers_read_them(engine, client, namespace):
    knobs = Knobs(delay_s=3.0, scheduler="fcfs").with_stage("synthetic.execute", timeout_s=30.0, max_workers=8)
    KnobStore(engine, client, namespace).save(knobs)
    assert KnobStore(engine, None, namespace).load() == knobs
    assert from_json(client.get(redis_key(namespace))) == knobs


def test_publish_restores_the_live_copy_from_the_store(engine, client, namespace):
    knobs = Knobs(delay_s=5.0)
    KnobStore(engine, None, namespace).save(knobs)
    assert client.get(redis_key(namespace)) is None
    assert KnobStore(engine, client, namespace).publish() == knobs
    assert json.loads(client.get(redis_key(namespace)))["delay_s"] == 5.0


def test_every_saved_version_is_kept_newest_first(engine, namespace):
    store = KnobStore(engine, None, namespace)
    store.save(Knobs(delay_s=1.0))
    store.save(Knobs(delay_s=2.0))
    assert [k.delay_s for _, k in store.versions()] == [2.0, 1.0]
    assert store.load().delay_s == 2.0
