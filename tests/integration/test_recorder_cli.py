"""`farm recorder`: drains the history stream into the configured store, or into the embedded SQLite file."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from farm.app.cli import main
from farm.store import engine as store
from farm.store.models import Batch

pytestmark = pytest.mark.integration


def _batches(url):
    engine = store.make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(select(Batch.id, Batch.extra_delay_s)).all()
    finally:
        engine.dispose()


def test_farm_recorder_once_records_into_postgresql(postgres_url, redis_url, namespace, emit):
    store.upgrade(postgres_url)
    emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 3.0]], completed_at=107.0)
    env = {"FARM_DATABASE_URL": postgres_url, "FARM_REDIS_URL": redis_url, "FARM_NAMESPACE": namespace}
    result = CliRunner().invoke(main, ["recorder", "--once"], env=env)
    assert result.exit_code == 0, result.output
    assert "recorded 6 history events (0 skipped)" in result.output
    assert _batches(postgres_url) == [("b1", pytest.approx(1.0))]


def test_farm_recorder_once_on_the_embedded_default_records_into_sqlite(tmp_path, redis_url, namespace, emit):
    emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 3.0]], completed_at=106.0)
    emit.raw({"e": "{broken"})
    env = {"FARM_DATA_DIR": str(tmp_path), "FARM_REDIS_URL": redis_url, "FARM_NAMESPACE": namespace,
           "FARM_DATABASE_URL": ""}
    result = CliRunner().invoke(main, ["recorder", "--once"], env=env)
    assert result.exit_code == 0, result.output
    assert "recorded 6 history events (1 skipped)" in result.output
    assert _batches(store.embedded_url(str(tmp_path))) == [("b1", 0.0)]


def test_farm_recorder_without_redis_says_what_to_set(tmp_path):
    env = {"FARM_DATA_DIR": str(tmp_path), "FARM_REDIS_URL": "", "FARM_DATABASE_URL": ""}
    result = CliRunner().invoke(main, ["recorder", "--once"], env=env)
    assert result.exit_code == 1
    assert "set FARM_REDIS_URL" in result.output


def test_farm_recorder_serves_the_farms_metrics_while_it_records(postgres_url, redis_url, namespace, emit, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from tests.support.redis_server import free_port

    store.upgrade(postgres_url)
    port = free_port()
    env = {**os.environ, "FARM_DATABASE_URL": postgres_url, "FARM_REDIS_URL": redis_url, "FARM_NAMESPACE": namespace}
    log = open(tmp_path / "recorder.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "farm.app.cli", "recorder", "--metrics-port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        emit.batch("b1", "t1", 100.0, [[1.0, 2.0, 3.0]], completed_at=107.0)
        deadline, text = time.monotonic() + 30, ""
        while 'farm_batches_ended_total{outcome="completed",task="t1"} 1.0' not in text:
            assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "recorder.log").read_text() + text
            time.sleep(0.2)
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except httpx.HTTPError:
                pass
        assert 'farm_batch_extra_delay_seconds_count{task="t1"} 1.0' in text
        assert "farm_redis_up 1.0" in text and "farm_history_store_up 1.0" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, (tmp_path / "recorder.log").read_text()
        log.close()


def test_farm_recorder_refuses_to_serve_metrics_when_it_only_drains_once(redis_url, namespace):
    env = {"FARM_REDIS_URL": redis_url, "FARM_NAMESPACE": namespace}
    result = CliRunner().invoke(main, ["recorder", "--once", "--metrics-port", "9464"], env=env)
    assert result.exit_code == 2
    assert "--once does not stay" in result.output


def test_farm_recorder_says_when_its_metrics_port_is_taken(postgres_url, redis_url, namespace):
    import socket

    store.upgrade(postgres_url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        env = {"FARM_DATABASE_URL": postgres_url, "FARM_REDIS_URL": redis_url, "FARM_NAMESPACE": namespace}
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["recorder", "--metrics-port", str(port)], env=env)
    assert result.exit_code == 1
    assert f"cannot serve the farm's metrics on 127.0.0.1:{port}" in result.output
