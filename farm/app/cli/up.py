"""`farm up`: run a farm on this machine until Ctrl-C."""

from __future__ import annotations

import os
import shlex
import signal
import threading

import click

from farm import registry
from farm.app.cli.common import settings_options
from farm.app.embedded import EmbeddedFarm
from farm.app.leftovers import FarmRunning
from farm.app.metrics import MetricsUnavailable
from farm.config import Settings, read_endpoint
from farm.pipeline import UnknownPipeline
from planner.backends import BackendError


def _stage_counts(pairs: tuple[str, ...]) -> dict[str, int]:
    counts = {}
    for pair in pairs:
        queue, sep, n = pair.partition("=")
        if not sep or not n.isdigit():
            raise click.BadParameter(f"{pair!r} is not QUEUE=N (e.g. synthetic.execute=4)", param_hint="--stage-workers")
        counts[queue] = int(n)
    return counts


def how_clients_find_it(settings: Settings) -> str:
    """What a client on this machine must set to reach this farm: nothing from the default data dir (its
    endpoint file is where `farm.config.from_env` looks), FARM_DATA_DIR from any other."""
    def same(a: str, b: str) -> bool:
        return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))

    direct = [f"FARM_REDIS_URL={shlex.quote(settings.redis_url or '')}"]
    if settings.namespace != Settings().namespace:
        direct.append(f"FARM_NAMESPACE={shlex.quote(settings.namespace)}")
    if settings.database_url:
        direct.append(f"FARM_DATABASE_URL={shlex.quote(settings.database_url)}")
    if same(settings.data_dir, Settings().data_dir):
        return f"clients here find it on their own (or export {' '.join(direct)})"
    data_dir = os.path.abspath(os.path.expanduser(settings.data_dir))
    return (f"clients look for it in {Settings().data_dir}, so they need\n"
            f"    export FARM_DATA_DIR={shlex.quote(data_dir)}\n(or export {' '.join(direct)})")


@click.command()
@settings_options
@click.option("--pipeline", "pipelines", multiple=True, default=("synthetic",), show_default=True,
              help="Pipelines to serve (repeat for several).")
@click.option("--workers", "workers_per_stage", type=click.IntRange(0, 256), default=1, show_default=True,
              help="Fixed workers per stage (without the planner).")
@click.option("--stage-workers", multiple=True, metavar="QUEUE=N", help="Workers of one stage, e.g. synthetic.execute=4.")
@click.option("--flower-port", type=click.IntRange(0, 65535), default=5555, show_default=True, help="0: no Flower.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=9464, show_default=True,
              help="The Prometheus endpoint on 127.0.0.1 (served by the recorder); 0: none.")
@click.option("--planner/--no-planner", default=False, show_default=True,
              help="Let the planner daemon size the pools instead of fixed workers.")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where workers live: processes on this machine, or Ray actors.")
@click.option("--ray-address", default=None,
              help="ray backend: the cluster, HOST:PORT or ray://HOST:PORT (default: a cluster running on this "
                   "machine, else a head of its own that stops with the farm).")
def up(settings, pipelines, workers_per_stage, stage_workers, flower_port, metrics_port, planner, backend, ray_address):
    """Run a farm: embedded Redis and SQLite history unless URLs are given, local stage workers, Flower."""
    other = read_endpoint(settings.data_dir)
    if other:
        raise click.ClickException(f"a farm already runs from {settings.data_dir} (pid {other['pid']}); "
                                   "stop it or pass another --data-dir")
    try:
        for name in pipelines:
            registry.get(name)
    except UnknownPipeline as exc:
        raise click.ClickException(str(exc)) from exc
    if ray_address is not None and backend != "ray":
        raise click.UsageError("--ray-address is an option of the ray backend (--backend ray)")
    options = {"address": ray_address} if ray_address else {}
    farm = EmbeddedFarm(settings, pipelines=pipelines, workers_per_stage=workers_per_stage,
                        workers=_stage_counts(stage_workers), flower_port=flower_port or None,
                        metrics_port=metrics_port or None, planner=planner,
                        backend_kind=backend, backend_options=options)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with farm:
            _serve(farm, planner, stop)
    except (FarmRunning, BackendError, TimeoutError) as exc:  # one starting here; no cluster; workers not ready
        raise click.ClickException(str(exc)) from exc
    except MetricsUnavailable as exc:
        raise click.ClickException(f"{exc}; pass another --metrics-port, or 0 for none") from exc


def _serve(farm: EmbeddedFarm, planner: bool, stop: threading.Event) -> None:
    s = farm.settings
    click.echo(f"redis     {s.redis_url}")
    click.echo(f"history   {s.database_url or 'sqlite under ' + str(s.data_dir)}")
    click.echo(f"namespace {s.namespace}")
    click.echo(f"flower    {farm.flower_url or 'off'}")
    click.echo(f"metrics   {farm.metrics_url or 'off'}")
    click.echo(f"stages    {', '.join(farm.stage_queues)}")
    click.echo(f"planner   {'on' if planner else 'off (fixed pools)'}")
    if not planner:
        farm.wait_ready(stop=stop)
    click.echo(f"the farm is up; {how_clients_find_it(s)}. Ctrl-C stops it.")
    stop.wait()
    click.echo("stopping: workers finish their current request first")
