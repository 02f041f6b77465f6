"""The history database goes away under a running recorder (a TCP proxy to the real PostgreSQL is cut):
the stream buffers, the recorder says how far behind it is, catches up when the database is back, and when
the stream's cap drops unrecorded history that is loud (log, counter, `farm status`), never silent."""

from __future__ import annotations

import json
import logging
import threading

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from farm.events import encode
from farm.protocol import counters
from farm.store.engine import make_engine, upgrade
from farm.store.models import Batch
from farm.store.recorder import Recorder
from tests.integration.daemon_support import wait_for
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.timeout(120)

CAP = 400


@pytest.fixture
def proxied_store(postgres_url):
    """An engine whose connections pass through a proxy the test can cut; yields (engine, proxy)."""
    upgrade(postgres_url)
    url = make_url(postgres_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    engine = make_engine(url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False))
    yield engine, proxy
    engine.dispose()
    proxy.close()


@pytest.fixture
def redis_client(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def running_recorder(settings, proxied_store):
    engine, proxy = proxied_store
    recorder = Recorder(settings, engine, block_ms=100, cap=CAP)
    stop = threading.Event()
    thread = threading.Thread(target=recorder.run_forever, args=(stop,), kwargs={"retry_s": 0.2}, daemon=True)
    thread.start()
    yield recorder, engine, proxy
    stop.set()
    thread.join(10)
    recorder.close()


def emit_batches(redis_client, settings, first: int, count: int) -> None:
    """`count` batch_opened events, capped as the farm's emitters cap the stream (here exactly, at CAP)."""
    key = f"{settings.namespace}:events"
    pipe = redis_client.pipeline(transaction=False)
    for i in range(first, first + count):
        pipe.xadd(key, encode("batch_opened", batch=f"b{i}", task="t", pipeline="synthetic", size=1,
                              opened_at=1000.0 + i), maxlen=CAP, approximate=False)
    pipe.execute()


def batches_recorded(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Batch)).scalar_one()


def test_history_written_while_the_database_is_away_is_recorded_once_it_is_back(running_recorder, settings, redis_client):
    recorder, engine, proxy = running_recorder
    emit_batches(redis_client, settings, 0, 10)
    wait_for(lambda: batches_recorded(engine) == 10, 20, "the first events to be recorded")
    proxy.cut()
    emit_batches(redis_client, settings, 10, 150)  # under the cap: the stream holds them
    wait_for(lambda: recorder.check_stream().length == 150, 10, "the stream to hold what was not recorded")
    proxy.restore()
    wait_for(lambda: batches_recorded(engine) == 160, 30, "the recorder to catch up")
    wait_for(lambda: redis_client.xlen(f"{settings.namespace}:events") == 0, 10, "the stream to be trimmed")
    assert counters.read(redis_client, settings.namespace).history_overflows == 0


def test_a_recorder_behind_by_half_the_cap_warns_in_its_log(running_recorder, settings, redis_client, caplog):
    recorder, engine, proxy = running_recorder
    proxy.cut()
    emit_batches(redis_client, settings, 0, CAP // 2 + 10)
    with caplog.at_level(logging.WARNING, logger="farm.store.recorder"):
        found = recorder.check_stream()
    assert found.fill >= 0.5 and not found.at_cap
    assert any("the recorder is behind" in r.getMessage() for r in caplog.records)


def test_history_the_cap_drops_is_logged_counted_and_shown_by_farm_status(running_recorder, settings, redis_client,
                                                                         caplog):
    from farm.app.cli import main

    recorder, engine, proxy = running_recorder
    emit_batches(redis_client, settings, 0, 5)
    wait_for(lambda: batches_recorded(engine) == 5, 20, "the first events to be recorded")
    proxy.cut()
    emit_batches(redis_client, settings, 5, CAP + 50)  # 50 more than the stream keeps
    with caplog.at_level(logging.ERROR, logger="farm.store.recorder"):
        found = recorder.check_stream()
    assert found.at_cap
    assert any("history LOST" in r.getMessage() for r in caplog.records)
    wait_for(lambda: counters.read(redis_client, settings.namespace).history_overflows == 1, 10, "the overflow count")
    recorder.check_stream()  # the same episode: counted once
    assert counters.read(redis_client, settings.namespace).history_overflows == 1

    env = {"FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace}
    shown = CliRunner().invoke(main, ["status"], env=env)
    assert shown.exit_code == 0, shown.output
    assert "history LOST 1 time(s)" in shown.output  # (the farm's own cap is far above this test's)
    report = json.loads(CliRunner().invoke(main, ["status", "--json"], env=env).output)
    assert report["history"]["overflows"] == 1 and report["history"]["waiting"] == CAP

    proxy.restore()  # what the stream still held is recorded; the 50 dropped are gone, and were said to be
    wait_for(lambda: batches_recorded(engine) == 5 + CAP, 30, "the recorder to record what the stream kept")
