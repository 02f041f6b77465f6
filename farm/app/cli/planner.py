"""`farm planner`: the daemon that sizes the stage pools at every decision epoch and sets EBF keys. Its process
also keeps the tenants' fair shares published to Redis (farm.app.fair_shares), where the pick reads them."""

from __future__ import annotations

import logging

import click

from farm.app import fair_shares
from farm.config import from_env
from farm.protocol import heartbeat
from farm.store.engine import StoreError
from planner.backends import BackendError
from planner.runtime import service


@click.command()
@click.option("--backend", type=click.Choice(["local", "docker", "ray"]), default="local", show_default=True,
              help="Where workers live: processes on this machine, Docker containers, or Ray actors on a cluster.")
@click.option("--pipeline", "pipelines", multiple=True,
              help="Size only this pipeline's pools (repeatable; default: every pipeline the farm has seen).")
@click.option("--startup-s", type=click.FloatRange(min=0), default=None,
              help="Seconds a new worker takes to serve; the policy starts workers that far ahead "
                   "(default: the backend's measured start-up).")
@click.option("--image", default=None, help="docker backend: the worker image of CPU and I/O stages.")
@click.option("--gpu-image", default=None, help="docker backend: the worker image of GPU stages (CUDA base).")
@click.option("--network", default=None, help="docker backend: the network the workers join.")
@click.option("--ray-address", default=None,
              help="ray backend: the cluster, HOST:PORT or ray://HOST:PORT (default: FARM_RAY_ADDRESS, else "
                   "RAY_ADDRESS, else a cluster running on this machine, else a head of its own).")
@click.option("--database-url", envvar="FARM_DATABASE_URL", default=None,
              help="The history store (default: FARM_DATABASE_URL, else the embedded SQLite file).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the policy's sampling.")
@click.option("--cold-workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Floor of every pool while a batch with no history anywhere in its pipeline is active "
                   "(0: the policy's own cold default alone).")
@click.option("--once", is_flag=True, help="Reconcile, make one decision and exit.")
@click.option("--retire-all", is_flag=True,
              help="Retire every worker of this farm on the backend, wait until they are gone and exit (workers "
                   "outlive a stopped daemon: stop it first, then take the farm down with this).")
@click.option("--retire-wait-s", type=click.FloatRange(min=0), default=180.0, show_default=True,
              help="--retire-all: how long to wait for the workers to finish their requests and exit.")
@click.option("-v", "--verbose", is_flag=True, help="Log every decision.")
def planner(backend: str, pipelines: tuple[str, ...], startup_s: float | None, image: str | None,
            gpu_image: str | None, network: str | None, ray_address: str | None, database_url: str | None, seed: int,
            cold_workers: int, once: bool, retire_all: bool, retire_wait_s: float, verbose: bool) -> None:
    """Run the planner daemon: wakes when a batch opens or completes and every `tick_s`, decides the
    workers per stage with the knobs' policy, and spawns or retires workers through the backend."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    options = {k: v for k, v in (("image", image), ("gpu_image", gpu_image), ("network", network)) if v is not None}
    if options and backend != "docker":
        raise click.UsageError("--image, --gpu-image and --network are options of the docker backend "
                               "(also read from FARM_DOCKER_* variables)")
    if ray_address is not None:
        if backend != "ray":
            raise click.UsageError("--ray-address is an option of the ray backend (also read from FARM_RAY_ADDRESS)")
        options["address"] = ray_address
    if retire_all and once:
        raise click.UsageError("--once and --retire-all are exclusive")
    try:
        built = service.build(from_env(), backend=backend, database_url=database_url, pipelines=pipelines or None,
                              startup_s=startup_s, seed=seed, cold_workers=cold_workers,
                              backend_options=options)
    except (StoreError, ValueError, BackendError) as exc:
        raise click.ClickException(str(exc)) from exc
    stop_publishing, publisher = None, None
    try:
        if retire_all:
            _retire_all(built, retire_wait_s)
        else:
            stop_publishing, publisher = fair_shares.start_publishing(built.engine, built.redis,
                                                                      built.settings.namespace)
            service.run(built, once=once)
    finally:
        if stop_publishing is not None:
            stop_publishing.set()
        if publisher is not None:
            publisher.join(5)  # before the store and Redis it uses are closed
        built.close()


def _retire_all(built: service.Planner, wait_s: float) -> None:
    running = heartbeat.read(built.redis, built.settings.namespace)
    if running is not None:  # it would spawn the workers again at its next epoch
        raise click.ClickException(
            f"a planner daemon serves namespace {built.settings.namespace!r} (pid {running.pid}, backend "
            f"{running.backend}): stop it first (`docker compose stop planner`, or its process)")
    try:
        left = service.retire_all(built, wait_s=wait_s)
    except BackendError as exc:
        raise click.ClickException(str(exc)) from exc
    if left:
        raise click.ClickException(
            f"{len(left)} worker(s) still running or stopping after {wait_s:g} s: {', '.join(left)}")
    click.echo(f"no worker of namespace {built.settings.namespace!r} is left on the {built.backend.kind} backend")


if __name__ == "__main__":  # `python -m farm.app.cli.planner`: how the embedded farm and the demo start it
    planner()
