"""The farm's metrics as an operator sees them: a real Prometheus server scrapes the recorder's endpoint
while a small batch runs on a planned farm (real Redis, PostgreSQL, local workers), and PromQL through
Prometheus' HTTP API reads back the figures of what ran. The dashboard's and the alerts' queries are
checked against the same server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import redis as redis_lib

from tests.integration.daemon_support import _end_local_workers, small_knobs, wait_for
from tests.support.prometheus_server import REQUIRE_ENV, PrometheusServer

pytestmark = pytest.mark.timeout(240)

MONITORING = Path(__file__).resolve().parents[2] / "docker" / "monitoring"
# synthetic: [compile, execute] seconds; the timeouts of small_knobs() are 3 s
OK_TIMES = [[0.3, 0.2], [0.2, 0.4], [0.4, 0.1], [0.1, 0.3], [0.0, 0.0]]  # the last visits no stage: wrong
TIMEOUT_TIMES = [3.5, 0.2]  # cut at compile's timeout


@pytest.fixture
def metered_farm(settings, postgres_url, tmp_path):
    """A farm with its recorder serving the metrics, the planner daemon in a thread, and Prometheus."""
    from farm.app import metrics
    from farm.store.engine import make_engine, upgrade
    from farm.store.knob_store import KnobStore
    from farm.store.recorder import Recorder
    from planner.runtime import service

    settings = settings.with_(database_url=postgres_url, lease_s=2.0)
    upgrade(postgres_url)
    engine = make_engine(postgres_url)
    client = redis_lib.Redis.from_url(settings.redis_url)
    KnobStore(engine, client, settings.namespace).save(small_knobs())
    server = metrics.serve(settings, engine, port=0)
    stop = threading.Event()
    recorder = Recorder(settings, engine, block_ms=100, on_recorded=server.history)
    threads = [threading.Thread(target=recorder.run_forever, args=(stop,), daemon=True)]
    planner = service.build(settings, backend="local", startup_s=1.0)
    threads.append(threading.Thread(target=service.run, args=(planner, stop), daemon=True))
    for t in threads:
        t.start()
    prometheus = PrometheusServer(tmp_path, server.url, rule_files=(str(MONITORING / "alerts.yml"),)).start()
    try:
        yield settings, engine, server, prometheus
    finally:
        prometheus.stop()
        stop.set()
        for t in threads:
            t.join(10)
        planner.close()
        _end_local_workers(settings)
        recorder.close()
        server.close()
        client.close()
        engine.dispose()


def run_a_batch(settings) -> dict[str, str]:
    from farm.client.sync import RewardClient

    with RewardClient(settings) as client:
        requests = [(f"r{i}", {"times": t}, None) for i, t in enumerate(OK_TIMES)]
        requests += [("slow", {"times": TIMEOUT_TIMES}, None), ("bad", {"times": "soon"}, None)]
        with client.open_batch(task="metrics-task", pipeline="synthetic", size=len(requests)) as batch:
            batch.submit_many(requests)
            return {r.request_id: r.status.value for r in batch.gather(timeout=120)}


def test_prometheus_reads_back_the_figures_of_a_batch_run_on_the_farm(metered_farm):
    settings, engine, server, prometheus = metered_farm
    statuses = run_a_batch(settings)
    assert sorted(statuses.values()) == ["invalid_input"] + ["ok"] * 4 + ["timeout", "wrong"], sorted(statuses.items())
    # the recorder has written everything (the stream is empty) and Prometheus scraped after that
    r = redis_lib.Redis.from_url(settings.redis_url)
    wait_for(lambda: r.xlen(f"{settings.namespace}:events") == 0, 30, "the recorder to drain the stream")
    wait_for(lambda: (prometheus.value('farm_batches_ended_total{task="metrics-task",outcome="completed"}')
                      or 0) >= 1, 30, "the completed batch to be scraped")
    r.close()
    prometheus.scraped()

    def v(q):
        return prometheus.value(q)

    assert v('farm_results_total{pipeline="synthetic",status="ok"}') == 4
    assert v('farm_results_total{pipeline="synthetic",status="wrong"}') == 1
    assert v('farm_results_total{pipeline="synthetic",status="timeout"}') == 1
    assert v('farm_results_total{pipeline="synthetic",status="invalid_input"}') == 1
    assert v('farm_batch_extra_delay_seconds_count{task="metrics-task"}') == 1
    assert v('farm_batch_extra_delay_seconds_sum{task="metrics-task"}') >= 0
    # compile ran for the 4 ok requests and the timed-out one; execute for the 4
    assert v('farm_stage_service_seconds_count{pipeline="synthetic",stage="compile"}') == 5
    assert v('farm_stage_service_seconds_count{pipeline="synthetic",stage="execute"}') == 4
    execute_busy = v('farm_worker_busy_seconds_total{pipeline="synthetic",stage="execute",resource="gpu"}')
    assert 1.0 <= execute_busy <= 1.0 + 4 * 0.5  # the slept 1.0 s, plus each request's own overhead
    compile_busy = v('farm_worker_busy_seconds_total{stage="compile"}')
    assert 1.0 + 3.0 <= compile_busy <= 1.0 + 3.0 + 5 * 0.5  # the timed-out request is cut at 3 s
    # the cost: allocated worker-seconds cover what was busy
    assert v('farm_worker_allocated_seconds_total{stage="execute",resource="gpu"}') >= execute_busy
    assert v('sum(farm_stage_queued_requests)') == 0
    assert v('farm_planner_up') == 1
    assert v('farm_planner_decision_seconds_count') > 0
    assert v('farm_stage_workers{stage="compile",state="target"}') is not None
    # the workers and the planner go on writing history (roster, decisions), which the recorder takes within its
    # gather window: a scrape may see a few entries; a drained stream shows within a few scrapes
    wait_for(lambda: prometheus.scraped() and v('farm_history_stream_entries') == 0, 30,
             "a scrape of the drained history stream")
    assert v('farm_history_overflows_total') == 0
    assert v('farm_redis_up') == 1 and v('farm_history_store_up') == 1
    assert v('farm_recorder_events_total') > 0


def test_every_dashboard_query_and_alert_rule_is_valid_promql_for_the_farms_metrics(metered_farm):
    settings, engine, server, prometheus = metered_farm
    run_a_batch(settings)
    prometheus.scraped()
    names = {family.name + suffix for family in server.registry.collect()
             for suffix in ("", "_total", "_bucket", "_sum", "_count")}  # what the endpoint can expose
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "reward-farm.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    for expr in exprs:
        prometheus.query(expr.replace("$task", ".*").replace("$__rate_interval", "1m"))  # Prometheus refuses bad PromQL
        used = {n for n in names if n in expr}
        assert used, f"{expr!r} reads none of the farm's metrics"
    rules = prometheus.api("rules")["groups"]
    alerts = [r for g in rules for r in g["rules"] if r["type"] == "alerting"]
    assert {a["name"] for a in alerts} >= {"FarmExtraDelayOverD", "FarmRecorderLagging", "FarmWorkersPending",
                                           "FarmInfraErrors", "FarmHistoryLost", "FarmCapacityBinds"}
    assert all(a["health"] == "ok" for a in alerts), alerts  # each evaluated without error
    assert not [a for a in alerts if a["state"] == "firing"], "a healthy farm fires no alert"


def test_the_alert_rules_pass_promtool():
    if shutil.which("promtool") is None:
        (pytest.fail if os.environ.get(REQUIRE_ENV) == "1" else pytest.skip)("promtool is not installed (Debian's "
                                                                             "prometheus package)")
    done = subprocess.run(["promtool", "check", "rules", str(MONITORING / "alerts.yml")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_alert_rules_pass_their_promtool_unit_tests():
    if shutil.which("promtool") is None:
        (pytest.fail if os.environ.get(REQUIRE_ENV) == "1" else pytest.skip)("promtool is not installed (Debian's "
                                                                             "prometheus package)")
    done = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=MONITORING, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
