"""Fuzzing the gateway from its own OpenAPI schema (schemathesis): valid and invalid bodies, parameters and
paths, against a real uvicorn with workers behind it. Whatever comes in, the answer is never a server error:
bad input is the caller's 4xx. The one 5xx the gateway means to give is 504 from `/get_reward` and
`/run_code` when a result is not ready in time (OpenRLHF and verl retry on it); the tenant here waits long
enough for a result, so any 5xx fails the test."""

from __future__ import annotations

import json
import time
import urllib.parse

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from hypothesis import settings as hsettings

from farm.app.gateway.config import GatewaySettings
from farm.store.tenants import create_tenant
from tests.integration.gateway_support import auth, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLES = 150


@pytest.fixture
def fuzzed(settings, engine, start_workers):
    start_workers("math.verify")
    start_workers("run_code.compile")  # C++ runs compile first
    start_workers("run_code.run")
    gateway_settings = GatewaySettings(auth_ttl_s=60.0, max_wait_s=0.2, max_body_bytes=1 << 20, body_timeout_s=5.0)
    _, token = create_tenant(engine, "fuzz", now=time.time(), config={
        "openrlhf": {"batch_size": 1, "rollover_s": 0.2, "wait_s": 60.0},
        "sandbox_fusion": {"batch_size": 1, "rollover_s": 0.2, "wait_s": 60.0}})
    with running_gateway(settings, engine, gateway_settings) as base:
        yield base, token


@pytest.mark.parametrize("mode", [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE])
def test_no_input_gets_a_server_error(fuzzed, mode):
    base, token = fuzzed
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    # the stream of an open batch lasts until the batch ends: fuzzed ids name no batch, but a valid one would hang
    schema = schema.exclude(path_regex=r"/results/stream$")
    failures: list[str] = []

    @hsettings(max_examples=EXAMPLES, deadline=None, phases=[Phase.generate],
               suppress_health_check=list(HealthCheck), database=None)
    @given(case=schema.as_strategy(mode, path_parameters={"token": token}))
    def call(case):
        reply = case.call(base_url=base, headers=auth(token), timeout=90)
        if reply.status_code >= 500:
            failures.append(f"{case.method} {case.formatted_path} {case.body!r:.300} -> {reply.status_code} "
                            f"{reply.text[:300]}")

    call()
    assert not failures, "\n".join(failures[:10])


# Hostile input the schema does not generate (issue 32): ids that would spell another object's keys or break a
# line, lone surrogates, numbers past what Redis or Python print, on every route. Raw bodies: a lone surrogate
# and a 5,000-digit number travel as JSON text, as any client could send them.
BIG = "9" * 5000
SURROGATE = '"\\ud800"'
HOSTILE = [
    ("POST", "/v1/batches", '{"task": "t", "pipeline": "synthetic", "size": 2, "batch_id": "p:done"}'),
    ("POST", "/v1/batches", '{"task": "t", "pipeline": "synthetic", "size": 2, "batch_id": "step\\n"}'),
    ("POST", "/v1/batches", f'{{"task": "t", "pipeline": "synthetic", "size": 2, "batch_id": {SURROGATE}}}'),
    ("POST", "/v1/batches", f'{{"task": {SURROGATE}, "pipeline": "synthetic", "size": 2}}'),
    ("POST", "/v1/batches", f'{{"task": "t", "pipeline": {SURROGATE}, "size": 2}}'),
    ("POST", "/v1/batches", '{"task": "math\\n", "pipeline": "synthetic", "size": 2}'),
    ("POST", "/v1/batches", f'{{"task": "t", "pipeline": "synthetic", "size": {BIG}}}'),
    ("POST", "/v1/batches", f'{{"task": "t", "pipeline": "synthetic", "size": 2, "group_size": {BIG}}}'),
    ("POST", "/v1/batches", '{"task": "t", "pipeline": "synthetic", "size": 1e400}'),
    ("POST", "/v1/batches/open/requests", f'{{"request_id": {SURROGATE}, "payload": {{"times": [1, 0]}}}}'),
    ("POST", "/v1/batches/open/requests", '{"request_id": "r:1", "payload": {"times": [1, 0]}}'),
    ("POST", "/v1/batches/open/requests", '{"request_id": "r\\n", "payload": {"times": [1, 0]}}'),
    ("POST", "/v1/batches/open/requests", f'{{"request_id": "g", "payload": {{"times": [1, 0]}}, "group": {SURROGATE}}}'),
    ("POST", "/v1/batches/open/requests", f'{{"request_id": "h", "payload": {{"times": [1, 0]}}, "group": {BIG}}}'),
    ("POST", "/v1/batches/open/requests", '{"request_id": "i", "payload": {"times": [1, 0]}, "group": 18446744073709551616}'),
    ("POST", "/v1/batches/open/requests", f'{{"request_id": "j", "payload": {{"times": [{BIG}, 0]}}}}'),
    ("POST", "/v1/batches/open/requests", f'{{"request_id": "k", "payload": {{"times": [1, 0], "x": {SURROGATE}}}}}'),
    ("POST", "/v1/batches/open/requests/bulk", f'{{"requests": [{{"request_id": "b", "payload": 1, "group": {SURROGATE}}}]}}'),
    ("GET", "/v1/batches/open/results?cursor=18446744073709551616-0&wait_s=0", None),
    ("GET", "/v1/batches/open/results?cursor=99999999999999999999-99999999999999999999&wait_s=0", None),
    ("GET", "/v1/batches/open/results?cursor=0-0%0A&wait_s=0", None),
    ("GET", "/v1/batches/open/results?cursor=%D9%A1-0&wait_s=0", None),
    ("GET", "/v1/batches/open/results?wait_s=nan", None),
    ("GET", "/v1/batches/open/results?wait_s=inf", None),
    ("GET", "/v1/batches/open/results?wait_s=-1", None),
    ("GET", "/v1/batches/open/results?wait_s=1e400", None),
    ("GET", f"/v1/batches/open/results?limit={BIG[:30]}", None),
    ("GET", "/v1/batches/open/results/stream?cursor=18446744073709551616-0", None),
    ("GET", f"/v1/batches/open/groups?after={BIG[:30]}&wait_s=0", None),
    ("GET", "/v1/batches/open/groups?wait_s=nan", None),
    ("GET", "/v1/batches/p%3Adone", None),
    ("GET", "/v1/batches/open%0A", None),
    ("GET", "/v1/batches/%ED%A0%80", None),
    ("GET", "/v1/batches/%FF", None),
    ("POST", "/v1/batches/t1%3Aopen/cancel", None),
    ("POST", "/v1/batches/open%0A/seal", None),
    ("POST", "/v1/batches/x%3Ay/heartbeat", None),
    ("POST", "/get_reward", f'{{"query": [{SURROGATE}], "prompts": [""], "labels": [{SURROGATE}]}}'),
    ("POST", "/get_reward", f'{{"query": ["a"], "prompts": ["a"], "labels": [{BIG}]}}'),
    ("POST", "/run_code", f'{{"code": {SURROGATE}, "language": "python", "stdin": {SURROGATE}}}'),
    ("POST", "/run_code", f'{{"code": "print(1)", "language": "python", "memory_limit_MB": {BIG}}}'),
    ("POST", "/run_code", '{"code": "print(2)", "language": "python", "run_timeout": 1e400}'),
    ("POST", "/run_code", f'{{"code": "print(3)", "language": "python", "files": {{{SURROGATE}: {SURROGATE}}}}}'),
]


@pytest.mark.timeout(300)
def test_hostile_ids_surrogates_and_huge_numbers_get_a_clear_4xx_never_a_server_error(fuzzed):
    base, token = fuzzed
    failures = []
    with httpx.Client(base_url=base, headers=auth(token), timeout=90) as http:
        assert http.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 100,
                                              "batch_id": "open"}).status_code == 201
        for method, path, body in HOSTILE:
            try:
                reply = http.request(method, path, content=body, headers={"content-type": "application/json"})
            except httpx.TransportError as exc:  # the server failed before it could answer
                failures.append(f"{method} {path[:80]} {body!r:.80} -> no answer: {exc!r}")
                continue
            answer = reply.json() if reply.headers.get("content-type", "").startswith("application/json") else {}
            said = (answer.get("error") or {}).get("message") or answer.get("detail")
            if reply.status_code >= 500 or (reply.status_code >= 400 and not said):
                failures.append(f"{method} {path[:80]} {body!r:.80} -> {reply.status_code} {reply.text[:200]}")
        assert http.get("/v1/batches/open").json()["state"] == "open"  # what they aimed at is unharmed
    assert not failures, "\n".join(failures)


# ids built from the pieces keys are spelled with, separators, line breaks and what UTF-8 cannot carry
ID_PIECES = st.sampled_from(["t", "1", ":", "b", "req", "done", "open", "-", ".", "|", "/", "%", "?", "#", " ",
                             "\n", "\r", "\t", "\x00", "\x7f", "\u2028", "\ud800", "\udfff", "é", "..", "x" * 60])
HOSTILE_ID = st.lists(ID_PIECES, min_size=0, max_size=6).map("".join)


@pytest.mark.timeout(300)
def test_generated_hostile_ids_on_every_native_route_never_get_a_server_error(fuzzed):
    base, token = fuzzed
    failures: list[str] = []
    with httpx.Client(base_url=base, headers={**auth(token), "content-type": "application/json"}, timeout=30) as http:
        assert http.post("/v1/batches", json={"task": "t", "pipeline": "synthetic", "size": 100_000,
                                              "batch_id": "fz"}).status_code == 201

        @hsettings(max_examples=EXAMPLES, deadline=None, phases=[Phase.generate],
                   suppress_health_check=list(HealthCheck), database=None)
        @given(batch_id=HOSTILE_ID, request_id=HOSTILE_ID, group=HOSTILE_ID, task=HOSTILE_ID)
        def call(batch_id, request_id, group, task):
            path = "/v1/batches/" + urllib.parse.quote(batch_id.encode("utf-8", "surrogatepass"), safe="")
            for method, url, body in (
                    ("POST", "/v1/batches", {"task": task or "t", "pipeline": "synthetic", "size": 2,
                                             "batch_id": batch_id}),
                    ("POST", "/v1/batches/fz/requests", {"request_id": request_id, "payload": {"times": [0, 0]},
                                                         "group": group}),
                    ("GET", f"{path}/results?wait_s=0", None), ("POST", f"{path}/seal", None)):
                content = None if body is None else json.dumps(body)  # ASCII: lone surrogates as \\ud800
                try:
                    reply = http.request(method, url, content=content)
                except httpx.TransportError as exc:
                    failures.append(f"{method} {url!r:.100} {content!r:.100} -> no answer: {exc!r}")
                    continue
                if reply.status_code >= 500:
                    failures.append(f"{method} {url!r:.100} {content!r:.100} -> {reply.status_code} {reply.text[:200]}")

        call()
    assert not failures, "\n".join(failures[:10])
