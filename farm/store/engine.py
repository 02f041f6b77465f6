"""Connecting to the history store and migrating it: PostgreSQL in deployment, a SQLite file embedded.

Alembic's files ship inside the `migrations` package, so `farm db upgrade` works from an installed wheel.
Alembic itself is imported only where a migration is run or checked: the recorder, the planner and the
reports open a store without it.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import sessionmaker

import migrations
from farm.config import Settings

HISTORY_FILE = "history.db"


class StoreError(RuntimeError):
    """The store cannot be used as it is (unreachable, not migrated); the message says what to do."""


def embedded_url(data_dir: str) -> str:
    return f"sqlite:///{Path(data_dir).expanduser() / HISTORY_FILE}"


def database_url(settings: Settings, override: str | None = None) -> str:
    """The store's URL: an explicit one, else the settings' (FARM_DATABASE_URL), else the embedded SQLite file."""
    return override or settings.database_url or embedded_url(settings.data_dir)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (farm status) never block the recorder
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(url: str) -> Engine:
    """An engine for the store; a SQLite file gets its directory created and WAL mode."""
    if is_sqlite(url):
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs = {}
    if make_url(url).get_driver_name() == "psycopg2":
        kwargs["executemany_mode"] = "values_plus_batch"  # bulk UPDATEs in pages, not one round trip per row
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5, **kwargs)


def session_factory(engine: Engine) -> sessionmaker:
    return sessionmaker(engine, expire_on_commit=False)


# ---------------------------------------------------------------- migrations


def _migrations_dir() -> Path:
    return Path(migrations.__file__).resolve().parent


def alembic_config(url: str):
    """An Alembic Config for the store at `url`, reading the alembic.ini shipped in the migrations package."""
    from alembic.config import Config

    directory = _migrations_dir()
    config = Config(str(directory / "alembic.ini"))
    config.set_main_option("script_location", str(directory))
    # '%' is ConfigParser interpolation: escape it so passwords with '%' survive
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _with_connection(url: str, fn):
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            config = alembic_config(url)
            config.attributes["connection"] = connection
            return fn(config)
    except Exception as exc:
        if isinstance(exc, StoreError):
            raise
        if isinstance(exc, OperationalError):
            raise StoreError(f"cannot reach the history store at {safe_url(url)}: {exc.orig}") from exc
        raise
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    _with_connection(url, lambda config: command.upgrade(config, revision))


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    _with_connection(url, lambda config: command.downgrade(config, revision))


def current(url: str) -> str | None:
    """The revision the store is at; None for an empty (never migrated) database."""
    from alembic.runtime.migration import MigrationContext

    def read(config):
        return MigrationContext.configure(config.attributes["connection"]).get_current_revision()

    return _with_connection(url, read)


def head() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def open_store(settings: Settings, *, url: str | None = None, migrate: bool | None = None) -> Engine:
    """An engine on a store whose schema is at head.

    `migrate=None` migrates the embedded SQLite file on its own (nobody else would) and refuses a
    configured database that is behind, pointing at `farm db upgrade` (an operator's decision).
    """
    url = database_url(settings, url)
    if migrate is None:
        migrate = is_sqlite(url)
    if migrate:
        upgrade(url)
    else:
        at, want = current(url), head()
        if at != want:
            raise StoreError(
                f"the history store at {safe_url(url)} is at revision {at or 'none (empty)'}, "
                f"not {want}: run `farm db upgrade`"
            )
    return make_engine(url)
