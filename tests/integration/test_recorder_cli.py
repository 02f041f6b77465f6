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
