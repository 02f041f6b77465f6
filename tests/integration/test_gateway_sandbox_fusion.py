"""SandboxFusion's `/run_code` on the farm: the `sandbox-fusion` PyPI client and the exact body verl builds,
answered as SandboxFusion answers, run by the farm's `run_code` workers in its sandbox."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from sandbox_fusion import RunCodeRequest, RunStatus, run_code

from farm.app.gateway.config import GatewaySettings
from farm.store.tenants import create_tenant
from tests.integration.gateway_support import running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def endpoint(settings, engine, start_workers):
    start_workers("run_code.compile")
    start_workers("run_code.run")
    _, token = create_tenant(engine, "coder", now=time.time(),
                             config={"sandbox_fusion": {"batch_size": 4, "rollover_s": 0.2}})
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=0.0, roll_check_s=0.1)) as base:
        yield f"{base}/t/{token}"


def test_the_sandbox_fusion_client_runs_python_on_the_farm(endpoint):
    reply = run_code(RunCodeRequest(code="print(int(input()) * 2)", stdin="21", language="python"),
                     endpoint=endpoint, max_attempts=1)
    assert reply.status == RunStatus.Success
    assert reply.run_result.stdout == "42\n" and reply.run_result.return_code == 0


def test_a_cpp_program_is_compiled_and_run_by_the_farms_two_stages(endpoint):
    code = "#include <iostream>\nint main() { int a, b; std::cin >> a >> b; std::cout << a + b; }"
    reply = run_code(RunCodeRequest(code=code, stdin="2 40", language="cpp"), endpoint=endpoint, max_attempts=1)
    assert reply.status == RunStatus.Success and reply.run_result.stdout == "42"
    assert reply.compile_result.return_code == 0


def test_the_body_verl_builds_gets_the_answer_verl_reads(endpoint):
    # verl/utils/reward_score/sandbox_fusion/utils.py: json.dumps of this dict, Content-Type application/json
    body = json.dumps({"compile_timeout": 10, "run_timeout": 10, "code": "import sys\nprint(sum(map(int, "
                       "sys.stdin.read().split())))", "stdin": "1 2 3", "memory_limit_MB": 1024, "language": "python",
                       "files": {}, "fetch_files": []})
    reply = httpx.post(f"{endpoint}/run_code", content=body, headers={"Content-Type": "application/json"},
                       timeout=30)
    assert reply.status_code == 200
    answer = reply.json()
    assert answer["status"] == "Success" and answer["run_result"]["stdout"].strip() == "6"
    assert set(answer) == {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
    assert set(answer["run_result"]) == {"status", "execution_time", "return_code", "stdout", "stderr"}


def test_a_failing_program_is_failed_with_http_200(endpoint):
    reply = httpx.post(f"{endpoint}/run_code", json={"code": "raise SystemExit(4)", "language": "python"},
                       timeout=30)
    assert reply.status_code == 200
    assert reply.json()["status"] == "Failed" and reply.json()["run_result"]["return_code"] == 4


def test_a_language_the_farm_does_not_run_is_a_sandbox_error_in_sandbox_fusions_shape(endpoint):
    reply = httpx.post(f"{endpoint}/run_code", json={"code": "package main", "language": "go"}, timeout=30)
    assert reply.status_code == 200
    answer = reply.json()
    assert answer["status"] == "SandboxError" and "language 'go' is not supported" in answer["message"]
    assert answer["run_result"] is None and answer["files"] == {}


def test_a_language_sandbox_fusion_does_not_know_is_refused_as_sandbox_fusion_refuses_it(endpoint):
    reply = httpx.post(f"{endpoint}/run_code", json={"code": "x", "language": "klingon"}, timeout=30)
    assert reply.status_code == 422 and "language" in reply.text


def test_ping_answers_pong(endpoint):
    reply = httpx.get(f"{endpoint}/v1/ping", timeout=10)
    assert reply.status_code == 200 and reply.json() == "pong"


def test_a_retried_run_is_the_same_request(endpoint, settings):
    import redis
    body = {"code": "print('once')", "language": "python"}
    replies = [httpx.post(f"{endpoint}/run_code", json=body, timeout=30) for _ in range(2)]
    assert [r.json()["run_result"]["stdout"] for r in replies] == ["once\n", "once\n"]
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        batches = [k for k in r.scan_iter(match=f"{settings.namespace}:b:t*") if k.count(":") == 3]
        assert sum(int(r.hget(k, "arrived")) for k in batches) == 1
    finally:
        r.close()


def test_a_batchs_samples_after_its_first_do_not_read_its_fields_again(settings, engine, start_workers, monkeypatch):
    from farm.protocol import exchange

    start_workers("run_code.run")
    # a rollover far beyond the calls: the batch is not sealed between them (sealing reads its head too)
    _, token = create_tenant(engine, "one-batch", now=time.time(),
                             config={"sandbox_fusion": {"batch_size": 4, "rollover_s": 60.0}})

    heads = []
    real = exchange.reads.progress

    def counted(redis, keys, batch_id):
        heads.append(batch_id)
        return real(redis, keys, batch_id)
    monkeypatch.setattr(exchange.reads, "progress", counted)
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=0.0, roll_check_s=0.1)) as base:
        for i in range(3):  # one rolling batch of 4: the calls come one after another, within its rollover
            reply = httpx.post(f"{base}/t/{token}/run_code", json={"code": f"print({i})", "language": "python"},
                               timeout=30)
            assert reply.json()["run_result"]["stdout"] == f"{i}\n"

    # the first sample's: the batch not yet open (BatchNotFound), and the open's own two (its reply, its head)
    assert len(heads) == 3
