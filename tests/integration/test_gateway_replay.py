"""Identical calls answered from memory, openly: an identical OpenRLHF sample or SandboxFusion run within the
hour gets the first one's result without running again, unless that result is one the farm caused (cancelled,
infra error), which is never replayed, or the tenant's config turns replay off."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from farm.app.gateway.config import GatewaySettings
from farm.client.sync import RewardClient
from farm.store.tenants import create_tenant
from tests.integration.gateway_support import running_gateway
from tests.integration.test_gateway_openrlhf import PROMPT, body, call_all, farm_batches

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RIGHT = body(PROMPT + "\\boxed{5}", PROMPT, "5")


@pytest.fixture
def gateway(settings, engine):
    with running_gateway(settings, engine, GatewaySettings(auth_ttl_s=0.0, roll_check_s=0.1)) as base:
        yield base


def url(gateway, engine, **openrlhf) -> str:
    _, token = create_tenant(engine, f"rp{time.monotonic_ns()}", config={"openrlhf": openrlhf}, now=time.time())
    return f"{gateway}/t/{token}/get_reward"


def requests_run(settings) -> int:
    return sum(int(b["arrived"]) for b in farm_batches(settings, "t").values())


def test_an_identical_sample_later_is_answered_from_the_first_result(gateway, engine, settings, start_workers):
    start_workers("math.verify")
    target = url(gateway, engine, batch_size=4, rollover_s=0.2)
    (first,) = asyncio.run(call_all(target, [RIGHT]))
    time.sleep(0.5)  # its batch is sealed and complete
    (again,) = asyncio.run(call_all(target, [RIGHT]))
    assert first.json() == again.json() and first.json()["rewards"] == [1.0]
    assert requests_run(settings) == 1


def test_a_cancelled_result_is_not_replayed_and_the_retry_runs_again(gateway, engine, settings, start_workers):
    target = url(gateway, engine, batch_size=4, rollover_s=30.0)
    answers = []
    waiting = threading.Thread(target=lambda: answers.extend(asyncio.run(call_all(target, [RIGHT]))))
    waiting.start()  # no worker yet: the sample waits in its batch
    deadline = time.monotonic() + 20
    while not requests_run(settings):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (farm_id,) = farm_batches(settings, "t")
    with RewardClient(settings, keep_alive=False) as client:
        assert client.batch(farm_id).cancel() == "cancelled"
    waiting.join(timeout=20)
    assert answers[0].json()["extra_logs"]["farm_masked"] == [1.0]  # the caller hears it was the farm's doing
    start_workers("math.verify")
    (retry,) = asyncio.run(call_all(target, [RIGHT]))
    assert retry.json()["rewards"] == [1.0] and retry.json()["extra_logs"]["farm_masked"] == [0.0]
    assert requests_run(settings) == 2


def test_a_tenant_with_replay_off_has_every_identical_sample_run_again(gateway, engine, settings, start_workers):
    start_workers("math.verify")
    target = url(gateway, engine, batch_size=4, rollover_s=0.2, replay_identical=False)
    replies = [asyncio.run(call_all(target, [RIGHT]))[0] for _ in range(3)]
    assert [r.json()["rewards"] for r in replies] == [[1.0]] * 3
    assert requests_run(settings) == 3


def test_a_sandbox_fusion_run_is_replayed_unless_the_tenant_turns_it_off(gateway, engine, settings, start_workers):
    import httpx
    start_workers("run_code.compile")
    start_workers("run_code.run")
    run = {"code": "print('ran')", "language": "python"}
    for replay, runs in ((True, 1), (False, 2)):
        _, token = create_tenant(engine, f"sf{replay}", now=time.time(), config={
            "sandbox_fusion": {"batch_size": 4, "rollover_s": 0.2, "replay_identical": replay}})
        before = requests_run(settings)
        replies = [httpx.post(f"{gateway}/t/{token}/run_code", json=run, timeout=30) for _ in range(2)]
        assert [r.json()["run_result"]["stdout"] for r in replies] == ["ran\n", "ran\n"]
        assert requests_run(settings) - before == runs
