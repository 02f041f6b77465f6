"""Every route counts against every limit (issue 32): `/run_code` and `/get_reward` as the native API, checked
in the submit scripts as each request arrives, so concurrent calls cannot pass a tenant's limit together; and a
refused call leaves nothing of itself in Redis. No workers run here: whatever is admitted stays outstanding."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import redis

from farm.app.gateway.config import GatewaySettings
from farm.errors import LimitExceeded
from farm.store.tenants import TenantLimits, create_tenant
from tests.integration.gateway_support import auth, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

QUEUED = {"times": [1, 0]}
PROMPT = "What is 2 + 3? Put the final answer in \\boxed{}.\n"
ROLLING = {"batch_size": 8, "rollover_s": 30.0, "wait_s": 3.0}  # past any refusal, under load too


@pytest.fixture
def gateway(settings, engine):
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=0.0, roll_check_s=0.1)) as base:
        yield base


@pytest.fixture
def store(settings):
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    yield r
    r.close()


def tenant(engine, **limits) -> tuple[int, str]:
    tenant_row, token = create_tenant(engine, f"l{time.monotonic_ns()}", limits=TenantLimits(**limits),
                                      config={"openrlhf": ROLLING, "sandbox_fusion": ROLLING}, now=time.time())
    return tenant_row.id, token


def arrived(store, namespace: str, tenant_id: int) -> int:
    """Requests that reached any of the tenant's batches."""
    heads = [k for k in store.scan_iter(match=f"{namespace}:b:t{tenant_id}:*") if k.count(":") == 3]
    return sum(int(store.hget(k, "arrived") or 0) for k in heads)


def sample_keys(store, namespace: str, tenant_id: int) -> list[str]:
    return list(store.scan_iter(match=f"{namespace}:gw:roll:t{tenant_id}:*:s:*"))


async def post_all(url: str, token: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60, headers=auth(token)) as http:
        return await asyncio.gather(*(http.post(url, json=b) for b in bodies))


def test_concurrent_runs_never_pass_the_queued_request_limit(gateway, engine, settings, store):
    tenant_id, token = tenant(engine, queued_requests=2)
    runs = [{"code": f"print({i})", "language": "python"} for i in range(5)]
    replies = asyncio.run(post_all(f"{gateway}/run_code", token, runs))
    codes = sorted(r.status_code for r in replies)
    assert codes.count(429) == 3 and codes.count(504) == 2, [r.text for r in replies]
    assert arrived(store, settings.namespace, tenant_id) == 2
    assert len(sample_keys(store, settings.namespace, tenant_id)) == 2  # the refused left no sample behind


def test_a_reward_call_over_the_limit_is_refused_and_scores_nothing_past_it(gateway, engine, settings, store):
    tenant_id, token = tenant(engine, queued_requests=1)
    samples = [PROMPT + f"\\boxed{{{i}}}" for i in range(5)]
    reply = httpx.post(f"{gateway}/get_reward", headers=auth(token), timeout=60,
                       json={"query": samples, "prompts": [PROMPT] * 5, "labels": ["5"] * 5})
    assert reply.status_code == 429 and "limit is 1" in reply.json()["error"]["message"]
    assert arrived(store, settings.namespace, tenant_id) <= 1


def test_a_retried_run_is_not_refused_by_the_limit_it_already_counts_in(gateway, engine, settings, store):
    tenant_id, token = tenant(engine, queued_requests=1)
    run = {"code": "print('again')", "language": "python"}
    first, again = (asyncio.run(post_all(f"{gateway}/run_code", token, [run]))[0] for _ in range(2))
    assert (first.status_code, again.status_code) == (504, 504)  # no worker: both wait on the one request
    assert arrived(store, settings.namespace, tenant_id) == 1


def test_concurrent_native_submits_never_pass_the_queued_request_limit(gateway, engine, settings, store):
    tenant_id, token = tenant(engine, queued_requests=2)
    httpx.post(f"{gateway}/v1/batches", headers=auth(token),
               json={"task": "t", "pipeline": "synthetic", "size": 20, "batch_id": "race"}).raise_for_status()
    bodies = [{"request_id": f"r{i}", "payload": QUEUED} for i in range(10)]
    replies = asyncio.run(post_all(f"{gateway}/v1/batches/race/requests", token, bodies))
    assert sorted(r.status_code for r in replies) == [200] * 2 + [429] * 8
    assert arrived(store, settings.namespace, tenant_id) == 2


def test_a_run_past_the_open_batch_limit_is_refused_and_leaves_nothing(gateway, engine, settings, store):
    tenant_id, token = tenant(engine, open_batches=1)
    httpx.post(f"{gateway}/v1/batches", headers=auth(token),
               json={"task": "t", "pipeline": "synthetic", "size": 2, "batch_id": "held"}).raise_for_status()
    reply = httpx.post(f"{gateway}/run_code", headers=auth(token), timeout=60,
                       json={"code": "print(1)", "language": "python"})
    assert reply.status_code == 429 and "1 batches open" in reply.json()["error"]["message"]
    assert not sample_keys(store, settings.namespace, tenant_id)
    assert store.hget(f"{settings.namespace}:gw:roll:t{tenant_id}:sandbox_fusion", "count") in (None, "0")


def test_a_bulk_of_refused_payloads_keeps_none_of_them(gateway, engine, settings, store):
    """10,000 refused 6 KB payloads once left a 64 MB key for 24 h: a request finished at admission keeps only
    its payload's digest, enough to tell a resubmission (a duplicate) from another payload (a conflict)."""
    _, token = tenant(engine)
    refused = {"times": [-1, 0], "pad": "x" * 6000}
    with httpx.Client(base_url=gateway, headers=auth(token), timeout=60) as http:
        http.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 2000,
                                       "batch_id": "junk"}).raise_for_status()
        bulk = {"requests": [{"request_id": f"r{i}", "payload": refused} for i in range(2000)]}
        assert set(http.post("/v1/batches/junk/requests/bulk", json=bulk).json()["kinds"]) == {"finished"}
        assert http.post("/v1/batches/junk/requests", json={"request_id": "r0", "payload": refused}
                         ).json()["kind"] == "duplicate"
        other = http.post("/v1/batches/junk/requests", json={"request_id": "r1", "payload": {"times": [-2, 0]}})
        assert other.status_code == 409 and other.json()["error"]["type"] == "DuplicateRequest"
        results = http.get("/v1/batches/junk/results", params={"wait_s": 0, "limit": 1}).json()["results"]
    assert results[0]["status"] == "invalid_input"
    [key] = store.scan_iter(match=f"{settings.namespace}:b:*junk:payload")
    assert store.memory_usage(key) < 2000 * 200  # the payloads themselves were 12 MB
    assert all(v.startswith("#sha256:") for v in store.hvals(key))



def test_a_batch_admitted_and_not_yet_opened_stays_counted(redis_url, namespace):
    """Admission and opening are two scripts: a count read between them must not drop the batch (it did, and
    five samples then passed a limit of one)."""
    import redis.asyncio as aioredis

    from farm.app.gateway.limits import Limits

    async def main():
        r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            limits = Limits(r, namespace)
            assert await limits.admit_batch(r, 1, "t1:opening", 1)
            with pytest.raises(LimitExceeded, match="1 batches open"):
                await limits.admit_batch(r, 1, "t1:next", 1)
        finally:
            await r.aclose()
    asyncio.run(main())
