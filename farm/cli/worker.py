"""`farm worker --stage synthetic.compile`: one Celery worker serving one stage, one request at a time."""

from __future__ import annotations

import os
import re
import socket

import click

_NAME = re.compile(r"^[A-Za-z0-9_.@:-]{1,128}$")
# How long a pool process that is leaving waits for the main process to take its last result.
RESULT_WAIT_S = 2.0


@click.command()
@click.option("--stage", "stage_queue", required=True, help="the stage queue to serve, '<pipeline>.<stage>'")
@click.option("--name", default=None, help="the worker's name in the farm (default: '<stage>-<pid>@<host>')")
@click.option("--loglevel", default="INFO", show_default=True)
@click.option("--events/--no-events", default=True, show_default=True, envvar="FARM_WORKER_EVENTS",
              help="send task events (for Flower); also FARM_WORKER_EVENTS=0/1")
@click.option("--import", "imports", multiple=True, metavar="MODULE",
              help="import a module first (one that registers its own pipelines with farm.registry)")
def worker(stage_queue: str, name: str | None, loglevel: str, events: bool, imports: tuple[str, ...]) -> None:
    """Run a stage worker; configuration from FARM_REDIS_URL, FARM_BROKER_URL, FARM_NAMESPACE, FARM_LEASE_S..."""
    raise SystemExit(serve(stage_queue, name, loglevel=loglevel, events=events, imports=imports))


def serve(stage_queue: str, name: str | None = None, *, loglevel: str = "INFO", events: bool = True,
          imports: tuple[str, ...] = ()) -> int:
    """Run the worker until it is shut down; its exit code. Bad arguments raise click.BadParameter.

    `farm worker` calls it, and so does the local backend's launcher in a process it forks."""
    import importlib

    from farm import registry
    from farm.celery_app import make_app
    from farm.config import from_env
    from farm.pipeline import UnknownPipeline
    from workers.stage import register

    for module in imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise click.BadParameter(f"cannot import {module!r}: {exc}", param_hint="--import") from exc
    try:
        registry.stage_by_queue(stage_queue)
    except UnknownPipeline as exc:
        raise click.BadParameter(str(exc), param_hint="--stage") from exc
    host = socket.gethostname()
    name = name or f"{stage_queue}-{os.getpid()}@{host}"
    if not _NAME.match(name):
        raise click.BadParameter(f"{name!r}: use 1-128 letters, digits or '_.@:-'", param_hint="--name")
    level = log_level(loglevel)
    settings = from_env()
    app = make_app(settings, send_events=events)
    register(app, settings, stage_queue, name)
    return run_worker(app, settings.queue(stage_queue), name if "@" in name else f"{name}@{host}", level, events)


def log_level(loglevel: str) -> int:
    from celery.utils.log import mlevel

    try:
        return mlevel(loglevel.upper())
    except (KeyError, ValueError, AttributeError) as exc:
        raise click.BadParameter(f"{loglevel!r} is not a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL)",
                                 param_hint="--loglevel") from exc


def run_worker(app, queue: str, hostname: str, loglevel: int, events: bool) -> int:
    """Celery's worker, built directly rather than through `celery worker`'s command line
    (`app.worker_main`): that path imports every Celery CLI plugin (flower's, click-repl, prompt-toolkit,
    pygments), about half of a worker's start-up CPU, which a burst of new workers on a small machine
    pays many times over. The options are those `celery worker` would be given:
    `--pool=prefork --concurrency=1 --prefetch-multiplier=1 --without-gossip --without-mingle -Q queue`
    (and `--task-events` with events, which Flower needs; the worker heartbeat stays, Flower's liveness).
    Returns the worker's exit code."""
    _bound_result_wait()
    worker = app.Worker(hostname=hostname, pool_cls="prefork", concurrency=1, prefetch_multiplier=1,
                        without_gossip=True, without_mingle=True, queues=[queue], loglevel=loglevel,
                        task_events=events)
    worker.start()
    return worker.exitcode or 0


def _bound_result_wait() -> None:
    """Bound billiard's wait, at a pool process's exit, for the main process to have read its results.

    billiard waits up to 30 s (300 x 0.1 s). A warm shutdown can leave it waiting that long: a token handed
    to the pool process just as the shutdown began is dropped from the main process's books (the broker
    gets it back) while the pool process still runs it, so nobody reads its result, and the retired
    worker lingers 30 s for nothing. The farm needs none of these results: a request's outcome is in
    Redis before the task returns, and the token's broker message is at worst redelivered (an empty pick)."""
    import billiard.pool

    interval = billiard.pool.GUARANTEE_MESSAGE_CONSUMPTION_RETRY_INTERVAL
    billiard.pool.GUARANTEE_MESSAGE_CONSUMPTION_RETRY_LIMIT = max(1, round(RESULT_WAIT_S / interval))
