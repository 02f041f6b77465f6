"""The embedded farm's Redis runs with a memory bound that evicts nothing: at the bound a write is refused with an
error its caller sees and every batch and request already held stays (farm.app.redis_memory)."""

from __future__ import annotations

import re
import time

import httpx
import pytest
import redis
from redis.exceptions import ResponseError

from farm.app.embedded import EmbeddedFarm
from farm.app.redis_memory import MAXMEMORY_ENV
from farm.client.sync import RewardClient
from farm.config import Settings
from farm.protocol.keys import Keys, Part
from farm.store.tenants import create_tenant
from tests.integration.gateway_support import client, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def farm(tmp_path, monkeypatch):
    monkeypatch.setenv(MAXMEMORY_ENV, "64mb")
    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), workers_per_stage=0, metrics_port=0) as farm:
        r = redis.Redis.from_url(farm.settings.redis_url, decode_responses=True)
        yield farm, r
        r.close()


def test_the_embedded_redis_has_the_bound_it_was_given_and_the_metrics_say_so(farm):
    farm, r = farm
    assert r.config_get("maxmemory") == {"maxmemory": str(64 << 20)}
    assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    text = httpx.get(farm.metrics_url, timeout=10).text
    assert float(re.search(r"^farm_redis_memory_max_bytes (\S+)$", text, re.M).group(1)) == 64 << 20
    assert 'farm_redis_maxmemory_policy{policy="noeviction"} 1.0' in text


def test_at_its_bound_a_submit_is_refused_loudly_and_nothing_held_is_evicted(farm):
    farm, r = farm
    r.config_set("maxmemory", r.info("memory")["used_memory"] + (4 << 20))  # room for some 40 payloads
    taken = 0
    with RewardClient(farm.settings, keep_alive=False) as client:
        batch = client.open_batch("full", "synthetic", 1000)
        with pytest.raises(ResponseError, match="OOM command not allowed"):
            for i in range(1000):
                batch.submit(f"r{i}", {"times": [1, 0], "pad": "x" * 100_000})
                taken += 1
    assert 10 < taken < 1000
    assert r.hlen(Keys(farm.settings.namespace).batch(batch.id, Part.payload)) == taken
    assert r.info("stats")["evicted_keys"] == 0


def test_at_its_bound_the_gateway_answers_503_saying_why(farm, engine):
    farm, r = farm
    _, token = create_tenant(engine, "filler", now=time.time())
    with running_gateway(farm.settings, engine) as base, client(base, token) as http:
        assert http.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 9,
                                              "batch_id": "b"}).status_code == 201
        r.config_set("maxmemory", 1 << 20)  # far below what it holds
        reply = http.post("/v1/batches/b/requests", json={"request_id": "r0", "payload": {"times": [1, 0]}})
    assert reply.status_code == 503 and "memory bound" in reply.json()["error"]["message"]
    assert reply.headers["retry-after"] == "5"
