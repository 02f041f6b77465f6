"""The gateway's farm page and its JSON, over HTTP: operators only (a tenant's token gets 403 everywhere), the
numbers `farm status --json` shows, each tenant's cost from the store, and nothing loaded from outside."""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner

from farm.app.cli import main
from farm.app.gateway.farm_view import SAMPLE_S, FarmView
from farm.client.sync import RewardClient
from farm.protocol.scope import Scope
from farm.store.decisions import record_decision
from farm.store.recorder import Recorder
from farm.store.tenants import create_tenant
from tests.integration.gateway_support import client, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
PAGE = ["/ui", "/ui/farm.js", "/ui/farm.css", "/ui/api/live", "/ui/api/pools", "/ui/api/cost"]


@pytest.fixture
def gateway(settings, engine):
    with running_gateway(settings, engine) as base:
        yield base


@pytest.fixture
def operator(engine):
    return create_tenant(engine, "ops", operator=True, now=time.time())[1]


@pytest.mark.parametrize("path", PAGE)
def test_a_tenants_token_gets_403_and_no_token_401_on_the_page_and_its_json(gateway, engine, path):
    _, token = create_tenant(engine, "alpha", now=time.time())
    with client(gateway, token) as tenant, client(gateway) as anonymous:
        refused = tenant.get(path)
        assert refused.status_code == 403 and "operators" in refused.json()["error"]["message"]
        assert anonymous.get(path).status_code == 401


def test_an_operator_opens_the_page_by_its_token_in_the_path_and_it_loads_nothing_from_outside(gateway, operator):
    with client(gateway) as browser:
        page = browser.get(f"/t/{operator}/ui")
        script = browser.get(f"/t/{operator}/ui/farm.js")
    assert page.status_code == 200 and "Batches in flight" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    assert re.findall(r'(?:src|href)="([^"]+)"', page.text) == ["ui/farm.css", "ui/farm.js"]
    assert "fetch(" in script.text and not re.search(r"fetch\([^)]*https?:", script.text)


@pytest.mark.parametrize("path", PAGE)
def test_no_response_of_the_page_lets_a_browser_send_its_address_with_the_token_in_it_as_a_referrer(
        gateway, operator, path):
    with client(gateway) as browser:
        reply = browser.get(f"/t/{operator}{path}")
    assert reply.status_code == 200 and reply.headers["referrer-policy"] == "no-referrer"


def test_the_live_json_shows_what_farm_status_shows_with_tenant_names(settings, gateway, engine, operator):
    tenant, _ = create_tenant(engine, "alpha", now=time.time())
    with RewardClient(settings) as direct:
        batch = direct.open_batch("task-l", "synthetic", 3, batch_id=Scope(tenant.id).batch("step-1"))
        batch.submit("r0", {"times": [5.0, 0.0]})
    env = {"FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace, "FARM_DATA_DIR": settings.data_dir}
    status = json.loads(CliRunner().invoke(main, ["status", "--json"], env=env).output)
    with client(gateway, operator) as ops:
        live = ops.get("/ui/api/live").json()
    [row] = live["batches"]
    assert row == {**status["batches"][0], "silent_s": row["silent_s"], "extra_delay_s": row["extra_delay_s"]}
    assert row["tenant"] == f"t{tenant.id}" and row["waiting_on"] == "synthetic.compile"
    assert live["tenants"] == status["tenants"] and live["stages"] == status["stages"]
    assert {m["name"]: m["operator"] for m in live["tenant_info"].values()} == {"alpha": False, "ops": True}
    assert live["tenant_info"][f"t{tenant.id}"]["name"] == "alpha"
    assert (live["delay_s"], live["knobs"]["tick_s"], live["scheduler"]) == (status["delay_s"], 1.0, "ebf")
    assert live["cpu_s"] < 0.5


def test_the_pools_json_samples_every_stage_with_its_workers_busy_and_queue(settings, gateway, operator,
                                                                            start_workers):
    start_workers("synthetic.compile")
    with RewardClient(settings) as direct:
        batch = direct.open_batch("task-p", "synthetic", 3)
        batch.submit("r0", {"times": [0.0, 5.0]})  # the execute stage has no worker: it queues there
    with client(gateway, operator) as ops:
        pools = ops.get("/ui/api/pools").json()
    *_, sample = pools["samples"]  # the live one, after those the history gives
    assert sample["backfilled"] is False and sample["stages"]["synthetic.compile"] == {"running": 1, "starting": 0, "pending": 0, "target": None,
                                                     "busy": 0, "queued": 0}
    assert sample["stages"]["synthetic.execute"]["queued"] == 1
    assert pools["window_s"] == 3600


def test_the_first_pools_json_already_holds_the_hour_before_the_gateway_started_as_the_history_says(
        settings, engine, operator, emit):
    now = time.time()
    # a compile worker starting from -1800 s, ready at -1790 s, retired at -600 s; one request compiling from
    # -1500 s to -900 s; the planner asked for 2 compile workers before the hour, then for 1 at -1200 s
    emit("worker_spawned", worker="w-c", stage="synthetic.compile", backend="local", at=now - 1800)
    emit("worker_ready", worker="w-c", stage="synthetic.compile", at=now - 1790)
    emit("worker_retired", worker="w-c", stage="synthetic.compile", at=now - 600)
    emit.batch("b-old", "task-h", now - 1500, [[0.0, 600.0, 0.0]], completed_at=now - 900)
    Recorder(settings, engine).run_once()
    for at, workers in ((now - 7200, {"synthetic.compile": 2, "synthetic.execute": 1}),
                        (now - 1200, {"synthetic.compile": 1, "synthetic.execute": 0})):
        record_decision(engine, at=at, reason="tick", policy="distrs", workers=workers, runtime_s=0.0, estimates={},
                        details={"pipeline": "synthetic"})

    def history(t):  # the compile pool at t, as written above
        return {"running": int(now - 1790 <= t < now - 600), "starting": int(now - 1800 <= t < now - 1790),
                "pending": 0, "target": 2 if t < now - 1200 else 1, "busy": int(now - 1500 <= t < now - 900),
                "queued": 0}

    started = time.time()
    with running_gateway(settings, engine) as gateway, client(gateway, operator) as ops:
        samples = ops.get("/ui/api/pools").json()["samples"]
    *past, live = samples
    assert live["backfilled"] is False and live["at"] >= started
    assert len(past) >= 3590 / SAMPLE_S and all(s["backfilled"] and s["at"] < started for s in past)
    assert [round(b["at"] - a["at"], 6) for a, b in zip(samples, samples[1:])] == [SAMPLE_S] * len(past)
    assert [s["stages"]["synthetic.compile"] for s in past] == [history(s["at"]) for s in past]
    assert {s["stages"]["synthetic.execute"]["target"] for s in past} == {1, 0}
    assert sum(s["stages"]["synthetic.compile"]["busy"] for s in past) == 60  # the 600 s the request ran


def test_a_farm_with_no_history_and_nothing_in_flight_gets_no_samples_from_the_history(settings, engine):
    view = FarmView(settings, engine)
    try:
        view.sample()
        assert [s["backfilled"] for s in view.samples] == [False]
    finally:
        view.redis.close()


def test_a_gap_of_more_than_three_samples_is_filled_from_the_history(settings, engine, emit):
    view = FarmView(settings, engine)
    try:
        view.sample()
        emit("worker_spawned", worker="w-c", stage="synthetic.compile", backend="local", at=time.time() - 100)
        emit("worker_ready", worker="w-c", stage="synthetic.compile", at=time.time() - 100)
        Recorder(settings, engine).run_once()
        view.samples[-1]["at"] -= 6 * SAMPLE_S  # as if no sample had been taken for a minute
        view.sample()
        first, *filled, live = view.samples
        assert [s["backfilled"] for s in (first, *filled, live)] == [False] + [True] * 5 + [False]
        assert [round(live["at"] - s["at"], 6) for s in filled] == [50.0, 40.0, 30.0, 20.0, 10.0]
        assert {s["stages"]["synthetic.compile"]["running"] for s in filled} == {1}
    finally:
        view.redis.close()


def test_the_cost_splits_each_stages_allocated_seconds_between_tenants_against_zero_queueing_and_the_floor(
        settings, gateway, engine, operator, emit):
    now = time.time()
    for stage in ("compile", "execute"):  # one worker a stage, allocated 90 s
        emit("worker_spawned", worker=f"w-{stage}", stage=f"synthetic.{stage}", backend="local", at=now - 100)
        emit("worker_retired", worker=f"w-{stage}", stage=f"synthetic.{stage}", at=now - 10)
    # t1: two requests at once, 10 s of compile then 2 s of execute: zero queueing holds two workers at each
    # stage for the 12 s the batch would take; t2: one request, 30 s of compile
    emit.batch("t1:a", "t1.task", now - 90, [[0.0, 10.0, 2.0], [0.0, 10.0, 2.0]], completed_at=now - 60)
    emit.batch("t2:b", "t2.task", now - 90, [[0.0, 30.0, 0.0]], completed_at=now - 50)
    Recorder(settings, engine).run_once()
    with client(gateway, operator) as ops:
        cost = ops.get("/ui/api/cost").json()
    assert cost["tenants"]["t1"]["cpu"] == {"allocated_s": pytest.approx(36.0, abs=0.1), "zero_queue_s": 24.0,
                                            "busy_s": 20.0}
    assert cost["tenants"]["t2"]["cpu"] == {"allocated_s": pytest.approx(54.0, abs=0.1), "zero_queue_s": 30.0,
                                            "busy_s": 30.0}
    assert cost["tenants"]["t1"]["gpu"] == {"allocated_s": pytest.approx(90.0, abs=0.1), "zero_queue_s": 24.0,
                                            "busy_s": 4.0}
    assert "gpu" not in cost["tenants"]["t2"]
