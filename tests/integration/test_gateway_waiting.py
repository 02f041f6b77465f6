"""Waiting calls against a real uvicorn, Redis and PostgreSQL: a long poll holds no shared connection, a tenant's
waiting calls are bounded (429 past its `waiting_calls`), and a poll whose caller hangs up ends at once."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest
import redis

from farm.app.gateway.config import GatewaySettings
from farm.client.core import POOL_SIZE
from farm.store.tenants import TenantLimits, create_tenant
from tests.integration.gateway_support import auth, client, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NOTHING = {"times": [0, 0]}  # visits no stage: finishes as it arrives


@pytest.fixture
def gateway(settings, engine):
    with running_gateway(settings, engine) as base:
        yield base


def tenant(engine, name: str, **limits) -> str:
    return create_tenant(engine, name, limits=TenantLimits(**limits) if limits else None, now=time.time())[1]


def open_batch(base: str, token: str, batch_id: str) -> None:
    with client(base, token) as c:
        opened = c.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 4, "batch_id": batch_id})
        assert opened.status_code == 201, opened.text


def raw_poll(base: str, token: str, path: str) -> socket.socket:
    """A long poll sent on a socket of its own, left waiting (the test closes it to hang up)."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    return sock


def poll_until_not_429(base: str, token: str, path: str, within_s: float) -> httpx.Response:
    deadline = time.monotonic() + within_s
    with client(base, token) as c:
        while True:
            reply = c.get(path)
            if reply.status_code != 429 or time.monotonic() > deadline:
                return reply
            time.sleep(0.1)


def blocked_reads(redis_url: str) -> int:
    """Redis connections blocked in XREAD now (tests running beside this one may hold a few)."""
    clients = redis.Redis.from_url(redis_url).client_list(_type="normal")
    return sum(1 for c in clients if c["cmd"] == "xread" and "b" in c["flags"])


def test_many_waiting_polls_of_one_tenant_leave_the_pool_to_the_others_and_all_wake_on_a_result(gateway, engine,
                                                                                                 redis_url):
    """Twice the gateway's pool of Redis connections in polls: each once held one for its wait (a blocking XREAD
    of up to a second, again and again), so the pool was theirs; now one connection waits for all of them."""
    polls = 2 * POOL_SIZE
    a, b = tenant(engine, "alpha", waiting_calls=polls), tenant(engine, "beta")
    open_batch(gateway, a, "wait")
    open_batch(gateway, b, "mine")

    async def scenario():
        limits = httpx.Limits(max_connections=polls + 8, max_keepalive_connections=polls + 8)
        async with httpx.AsyncClient(base_url=gateway, headers=auth(a), timeout=60, limits=limits) as alpha, \
                httpx.AsyncClient(base_url=gateway, headers=auth(b), timeout=60) as beta:
            waiting = [asyncio.create_task(alpha.get("/v1/batches/wait/results", params={"wait_s": 45}))
                       for _ in range(polls)]
            await asyncio.sleep(2)  # every poll is in its wait
            assert not any(task.done() for task in waiting)
            assert blocked_reads(redis_url) < POOL_SIZE // 4
            status = await asyncio.wait_for(beta.get("/v1/batches/mine"), 20)  # not queued behind the polls
            assert status.status_code == 200
            started = time.monotonic()
            submitted = await alpha.post("/v1/batches/wait/requests", json={"request_id": "r0", "payload": NOTHING})
            assert submitted.status_code == 200, submitted.text
            pages = [reply.json() for reply in await asyncio.wait_for(asyncio.gather(*waiting), 30)]
            return pages, time.monotonic() - started
    pages, woke_after = asyncio.run(scenario())
    assert all([r["request_id"] for r in page["results"]] == ["r0"] for page in pages)
    assert woke_after < 30  # woken by the result, not by their 45 s wait


def test_polls_past_the_tenants_waiting_calls_are_refused_with_429_and_another_tenant_is_not(gateway, engine):
    a, b = tenant(engine, "alpha", waiting_calls=2), tenant(engine, "beta", waiting_calls=2)
    open_batch(gateway, a, "w")
    open_batch(gateway, b, "w")
    held = [raw_poll(gateway, a, "/v1/batches/w/results?wait_s=30") for _ in range(2)]
    try:
        time.sleep(1)  # both are waiting
        with client(gateway, a) as alpha:
            refused = alpha.get("/v1/batches/w/results", params={"wait_s": 5})
            assert refused.status_code == 429 and "2 calls waiting" in refused.json()["error"]["message"]
            assert refused.headers["retry-after"] == "1"
            assert alpha.get("/v1/batches/w/results", params={"wait_s": 0}).status_code == 200  # no wait, no slot
        with client(gateway, b) as beta:
            assert beta.get("/v1/batches/w/results", params={"wait_s": 0.2}).status_code == 200
    finally:
        for sock in held:
            sock.close()


def test_a_poll_whose_caller_hangs_up_gives_its_slot_back_at_once(gateway, engine):
    a = tenant(engine, "alpha", waiting_calls=1)
    open_batch(gateway, a, "w")
    sock = raw_poll(gateway, a, "/v1/batches/w/results?wait_s=60")
    time.sleep(1)
    with client(gateway, a) as alpha:
        assert alpha.get("/v1/batches/w/results", params={"wait_s": 1}).status_code == 429
    sock.close()  # a minute before its wait ends
    assert poll_until_not_429(gateway, a, "/v1/batches/w/results?wait_s=0.2", within_s=10).status_code == 200


def test_a_groups_wait_counts_as_a_waiting_call_and_wakes_on_a_result(gateway, engine):
    a = tenant(engine, "alpha", waiting_calls=1)
    with client(gateway, a) as alpha:
        assert alpha.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 2, "group_size": 2,
                                               "batch_id": "g"}).status_code == 201
    sock = raw_poll(gateway, a, "/v1/batches/g/groups?wait_s=30")
    try:
        time.sleep(1)
        with client(gateway, a) as alpha:
            assert alpha.get("/v1/batches/g/results", params={"wait_s": 1}).status_code == 429
            for i in range(2):
                alpha.post("/v1/batches/g/requests", json={"request_id": f"r{i}", "payload": NOTHING, "group": "p"})
        sock.settimeout(20)
        answer = b""
        while b'"complete"' not in answer:  # the body's last field
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200") and b'"group":"p"' in answer
    finally:
        sock.close()


def test_an_open_stream_holds_a_waiting_call_until_it_closes(gateway, engine):
    a = tenant(engine, "alpha", waiting_calls=1)
    open_batch(gateway, a, "s")
    with client(gateway, a) as alpha:
        with alpha.stream("GET", "/v1/batches/s/results/stream") as stream:
            assert stream.status_code == 200
            time.sleep(0.5)
            refused = alpha.get("/v1/batches/s/results", params={"wait_s": 1})
            assert refused.status_code == 429
            with client(gateway, a) as second:
                assert second.get("/v1/batches/s/results/stream").status_code == 429  # refused before it starts
    assert poll_until_not_429(gateway, a, "/v1/batches/s/results?wait_s=0.2", within_s=10).status_code == 200


def test_a_stopping_gateway_cuts_a_poll_in_flight_after_its_grace_instead_of_waiting_out_the_poll(settings, engine):
    a = tenant(engine, "alpha")
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=0.0, shutdown_grace_s=0.5)) as base:
        open_batch(base, a, "w")
        sock = raw_poll(base, a, "/v1/batches/w/results?wait_s=60")
        time.sleep(1)
        stopping = time.monotonic()
    try:
        assert time.monotonic() - stopping < 15  # not the poll's 60 s (nor the 20 s the stop is given)
    finally:
        sock.close()
