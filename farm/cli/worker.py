"""`farm worker --stage synthetic.compile`: one Celery worker serving one stage, one request at a time."""

from __future__ import annotations

import os
import re
import socket

import click

_NAME = re.compile(r"^[A-Za-z0-9_.@:-]{1,128}$")


@click.command()
@click.option("--stage", "stage_queue", required=True, help="the stage queue to serve, '<pipeline>.<stage>'")
@click.option("--name", default=None, help="the worker's name in the farm (default: '<stage>-<pid>@<host>')")
@click.option("--loglevel", default="INFO", show_default=True)
@click.option("--events/--no-events", default=True, show_default=True, help="send task events (for Flower)")
@click.option("--import", "imports", multiple=True, metavar="MODULE",
              help="import a module first (one that registers its own pipelines with farm.registry)")
def worker(stage_queue: str, name: str | None, loglevel: str, events: bool, imports: tuple[str, ...]) -> None:
    """Run a stage worker; configuration from FARM_REDIS_URL, FARM_BROKER_URL, FARM_NAMESPACE, FARM_LEASE_S..."""
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
    settings = from_env()
    app = make_app(settings, send_events=events)
    register(app, settings, stage_queue, name)
    argv = ["worker", "--pool=prefork", "--concurrency=1", "--prefetch-multiplier=1", "--without-gossip",
            "--without-mingle", f"--loglevel={loglevel}", "-Q", settings.queue(stage_queue),
            "-n", name if "@" in name else f"{name}@{host}"]
    if events:
        argv.append("--task-events")
    app.worker_main(argv)
