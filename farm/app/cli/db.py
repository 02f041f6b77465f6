"""`farm db`: migrate the history store (PostgreSQL from FARM_DATABASE_URL or --database-url; the embedded SQLite file otherwise)."""

from __future__ import annotations

import click
from sqlalchemy import Engine

from farm.config import from_env
from farm.store import engine as store

database_option = click.option(
    "--database-url", envvar="FARM_DATABASE_URL", default=None,
    help="History store URL (default: FARM_DATABASE_URL, else the embedded SQLite file in FARM_DATA_DIR).",
)


def resolve_url(database_url: str | None) -> str:
    return store.database_url(from_env(), database_url)


def open_engine(database_url: str | None) -> Engine:
    """An engine on a migrated store, or a click error saying what to do."""
    try:
        return store.open_store(from_env(), url=database_url)
    except store.StoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _run(action, *args):
    try:
        return action(*args)
    except store.StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # alembic reports a bad revision as a CommandError / ResolutionError
        if type(exc).__module__.startswith("alembic"):
            raise click.ClickException(str(exc)) from exc
        raise


@click.group()
def db() -> None:
    """Migrate the history store."""


@db.command()
@click.argument("revision", default="head")
@database_option
def upgrade(revision: str, database_url: str | None) -> None:
    """Migrate the store up to REVISION (default: head)."""
    _migrate(store.upgrade, database_url, revision)


@db.command()
@click.argument("revision")
@database_option
def downgrade(revision: str, database_url: str | None) -> None:
    """Migrate the store down to REVISION ('base' drops every table of the farm)."""
    _migrate(store.downgrade, database_url, revision)


def _migrate(move, database_url: str | None, revision: str) -> None:
    url = resolve_url(database_url)
    _run(move, url, revision)
    click.echo(f"{store.safe_url(url)}: at revision {_run(store.current, url) or 'base'}")


@db.command()
@database_option
def current(database_url: str | None) -> None:
    """Print the store's revision and whether it is the latest."""
    url = resolve_url(database_url)
    at, head = _run(store.current, url), store.head()
    state = "up to date" if at == head else f"behind head {head}: run `farm db upgrade`"
    click.echo(f"{store.safe_url(url)}: at revision {at or 'base'} ({state})")
