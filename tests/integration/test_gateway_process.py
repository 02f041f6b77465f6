"""`farm gateway` as the process a deployment runs: it serves tenants from the store; its access log never
shows a token, in any form a request carries one, and names the caller by a forwarded address only when the
peer is a proxy it was told to trust."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import pytest

from farm.store.tenants import create_tenant
from tests.integration.gateway_support import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@contextmanager
def gateway_process(settings, postgres_url, log, *args):
    """The port of a `farm gateway` process writing to `log`, until the block ends (then it is stopped)."""
    port = free_port()
    env = dict(os.environ, FARM_REDIS_URL=settings.redis_url, FARM_NAMESPACE=settings.namespace,
               FARM_DATABASE_URL=postgres_url, FORWARDED_ALLOW_IPS="*")  # uvicorn's own trust must not apply
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "farm.app.cli", "gateway", "--port", str(port), *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def raw(port: int, head: str, body: bytes = b"") -> str:
    """Send a request exactly as written (no client normalises its path); the status line of the answer."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(head.encode() + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        s.settimeout(10)
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    return answer.decode(errors="replace").splitlines()[0]


def test_the_gateway_process_serves_a_tenant_and_logs_no_token(settings, engine, postgres_url, tmp_path):
    _, token = create_tenant(engine, "acme", now=time.time())
    log = tmp_path / "gateway.log"
    encoded = "".join(f"%{ord(c):02X}" for c in token)
    forms = [f"GET /t/{token}/v1/ping", f"GET /t/{token}", f"GET /t/{token}/v1/ping?cursor=0-0&key={token}",
             f"GET /T/{token}/v1/ping", f"GET /t/{encoded}/v1/ping", f"GET //t/{token}/v1/ping",
             f"GET /t/{token}/ui", f"POST /t/{token}/get_reward", f"GET /v1/batches/{token}"]
    with gateway_process(settings, postgres_url, log) as port:
        assert httpx.get(f"http://127.0.0.1:{port}/t/{token}/v1/ping", timeout=5).json() == "pong"
        for form in forms:
            raw(port, f"{form} HTTP/1.1\r\nHost: x\r\n")
        assert raw(port, f"GET /v1/ping HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n").endswith("200 OK")
        assert raw(port, f"GET /t/{encoded}/v1/ping HTTP/1.1\r\nHost: x\r\n").endswith("200 OK")
    text = log.read_text()
    assert token not in text and token[3:15] not in text and encoded[:30] not in text
    for shown in ("/t/***/v1/ping", "/t/*** ", "/t/***/v1/ping?cursor=0-0&***=***", "/***/***/v1/ping",
                  "//t/***/v1/ping", "/t/***/ui", "/t/***/get_reward", "/v1/batches/***", '"GET /v1/ping HTTP/1.1" 200'):
        assert shown in text, (shown, text)


def test_a_forwarded_address_is_ignored_from_a_peer_not_trusted(settings, engine, postgres_url, tmp_path):
    log = tmp_path / "gateway.log"
    with gateway_process(settings, postgres_url, log) as port:  # no --forwarded-allow-ips: trust none
        raw(port, "GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.9\r\n")
    text = log.read_text()
    assert '127.0.0.1:' in text and "203.0.113.9" not in text


def test_a_forwarded_address_names_the_caller_behind_a_trusted_proxy(settings, engine, postgres_url, tmp_path):
    log = tmp_path / "gateway.log"
    with gateway_process(settings, postgres_url, log, "--forwarded-allow-ips", "10.0.0.0/8,127.0.0.1") as port:
        raw(port, "GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.9, 10.1.1.1\r\n")
    assert '203.0.113.9 - "GET /v1/ping HTTP/1.1" 401' in log.read_text()


def test_a_proxy_that_is_not_an_address_stops_the_gateway_before_it_starts(settings, postgres_url):
    env = dict(os.environ, FARM_REDIS_URL=settings.redis_url, FARM_DATABASE_URL=postgres_url)
    done = subprocess.run([sys.executable, "-m", "farm.app.cli", "gateway", "--port", str(free_port()),
                           "--forwarded-allow-ips", "*"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "--forwarded-allow-ips" in done.stderr and "not an IP address" in done.stderr


def test_the_gateway_refuses_to_start_on_a_store_without_the_tenants_table(settings, postgres_url):
    env = dict(os.environ, FARM_REDIS_URL=settings.redis_url, FARM_DATABASE_URL=postgres_url)
    done = subprocess.run([sys.executable, "-m", "farm.app.cli", "gateway", "--port", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "farm db upgrade" in done.stderr


def test_the_gateway_runs_on_uvloop_which_its_extra_installs(settings, engine, postgres_url, tmp_path):
    log = tmp_path / "gateway.log"
    with gateway_process(settings, postgres_url, log):
        pass  # serving: its start is logged
    assert "gateway: event loop uvloop" in log.read_text()
