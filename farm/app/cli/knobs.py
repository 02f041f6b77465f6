"""`farm knobs`: show and set the operator's knobs (tolerated extra delay D, scheduler, policy, per-stage
cost, timeout and pool bounds). Saved in the store and published to Redis, where workers and the planner
read them live."""

from __future__ import annotations

import json

import click
import redis as redis_lib
from rich.console import Console
from rich.table import Table

from farm import registry
from farm.app.cli.db import database_option, open_engine
from farm.config import from_env
from farm.knobs import Knobs, StageKnobs
from farm.pipeline import UnknownPipeline
from farm.store.engine import StoreError
from farm.store.knob_store import GLOBAL_KNOBS, STAGE_KNOBS, KnobError, KnobStore, apply_assignments, reset

redis_option = click.option("--redis-url", envvar="FARM_REDIS_URL", default=None,
                            help="The farm's Redis, where the live copy goes (default: FARM_REDIS_URL).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print the knobs as JSON.")
_DEFAULTS = StageKnobs()


def _store(database_url: str | None, redis_url: str | None) -> KnobStore:
    settings = from_env()
    redis_url = redis_url or settings.redis_url  # the embedded farm running here, when no URL is given
    client = redis_lib.Redis.from_url(redis_url) if redis_url else None
    return KnobStore(open_engine(database_url), client, settings.namespace)


def _load(store: KnobStore) -> Knobs:
    try:
        return store.load()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _stage_value(queue: str, name: str, value) -> str:
    """A stage's override as set; where none is (None), the stage's own value, from its pipeline ("?" when
    the pipeline cannot be loaded here)."""
    if value is not None:
        return STAGE_KNOBS[name].kind.show(value)
    try:
        _, stage = registry.stage_by_queue(queue)
    except (UnknownPipeline, ImportError):
        return "? (pipeline)"
    return f"{getattr(stage, name):g} (pipeline)"


def _knob_list() -> str:
    """`farm knobs set --help`'s list of the knobs, from their fields."""
    lines = ["\b", "knobs:"] + [f"  {n}: {k.describe()}" for n, k in GLOBAL_KNOBS.items()]
    lines += ["stage knobs (--stage QUEUE):"] + [f"  {n}: {k.describe()}" for n, k in STAGE_KNOBS.items()]
    return "\n".join(lines)


def _show(knobs: Knobs, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(knobs.to_dict(), indent=2))
        return

    table = Table(title="knobs", show_header=True)
    table.add_column("knob")
    table.add_column("value")
    for name, k in GLOBAL_KNOBS.items():
        table.add_row(k.label(name), k.kind.show(getattr(knobs, name)))
    console = Console()
    console.print(table)
    if not knobs.stages:
        console.print("no per-stage overrides (each stage uses its pipeline's cost and timeout, "
                      f"{_DEFAULTS.min_workers}..{_DEFAULTS.max_workers} workers)")
        return
    stages = Table(title="per-stage overrides", show_header=True)
    stages.add_column("stage queue")
    for name in STAGE_KNOBS:
        stages.add_column(name)
    for queue, overrides in sorted(knobs.stages.items()):
        stages.add_row(queue, *(_stage_value(queue, name, getattr(overrides, name)) for name in STAGE_KNOBS))
    console.print(stages)


def _save(store: KnobStore, knobs: Knobs, as_json: bool) -> None:
    try:
        store.save(knobs)
    except redis_lib.RedisError as exc:
        raise click.ClickException(f"saved in the store, but the live copy in Redis was not updated: {exc}") from exc
    _show(knobs, as_json)
    if store.redis is None:
        click.echo("note: no Redis given (FARM_REDIS_URL / --redis-url): saved in the store only; "
                   "the farm picks the knobs up when it starts", err=True)


@click.group(invoke_without_command=True)
@database_option
@redis_option
@json_option
@click.pass_context
def knobs(ctx: click.Context, database_url: str | None, redis_url: str | None, as_json: bool) -> None:
    """Show the knobs (no subcommand), or set/reset them."""
    ctx.obj = {"database_url": database_url, "redis_url": redis_url}
    if ctx.invoked_subcommand is None:
        _show(_load(_store(database_url, redis_url)), as_json)


@knobs.command("show")
@json_option
@click.pass_obj
def show(obj, as_json: bool) -> None:
    """Show the knobs in force."""
    _show(_load(_store(obj["database_url"], obj["redis_url"])), as_json)


@knobs.command("set", epilog=_knob_list())
@click.argument("assignments", nargs=-1, required=True)
@click.option("--stage", default=None, metavar="QUEUE",
              help=f"Set a stage's knobs ({', '.join(STAGE_KNOBS)}), e.g. synthetic.execute.")
@json_option
@click.pass_obj
def set_(obj, assignments: tuple[str, ...], stage: str | None, as_json: bool) -> None:
    """Set knobs: `delay_s=3 scheduler=fcfs abandon_after_s=900` (or `=never`), or with --stage QUEUE
    `timeout_s=30 max_workers=8` (cost/timeout_s=default restores the pipeline's own value)."""
    store = _store(obj["database_url"], obj["redis_url"])
    try:
        updated = apply_assignments(_load(store), assignments, stage=stage)
    except KnobError as exc:
        raise click.UsageError(str(exc)) from exc
    _save(store, updated, as_json)


@knobs.command("reset")
@click.option("--stage", default=None, metavar="QUEUE", help="Drop only this stage's overrides.")
@json_option
@click.pass_obj
def reset_(obj, stage: str | None, as_json: bool) -> None:
    """Restore the defaults (or drop one stage's overrides)."""
    store = _store(obj["database_url"], obj["redis_url"])
    try:
        updated = reset(_load(store), stage=stage)
    except KnobError as exc:
        raise click.UsageError(str(exc)) from exc
    _save(store, updated, as_json)
