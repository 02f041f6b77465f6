"""The embedded farm's Redis keeps an append-only file fsynced every second: a restart of it mid-run, or the
next farm of the data dir, finds every batch and request it was given, and every result comes exactly once."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import redis

from farm.app.embedded import EmbeddedFarm
from farm.client.flows import Flows
from farm.client.sync import RewardClient
from farm.config import Settings
from farm.protocol.keys import Keys
from farm.results import Status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SIZE = 8


def done_ids(r: redis.Redis, keys: Keys, batch_id: str) -> list[str]:
    """The request id of every result the farm wrote to the batch's result stream, duplicates included."""
    return [json.loads(fields["r"])["request_id"] for _, fields in r.xrange(keys.batch(batch_id, ":done"))
            if "r" in fields]


def never_restored(monkeypatch) -> None:
    """The client reopens a batch the farm forgot; here that would hide a loss, so it fails the test."""
    def restore(self, batch):
        raise AssertionError(f"the farm forgot batch {batch.id} across its Redis restart")
    monkeypatch.setattr(Flows, "restore", restore)


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "shutdown"])
def test_a_batch_outlives_a_restart_of_the_embedded_redis_and_each_result_comes_once(tmp_path, monkeypatch, kill):
    never_restored(monkeypatch)
    with EmbeddedFarm(Settings(data_dir=str(tmp_path), lease_s=2.0)) as farm:
        farm.wait_ready()
        keys = Keys(farm.settings.namespace)
        with RewardClient(farm.settings) as client:
            batch = client.open_batch("task-aof", "synthetic", SIZE)
            batch.submit_many([(f"r{i}", {"times": [0.25, 0.0]}) for i in range(SIZE)])  # ~2 s of one worker
            time.sleep(1.3)  # past one everysec fsync, with some results written and the rest pending
            r = redis.Redis.from_url(farm.settings.redis_url, decode_responses=True)
            before = done_ids(r, keys, batch.id)
            r.close()
            assert 0 < len(before) < SIZE
            farm.restart_redis(kill=kill)
            r = redis.Redis.from_url(farm.settings.redis_url, decode_responses=True)
            try:
                assert r.hget(keys.batch(batch.id), "arrived") == str(SIZE)  # before any client call reached it
                assert done_ids(r, keys, batch.id)[:len(before)] == before
                results = batch.gather(timeout=45)
                written = Counter(done_ids(r, keys, batch.id))
            finally:
                r.close()
    assert [x.request_id for x in results] == [f"r{i}" for i in range(SIZE)]
    assert all(x.status is Status.OK for x in results)
    assert written == Counter({f"r{i}": 1 for i in range(SIZE)})


def test_the_next_farm_of_the_data_dir_finds_what_the_last_one_was_given(tmp_path):
    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), workers_per_stage=0) as farm:
        with RewardClient(farm.settings) as client:
            batch = client.open_batch("task-next", "synthetic", 2)
            batch.submit_many([("r0", {"times": [0.05, 0.0]}), ("r1", {"times": [0.05, 0.0]})])
            batch_id = batch.id
            client.let_go(batch_id)  # the batch outlives this client: the next farm's trainer waits on it
    assert (tmp_path / "appendonly.aof").stat().st_size > 0
    with EmbeddedFarm(Settings(data_dir=str(tmp_path))) as farm:
        farm.wait_ready()
        with RewardClient(farm.settings) as client:
            results = client.batch(batch_id).gather(timeout=30)
    assert [(x.request_id, x.status) for x in results] == [("r0", Status.OK), ("r1", Status.OK)]


def test_a_data_dir_from_before_the_append_only_file_keeps_its_snapshot(tmp_path):
    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), workers_per_stage=0) as farm:
        r = redis.Redis.from_url(farm.settings.redis_url)
        r.set("kept", "1")
        r.config_set("appendonly", "no")  # as a farm of an older release ran it: a snapshot only
        r.close()
    (tmp_path / "appendonly.aof").unlink()
    assert (tmp_path / "redis.db").exists()
    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), workers_per_stage=0) as farm:
        r = redis.Redis.from_url(farm.settings.redis_url)
        try:
            assert r.get("kept") == b"1"
            assert r.info("persistence")["aof_enabled"] == 1
        finally:
            r.close()
    assert (tmp_path / "appendonly.aof").stat().st_size > 0


def test_the_planner_daemon_rides_through_a_redis_restart_and_decides_again(tmp_path):
    from farm.protocol import heartbeat

    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), planner=True) as farm:
        r = redis.Redis.from_url(farm.settings.redis_url, decode_responses=True)
        deadline = time.monotonic() + 60
        while heartbeat.read(r, farm.settings.namespace) is None:
            assert time.monotonic() < deadline, "the planner never beat"
            time.sleep(0.2)
        r.close()
        farm.restart_redis(down_s=2.0)  # longer than the daemon's own retries: its epoch wait sees the outage
        restarted = time.time()
        r = redis.Redis.from_url(farm.settings.redis_url, decode_responses=True)
        try:
            deadline = time.monotonic() + 30
            while True:
                beat = heartbeat.read(r, farm.settings.namespace)
                if beat is not None and beat.at > restarted + 1.0:
                    break
                assert farm._procs["planner"].poll() is None, "the planner daemon died with the Redis restart"
                assert time.monotonic() < deadline, "the planner did not decide again after the restart"
                time.sleep(0.2)
        finally:
            r.close()
