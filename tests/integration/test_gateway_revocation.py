"""Revocation takes effect on work in flight: a revoked tenant's long polls, streams and waiting OpenRLHF calls
end promptly with 401, not at their timeout, while another tenant's waits go on."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from farm.app.gateway.config import GatewaySettings
from farm.store.tenants import create_tenant, revoke_tenant
from tests.integration.gateway_support import auth, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

QUEUED = {"times": [1, 0]}  # no worker runs in these tests: a request waits for ever
WAIT = 60  # what every wait asks for; a revoked one must end long before


@pytest.fixture
def gateway(settings, engine):
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=1.0, roll_check_s=0.1)) as base:
        yield base


@pytest.fixture
def tenants(gateway, engine):
    tokens = {}
    for name in ("alpha", "beta"):
        _, token = create_tenant(engine, name, now=time.time(), config={"openrlhf": {"batch_size": 4}})
        tokens[name] = token
        with httpx.Client(base_url=gateway, headers=auth(token), timeout=10) as c:
            assert c.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 2,
                                               "batch_id": "b"}).status_code == 201
            c.post("/v1/batches/b/requests", json={"request_id": "r0", "payload": QUEUED})
    return tokens


def revoke_soon(engine, name: str, after_s: float = 0.5) -> None:
    """Revoke the tenant from another thread once its calls are waiting."""
    threading.Timer(after_s, lambda: revoke_tenant(engine, name, now=time.time())).start()


def timed(call) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    reply = call()
    return reply, time.monotonic() - started


@pytest.mark.parametrize("path", ["/v1/batches/b/results?wait_s=60", "/v1/batches/b/groups?wait_s=60"],
                         ids=["results", "groups"])
def test_a_revoked_tenants_long_poll_ends_with_401_at_once(gateway, engine, tenants, path):
    revoke_soon(engine, "alpha")
    with httpx.Client(base_url=gateway, headers=auth(tenants["alpha"]), timeout=WAIT + 10) as c:
        reply, took = timed(lambda: c.get(path))
    assert reply.status_code == 401 and "revoked" in reply.json()["error"]["message"]
    assert took < 6, took


def test_a_revoked_tenants_stream_ends_with_an_error_line(gateway, engine, tenants):
    revoke_soon(engine, "alpha")
    started = time.monotonic()
    with httpx.Client(base_url=gateway, headers=auth(tenants["alpha"]), timeout=WAIT + 10) as c:
        with c.stream("GET", "/v1/batches/b/results/stream") as stream:
            lines = [json.loads(line) for line in stream.iter_lines() if line]
    assert lines == [{"error": {"type": "Unauthenticated", "message": lines[0]["error"]["message"]}}]
    assert "revoked" in lines[0]["error"]["message"] and time.monotonic() - started < 10


def test_a_revoked_tenants_waiting_openrlhf_call_ends_with_401(gateway, engine, tenants):
    revoke_soon(engine, "alpha", after_s=1.0)
    sample = {"query": ["1 + 1 = \\boxed{2}"], "prompts": ["1 + 1 = "], "labels": ["2"]}  # no math worker runs
    reply, took = timed(lambda: httpx.post(f"{gateway}/t/{tenants['alpha']}/get_reward", json=sample, timeout=WAIT))
    assert reply.status_code == 401 and took < 7, (reply.status_code, took)


def test_another_tenants_long_poll_goes_on_waiting(gateway, engine, tenants):
    revoke_soon(engine, "alpha")

    async def both():
        async with httpx.AsyncClient(base_url=gateway, timeout=WAIT + 10) as c:
            alpha = asyncio.create_task(c.get("/v1/batches/b/results?wait_s=60", headers=auth(tenants["alpha"])))
            beta = asyncio.create_task(c.get("/v1/batches/b/results?wait_s=4", headers=auth(tenants["beta"])))
            return await alpha, await beta, time.monotonic()
    started = time.monotonic()
    alpha, beta, ended = asyncio.run(both())
    assert alpha.status_code == 401
    assert beta.status_code == 200 and beta.json()["results"] == [] and ended - started >= 4
