"""Tenants on a shared gateway: none can see, cancel or submit into another's batch (every endpoint answers
404, as for a batch that does not exist, and says nothing of the other's), each is held to its limits, and
bad input gets a clear 4xx that touches nothing else."""

from __future__ import annotations

import json
import socket
import time

import pytest

from farm.app.gateway.config import GatewaySettings
from farm.store.tenants import TenantLimits, create_tenant, revoke_tenant
from tests.integration.gateway_support import client, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

QUEUED = {"times": [1, 0]}

# every endpoint that names a batch: (method, path, json body)
ON_A_BATCH = [
    ("GET", "/v1/batches/{b}", None),
    ("POST", "/v1/batches/{b}/requests", {"request_id": "intruder", "payload": QUEUED}),
    ("POST", "/v1/batches/{b}/requests/bulk", {"requests": [{"request_id": "intruder", "payload": QUEUED}]}),
    ("GET", "/v1/batches/{b}/results?wait_s=0", None),
    ("GET", "/v1/batches/{b}/results/stream", None),
    ("GET", "/v1/batches/{b}/groups?wait_s=0", None),
    ("POST", "/v1/batches/{b}/cancel", None),
    ("POST", "/v1/batches/{b}/seal", None),
]


@pytest.fixture
def gateway(settings, engine):
    """A gateway with the default body timeout: a fresh gateway's first request can take over a second on a
    loaded machine (its lazy set-up), which a short timeout turns into a 408 (once in CI: a limit test's batch
    was never opened)."""
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=0.0, max_body_bytes=200_000)) as base:
        yield base


@pytest.fixture
def hasty_gateway(settings, engine):
    """As `gateway`, with a body timeout of 1 s: only for the test of a body that trickles in."""
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=0.0, max_body_bytes=200_000,
                                                           body_timeout_s=1.0)) as base:
        yield base


@pytest.fixture
def tenants(engine):
    _, a = create_tenant(engine, "alpha", now=time.time())
    _, b = create_tenant(engine, "beta", now=time.time())
    return a, b


@pytest.fixture
def alpha_batch(gateway, tenants):
    with client(gateway, tenants[0]) as a:
        assert a.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 3,
                                           "batch_id": "secret"}).status_code == 201
        a.post("/v1/batches/secret/requests", json={"request_id": "r0", "payload": QUEUED})
        yield a


@pytest.mark.parametrize("method,path,body", ON_A_BATCH, ids=[f"{m} {p}" for m, p, _ in ON_A_BATCH])
def test_another_tenant_gets_404_on_every_endpoint_and_the_batch_is_untouched(gateway, tenants, alpha_batch,
                                                                              method, path, body):
    with client(gateway, tenants[1]) as b:
        reply = b.request(method, path.format(b="secret"), json=body)
    assert reply.status_code == 404, reply.text
    assert reply.json()["error"]["message"] == "no batch 'secret'" or "'secret'" in reply.json()["error"]["message"]
    assert "t1" not in reply.text and "alpha" not in reply.text
    status = alpha_batch.get("/v1/batches/secret").json()
    assert (status["state"], status["arrived"], status["size"]) == ("open", 1, 3)


def test_two_tenants_may_use_the_same_batch_id_without_meeting(gateway, tenants, alpha_batch):
    with client(gateway, tenants[1]) as b:
        reply = b.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 5, "batch_id": "secret"})
        assert reply.status_code == 201 and reply.json()["arrived"] == 0 and reply.json()["size"] == 5
    assert alpha_batch.get("/v1/batches/secret").json()["size"] == 3


def test_a_call_without_a_token_is_401(gateway):
    with client(gateway) as anonymous:
        reply = anonymous.get("/v1/batches/x")
    assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"


def test_an_unknown_token_is_401(gateway, tenants):
    with client(gateway, "rf_not-a-token") as stranger:
        assert stranger.get("/v1/batches/x").status_code == 401


def test_a_revoked_tenant_is_refused(gateway, engine, tenants):
    revoke_tenant(engine, "alpha", now=time.time())
    with client(gateway, tenants[0]) as a:
        assert a.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 1}).status_code == 401


def test_the_token_may_come_in_the_path(gateway, tenants, alpha_batch):
    with client(gateway) as anonymous:
        assert anonymous.get(f"/t/{tenants[0]}/v1/batches/secret").json()["arrived"] == 1


def test_a_tenant_at_its_open_batch_limit_gets_429_until_one_closes(gateway, engine):
    _, token = create_tenant(engine, "small", limits=TenantLimits(open_batches=2), now=time.time())
    with client(gateway, token) as c:
        for name in ("b1", "b2"):
            assert c.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 1,
                                               "batch_id": name}).status_code == 201
        refused = c.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 1, "batch_id": "b3"})
        assert refused.status_code == 429 and "2 batches open" in refused.json()["error"]["message"]
        assert refused.headers["retry-after"] == "1"
        c.post("/v1/batches/b1/cancel")
        assert c.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 1,
                                           "batch_id": "b3"}).status_code == 201


def test_reopening_a_batch_with_another_size_is_refused_and_it_stays_counted(gateway, engine):
    _, token = create_tenant(engine, "two", limits=TenantLimits(open_batches=2), now=time.time())
    with client(gateway, token) as c:
        body = {"task": "t", "pipeline": "synthetic", "size": 1, "batch_id": "b1"}
        assert c.post("/v1/batches", json=body).status_code == 201
        assert c.post("/v1/batches", json={**body, "size": 2}).status_code == 409
        assert c.post("/v1/batches", json={**body, "batch_id": "b2"}).status_code == 201
        assert c.post("/v1/batches", json={**body, "batch_id": "b3"}).status_code == 429


def test_a_tenant_at_its_queued_request_limit_gets_429(gateway, engine):
    _, token = create_tenant(engine, "narrow", limits=TenantLimits(queued_requests=3), now=time.time())
    with client(gateway, token) as c:
        opened = c.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 10, "batch_id": "q"})
        assert opened.status_code == 201, opened.text
        assert c.post("/v1/batches/q/requests/bulk", json={"requests": [
            {"request_id": f"r{i}", "payload": QUEUED} for i in range(3)]}).status_code == 200
        refused = c.post("/v1/batches/q/requests", json={"request_id": "r3", "payload": QUEUED})
        assert refused.status_code == 429 and "3 requests outstanding" in refused.json()["error"]["message"]
        assert c.get("/v1/batches/q").json()["arrived"] == 3


def test_a_payload_over_the_tenants_limit_is_413_and_nothing_is_sent(gateway, engine):
    _, token = create_tenant(engine, "tiny", limits=TenantLimits(payload_bytes=100), now=time.time())
    with client(gateway, token) as c:
        opened = c.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 2, "batch_id": "p"})
        assert opened.status_code == 201, opened.text
        refused = c.post("/v1/batches/p/requests/bulk", json={"requests": [
            {"request_id": "ok", "payload": QUEUED}, {"request_id": "big", "payload": {"times": [1, 0], "x": "y" * 200}}]})
        assert refused.status_code == 413 and "'big'" in refused.json()["error"]["message"]
        assert c.get("/v1/batches/p").json()["arrived"] == 0


def test_a_body_over_the_gateways_limit_is_413_before_it_is_read(gateway, tenants):
    with client(gateway, tenants[0]) as c:
        reply = c.post("/v1/batches/x/requests", content=b"{" + b" " * 300_000 + b"}",
                       headers={"content-type": "application/json"})
    assert reply.status_code == 413 and "limit of 200000 bytes" in reply.json()["error"]["message"]


def test_a_body_that_trickles_in_is_408_and_the_gateway_serves_others_meanwhile(hasty_gateway, tenants):
    gateway = hasty_gateway
    host, port = gateway.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as slow:
        slow.sendall(f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tenants[0]}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"task\"".encode())
        with client(gateway, tenants[1]) as other:
            assert other.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 1}).status_code == 201
        slow.settimeout(10)
        answer = b""
        while chunk := slow.recv(4096):  # the gateway closes the connection after its answer
            answer += chunk
    assert answer.decode().startswith("HTTP/1.1 408"), answer
    assert b"did not arrive within 1 s" in answer


@pytest.mark.parametrize("body,status,needle", [
    (b"{not json", 422, "JSON"),
    (json.dumps({"task": "t", "pipeline": "synthetic", "size": "8"}).encode(), 422, "size"),
    (json.dumps({"task": "t", "pipeline": "synthetic", "size": 8, "surprise": 1}).encode(), 422, "surprise"),
    (json.dumps({"task": "t", "pipeline": "no-such-pipeline", "size": 8}).encode(), 400, "no-such-pipeline"),
    (json.dumps({"task": "t t", "pipeline": "synthetic", "size": 8}).encode(), 400, "task"),
    (json.dumps({"task": "t", "pipeline": "synthetic", "size": 0}).encode(), 400, "batch size"),
    (json.dumps([1, 2]).encode(), 422, ""),
    (json.dumps({"task": "t", "pipeline": "synthetic", "size": 8, "batch_id": "ebf"}).encode(), 400, "queue's part"),
], ids=["malformed", "string-size", "unknown-key", "unknown-pipeline", "bad-task", "zero-size", "array",
        "queue-part-name"])
def test_bad_input_gets_a_clear_4xx(gateway, tenants, body, status, needle):
    with client(gateway, tenants[0]) as c:
        reply = c.post("/v1/batches", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    assert needle in reply.text
