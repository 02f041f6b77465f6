"""The tenants' fair shares published from the store (real PostgreSQL) to the hash the pick reads (real Redis):
replaced whole, revoked tenants out, and a publisher in the planner's process that outlives a failure."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis as redis_lib

from farm.app import fair_shares
from farm.protocol.keys import Keys
from farm.protocol.shares import FairShare
from farm.store.tenants import create_tenant, list_tenants, revoke_tenant, update_tenant

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def redis(settings):
    client = redis_lib.Redis.from_url(settings.redis_url, decode_responses=True)
    yield client
    client.close()


def test_every_active_tenants_share_is_published_under_its_label(engine, redis, settings):
    a, _ = create_tenant(engine, "a", fair_share=FairShare(3.0, {"gpu": 2}), now=1.0)
    b, _ = create_tenant(engine, "b", now=1.0)
    fair_shares.publish_from_store(engine, redis, settings.namespace)
    assert redis.hgetall(Keys(settings.namespace).shares) == {f"t{a.id}": FairShare(3.0, {"gpu": 2}).encode(),
                                                             f"t{b.id}": FairShare().encode()}


def test_a_revoked_tenant_drops_out_and_a_change_replaces_its_entry(engine, redis, settings):
    create_tenant(engine, "a", now=1.0)
    b, _ = create_tenant(engine, "b", now=1.0)
    fair_shares.publish_from_store(engine, redis, settings.namespace)
    revoke_tenant(engine, "a", now=2.0)
    update_tenant(engine, "b", fair_share=FairShare(5.0))
    fair_shares.publish_from_store(engine, redis, settings.namespace)
    assert fair_shares.read(redis, settings.namespace) == {f"t{b.id}": FairShare(5.0)}


def test_publishing_no_tenant_leaves_no_entry_of_before(redis, settings):
    redis.hset(Keys(settings.namespace).shares, mapping={"t999": FairShare(9.0).encode()})
    fair_shares.publish(redis, settings.namespace, [])
    assert not redis.exists(Keys(settings.namespace).shares)


def test_the_hash_is_replaced_in_one_transaction(engine, redis, settings, monkeypatch):
    create_tenant(engine, "a", now=1.0)
    sent = []
    pipeline = redis.pipeline

    def watched(transaction=True, **kwargs):
        sent.append(transaction)
        return pipeline(transaction=transaction, **kwargs)

    monkeypatch.setattr(redis, "pipeline", watched)
    fair_shares.publish(redis, settings.namespace, list_tenants(engine))
    assert sent == [True]


def test_reading_leaves_out_an_entry_that_is_not_a_fair_share(redis, settings, caplog):
    redis.hset(Keys(settings.namespace).shares, mapping={"t1": FairShare(2.0).encode(), "t2": "{nope",
                                                         "t3": '{"w": -1}'})
    with caplog.at_level(logging.WARNING, logger="farm.app.fair_shares"):
        assert fair_shares.read(redis, settings.namespace) == {"t1": FairShare(2.0)}
    assert "t2" in caplog.text and "t3" in caplog.text


def test_a_failed_publish_is_logged_and_the_next_round_publishes(engine, redis, settings, monkeypatch, caplog):
    create_tenant(engine, "a", fair_share=FairShare(2.0), now=1.0)
    stop, rounds = threading.Event(), []
    real = fair_shares.publish_from_store

    def flaky(*args):
        rounds.append(1)
        if len(rounds) == 1:
            raise redis_lib.ConnectionError("Redis restarting")
        stop.set()
        return real(*args)

    monkeypatch.setattr(fair_shares, "publish_from_store", flaky)
    with caplog.at_level(logging.WARNING, logger="farm.app.fair_shares"):
        fair_shares.keep_published(engine, redis, settings.namespace, stop, every_s=0.01)
    assert len(rounds) == 2 and "could not publish" in caplog.text
    assert list(fair_shares.read(redis, settings.namespace).values()) == [FairShare(2.0)]


def test_without_a_store_nothing_is_published_and_no_thread_runs(redis, settings):
    _, thread = fair_shares.start_publishing(None, redis, settings.namespace)
    assert thread is None and not redis.exists(Keys(settings.namespace).shares)


def test_the_publishing_thread_publishes_at_once_and_stops_when_told(engine, redis, settings):
    create_tenant(engine, "a", fair_share=FairShare(4.0), now=1.0)
    stop, thread = fair_shares.start_publishing(engine, redis, settings.namespace, every_s=60.0)
    try:
        for _ in range(100):
            if redis.exists(Keys(settings.namespace).shares):
                break
            time.sleep(0.05)
        assert list(fair_shares.read(redis, settings.namespace).values()) == [FairShare(4.0)]
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_the_planners_process_publishes_the_shares_of_the_store_it_serves(postgres_url, engine, redis, settings):
    from click.testing import CliRunner

    from farm.app.cli import main

    tenant, _ = create_tenant(engine, "a", fair_share=FairShare(6.0, {"gpu": 1}), now=1.0)
    env = {"FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace,
           "FARM_DATABASE_URL": postgres_url, "FARM_DATA_DIR": settings.data_dir}
    result = CliRunner().invoke(main, ["planner", "--once", "--backend", "local"], env=env)
    assert result.exit_code == 0, result.output
    assert fair_shares.read(redis, settings.namespace) == {f"t{tenant.id}": FairShare(6.0, {"gpu": 1})}


def test_shares_held_for_a_replay_come_back_after_a_republish_and_leave_the_entries_of_before(redis, settings):
    key = Keys(settings.namespace).shares
    redis.hset(key, mapping={"t1": FairShare(9.0).encode(), "t8": FairShare(8.0).encode()})
    with fair_shares.held(redis, settings.namespace, {"t1": FairShare(3.0), "t2": FairShare(2.0)}, every_s=0.02):
        assert fair_shares.read(redis, settings.namespace) == {
            "t1": FairShare(3.0), "t2": FairShare(2.0), "t8": FairShare(8.0)}
        fair_shares.publish(redis, settings.namespace, [])  # the planner's process, from a store without them
        deadline = time.monotonic() + 5
        while len(fair_shares.read(redis, settings.namespace)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fair_shares.read(redis, settings.namespace) == {"t1": FairShare(3.0), "t2": FairShare(2.0)}
    assert fair_shares.read(redis, settings.namespace) == {"t1": FairShare(9.0)}
