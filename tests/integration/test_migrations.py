"""Alembic migrations of the history store, up and down on PostgreSQL; `farm db`; the embedded SQLite default."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import inspect, text

from farm.app.cli import main
from farm.config import Settings
from farm.store import engine as store
from farm.store.models import Base

pytestmark = pytest.mark.integration

TABLES = {"tasks", "batches", "requests", "request_stages", "workers", "decisions", "knobs", "recorder_offsets",
          "tenants"}


def _tables(url: str) -> set[str]:
    engine = store.make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _schema_differences(url: str) -> list:
    engine = store.make_engine(url)
    try:
        with engine.connect() as conn:
            return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()


def test_migrations_go_up_down_to_base_and_up_again_on_postgresql(postgres_url):
    store.upgrade(postgres_url)
    assert store.current(postgres_url) == store.head()
    assert _tables(postgres_url) == TABLES
    store.downgrade(postgres_url, "base")
    assert store.current(postgres_url) is None
    assert _tables(postgres_url) == set()
    store.upgrade(postgres_url)
    assert _tables(postgres_url) == TABLES


def test_the_migrated_schema_matches_the_models(postgres_url):
    store.upgrade(postgres_url)
    assert _schema_differences(postgres_url) == []


def test_the_migrated_sqlite_schema_matches_the_models(tmp_path):
    url = store.embedded_url(str(tmp_path))
    store.upgrade(url)
    assert _schema_differences(url) == []


def test_0003_adds_and_drops_the_tenants_table_on_sqlite(tmp_path):
    url = store.embedded_url(str(tmp_path))
    store.upgrade(url)
    assert _tables(url) == TABLES
    store.downgrade(url, "0002")
    assert _tables(url) == TABLES - {"tenants"}
    store.upgrade(url)
    assert _tables(url) == TABLES


def test_the_embedded_default_is_a_sqlite_file_in_wal_mode(tmp_path):
    settings = Settings(data_dir=str(tmp_path / "farm-data"))
    engine = store.open_store(settings)
    try:
        assert store.database_url(settings) == f"sqlite:///{tmp_path / 'farm-data' / 'history.db'}"
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert set(inspect(engine).get_table_names()) >= TABLES
    finally:
        engine.dispose()


def test_a_configured_database_behind_head_is_refused_with_the_command_to_run(postgres_url):
    with pytest.raises(store.StoreError, match="run `farm db upgrade`"):
        store.open_store(Settings(database_url=postgres_url))


def test_an_unreachable_database_is_a_clear_error():
    with pytest.raises(store.StoreError, match="cannot reach the history store at postgresql"):
        store.current("postgresql+psycopg2://postgres@127.0.0.1:1/nothing")


def test_farm_db_upgrades_reports_and_downgrades_the_configured_database(postgres_url):
    runner = CliRunner()
    env = {"FARM_DATABASE_URL": postgres_url}
    result = runner.invoke(main, ["db", "current"], env=env)
    assert result.exit_code == 0, result.output
    assert "at revision base (behind head" in result.output
    result = runner.invoke(main, ["db", "upgrade"], env=env)
    assert result.exit_code == 0, result.output
    assert f"at revision {store.head()}" in result.output
    assert _tables(postgres_url) == TABLES
    result = runner.invoke(main, ["db", "current"], env=env)
    assert "(up to date)" in result.output
    result = runner.invoke(main, ["db", "downgrade", "base", "--database-url", postgres_url])
    assert result.exit_code == 0, result.output
    assert _tables(postgres_url) == set()


def test_farm_db_refuses_an_unknown_revision_with_a_message(postgres_url):
    result = CliRunner().invoke(main, ["db", "downgrade", "nonexistent", "--database-url", postgres_url])
    assert result.exit_code == 1
    assert "Can't locate revision identified by 'nonexistent'" in result.output


def test_0002_lets_ids_and_groups_grow_past_200_characters_and_back_keeping_the_rows(postgres_url):
    long = "g" * 10_000
    store.upgrade(postgres_url, "0001")
    engine = store.make_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO tasks VALUES ('t', 'synthetic', 1.0)"))
            conn.execute(text("INSERT INTO batches (id, task) VALUES ('b', 't')"))
        store.upgrade(postgres_url, "0002")
        with engine.begin() as conn:
            conn.execute(text('INSERT INTO requests (batch_id, request_id, "group") VALUES (\'b\', :r, :g)'),
                         {"r": "r" * 1024, "g": long})
        store.downgrade(postgres_url, "0001")
        with engine.connect() as conn:
            request_id, group = conn.execute(text('SELECT request_id, "group" FROM requests')).one()
            assert conn.execute(text("SELECT id FROM batches")).scalar_one() == "b"
    finally:
        engine.dispose()
    assert (request_id, group) == ("r" * 200, long[:200])


def test_0007_gives_existing_tenants_a_share_of_one_and_no_cap(postgres_url):
    from farm.protocol.shares import FairShare
    from farm.store.tenants import get_tenant

    store.upgrade(postgres_url, "0006")
    engine = store.make_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (name, token_hash, token_prefix, created_at, limits, config) "
                              "VALUES ('acme', 'h', 'rf_x', 1.0, '{}', '{}')"))
        store.upgrade(postgres_url)
        assert get_tenant(engine, "acme").fair_share == FairShare()
        store.downgrade(postgres_url, "0006")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT name FROM tenants")).scalar_one() == "acme"
    finally:
        engine.dispose()
