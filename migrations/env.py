"""Alembic environment: migrates the store given by the caller's connection, or by the configured URL."""

from __future__ import annotations

import os

from alembic import context

from farm.config import from_env
from farm.store.engine import database_url, make_engine
from farm.store.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("FARM_DATABASE_URL")
    if not url:
        url = database_url(from_env())
    return url


def _configure(**kwargs) -> None:
    # batch mode lets later migrations ALTER tables on SQLite (which cannot drop or alter columns in place)
    context.configure(target_metadata=target_metadata, render_as_batch=True, compare_type=True, **kwargs)


def run_offline() -> None:
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return

    engine = make_engine(_url())
    try:
        with engine.begin() as connection:
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
