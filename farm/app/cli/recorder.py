"""`farm recorder`: drain the history stream of the farm's Redis into the store until stopped."""

from __future__ import annotations

import logging
import signal
import threading

import click

from farm.app.cli.db import database_option, open_engine
from farm.config import from_env
from farm.store.engine import StoreError
from farm.store.recorder import Recorder


@click.command()
@database_option
@click.option("--redis-url", envvar="FARM_REDIS_URL", default=None, help="The farm's Redis (default: FARM_REDIS_URL).")
@click.option("--once", is_flag=True, help="Drain what the stream holds now and exit.")
@click.option("--chunk", type=click.IntRange(min=1), default=2000, show_default=True, help="Entries per transaction.")
def recorder(database_url: str | None, redis_url: str | None, once: bool, chunk: int) -> None:
    """Record the farm's history events (batches, requests, stage times, workers) in the store."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = from_env()
    if redis_url:
        settings = settings.with_(redis_url=redis_url)
    engine = open_engine(database_url)
    try:
        rec = Recorder(settings, engine, chunk=chunk)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        if once:
            n = rec.run_once()
            click.echo(f"recorded {n - rec.skipped} history events ({rec.skipped} skipped)")
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        logging.getLogger("farm.recorder").info("recording %s into the store", rec.stream)
        rec.run_forever(stop)
        click.echo(f"recorder stopped after {rec.consumed} history events ({rec.skipped} skipped)")
    finally:
        rec.close()
        engine.dispose()
