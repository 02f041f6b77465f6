"""`farm worker --stage synthetic.compile`: one Celery worker serving one stage, one request at a time."""

from __future__ import annotations

import click

from workers.process import WorkerArgumentError, serve
from workers.sandbox import SandboxUnavailable


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
    try:
        code = serve(stage_queue, name, loglevel=loglevel, events=events, imports=imports)
    except WorkerArgumentError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.option) from exc
    except SandboxUnavailable as exc:  # a stage that runs untrusted code on a machine that cannot contain it
        raise click.ClickException(f"worker for {stage_queue} refused to start: {exc}") from exc
    raise SystemExit(code)
