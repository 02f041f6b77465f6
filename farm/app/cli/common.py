"""Options and helpers the `farm` commands share."""

from __future__ import annotations

import functools
import os

import click

from farm.config import Settings, from_env


def settings_options(fn):
    """--redis-url / --database-url / --namespace / --data-dir, each defaulting to its FARM_* variable."""

    @click.option("--redis-url", envvar="FARM_REDIS_URL", help="Redis of the farm (default: the embedded farm running here).")
    @click.option("--database-url", envvar="FARM_DATABASE_URL", help="History store (default: SQLite under the data dir).")
    @click.option("--namespace", envvar="FARM_NAMESPACE", help="Prefix of the farm's keys and queues (default: farm).")
    @click.option("--data-dir", envvar="FARM_DATA_DIR", help="Where the embedded farm keeps its files (default: ~/.reward-farm).")
    @functools.wraps(fn)
    def wrapper(*args, redis_url, database_url, namespace, data_dir, **kwargs):
        env = {}
        for key, value in (("FARM_REDIS_URL", redis_url), ("FARM_DATABASE_URL", database_url),
                           ("FARM_NAMESPACE", namespace), ("FARM_DATA_DIR", data_dir)):
            if value:
                env[key] = value

        merged = {**{k: v for k, v in os.environ.items() if k.startswith("FARM_")}, **env}
        return fn(*args, settings=from_env(merged), **kwargs)

    return wrapper


def require_redis(settings: Settings) -> str:
    if not settings.redis_url:
        raise click.ClickException("no farm to talk to: start one with `farm up`, or set FARM_REDIS_URL / --redis-url")
    return settings.redis_url
