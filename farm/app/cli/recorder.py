"""`farm recorder`: drain the history stream of the farm's Redis into the store until stopped."""

from __future__ import annotations

import logging
import signal
import threading

import click

from farm.app import metrics
from farm.app.cli.db import database_option, open_engine
from farm.config import from_env
from farm.store.engine import StoreError
from farm.store.recorder import Recorder


@click.command()
@database_option
@click.option("--redis-url", envvar="FARM_REDIS_URL", default=None, help="The farm's Redis (default: FARM_REDIS_URL).")
@click.option("--once", is_flag=True, help="Drain what the stream holds now and exit.")
@click.option("--chunk", type=click.IntRange(min=1), default=2000, show_default=True, help="Entries per transaction.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), envvar="FARM_METRICS_PORT", default=None,
              help=f"Serve the farm's Prometheus metrics on this port (e.g. {metrics.DEFAULT_PORT}); default: none.")
@click.option("--metrics-host", envvar="FARM_METRICS_HOST", default="127.0.0.1", show_default=True,
              help="The address the metrics endpoint listens on (0.0.0.0: every interface).")
def recorder(database_url: str | None, redis_url: str | None, once: bool, chunk: int, metrics_port: int | None,
             metrics_host: str) -> None:
    """Record the farm's history events (batches, requests, stage times, workers) in the store, and serve the
    farm's metrics."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = from_env()
    if redis_url:
        settings = settings.with_(redis_url=redis_url)
    if once and metrics_port is not None:
        raise click.UsageError("--metrics-port serves while the recorder runs; --once does not stay")
    engine = open_engine(database_url)
    server = None
    try:
        if metrics_port is not None:
            server = metrics.serve(settings, engine, host=metrics_host, port=metrics_port)
        rec = Recorder(settings, engine, chunk=chunk, on_recorded=server.history if server is not None else None)
    except (StoreError, metrics.MetricsUnavailable) as exc:
        if server is not None:
            server.close()
        engine.dispose()
        raise click.ClickException(str(exc)) from exc
    try:
        if once:
            n = rec.run_once()
            click.echo(f"recorded {n - rec.skipped} history events ({rec.skipped} skipped)")
            return
        stop = threading.Event()

        def stopping(*_) -> None:  # the wake is Redis I/O: from a thread, never inside the handler
            stop.set()
            threading.Thread(target=rec.wake, name="farm-recorder-wake", daemon=True).start()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stopping)
        logging.getLogger("farm.recorder").info("recording %s into the store%s", rec.stream,
                                                 f"; metrics on {server.url}" if server is not None else "")
        rec.run_forever(stop)
        click.echo(f"recorder stopped after {rec.consumed} history events ({rec.skipped} skipped)")
    finally:
        rec.close()
        if server is not None:
            server.close()
        engine.dispose()
