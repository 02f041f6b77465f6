"""Fixtures for real services: Redis and PostgreSQL on this machine (started by .ci/run in CI).

Every test gets its own farm namespace, so tests never see each other's keys or queues."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from farm.config import Settings  # noqa: E402

REDIS_URL = os.environ.get("FARM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_ADMIN_URL = os.environ.get("FARM_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
def namespace(redis_url):
    """A fresh namespace; its keys are deleted afterwards."""
    import redis

    ns = f"t{uuid.uuid4().hex[:10]}"
    yield ns
    client = redis.Redis.from_url(redis_url)
    # kombu keeps its queue bindings outside our prefix: `_kombu.binding.<ns>.<pipeline>.<stage>`
    for pattern in (f"{ns}*", f"_kombu.binding*.{ns}.*"):
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
    client.close()


@pytest.fixture
def settings(redis_url, namespace, tmp_path) -> Settings:
    return Settings(redis_url=redis_url, namespace=namespace, lease_s=2.0, data_dir=str(tmp_path))


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"farm_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def ray_cluster():
    """A 3-node Ray cluster on this machine (tests.support.ray_cluster), shared by the session's ray tests."""
    from tests.support.ray_cluster import LocalCluster, require_namespace

    require_namespace()
    cluster = LocalCluster()
    yield cluster
    cluster.shutdown()
