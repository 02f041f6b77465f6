"""`farm replay TRACE`: play a trace's trainers against the live farm K times faster; measured vs predicted."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping

import click
import redis as redis_lib
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from farm.app import live_replay as rp
from farm.app.cli.common import require_redis, settings_options
from farm.app.live_replay import ReplayError, ReplayOptions, parse_tasks, select
from farm.protocol import heartbeat
from farm.protocol.shares import parse_shares
from farm.store.engine import StoreError, open_store
from planner.backends import STARTUP_S
from planner.eval import trace as tracefile


def replay_options(fn):
    """The options `farm replay` and `farm demo` share."""
    for option in reversed([
        click.option("--speed", type=click.FloatRange(min=0, min_open=True), default=20.0, show_default=True,
                     help="K: stage times, arrivals, timeouts and D are divided by K; the report multiplies back."),
        click.option("--tasks", default=None, help="The first N tasks (a number) or task names, comma separated."),
        click.option("--batches", type=click.IntRange(min=1), default=None, help="The first N batches of each task."),
        click.option("--delay", "delay_s", type=click.FloatRange(min=0), default=None,
                     help="D in trace seconds (default: the knobs')."),
        click.option("--policy", default=None, help="Policy for the run (default: the knobs')."),
        click.option("--scheduler", type=click.Choice(["ebf", "fcfs"]), default=None,
                     help="Scheduler for the run (default: the knobs')."),
        click.option("--startup-s", type=click.FloatRange(min=0), default=None,
                     help="Seconds a new worker takes here, for the prediction (times K) when the store shows "
                          "no start-up of this run's workers (default: the local backend's typical start-up)."),
        click.option("--seed", type=int, default=0, show_default=True),
    ]):
        fn = option(fn)
    return fn


def make_options(speed, tasks, batches, delay_s, policy, scheduler, startup_s, seed):
    return ReplayOptions(speed=speed, tasks=parse_tasks(tasks), batches=batches, delay_s=delay_s, policy=policy,
                         scheduler=scheduler, startup_s=STARTUP_S["local"] if startup_s is None else startup_s,
                         seed=seed)


def run_with_progress(settings, engine, trace, options, *, quiet: bool = False) -> dict[str, Any]:
    """The replay with a rich progress bar per task (on stderr)."""
    if quiet:
        return rp.run(settings, engine, trace, options)
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        bars = {task: progress.add_task(task, total=sum(b.size for b in trace.batches_of(task)))
                for task in trace.tasks}
        return rp.run(settings, engine, trace, options, on_result=lambda task: progress.advance(bars[task]))


def _fmt(x: Any, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def print_report(report: Mapping[str, Any]) -> None:
    """Measured beside predicted, the relative error of the fidelity figures, and lost/duplicated results."""
    m, p = report["measured"], report.get("predicted")
    table = Table(title=f"replay at speed {m['speed']:g} (times in trace seconds)")
    table.add_column("metric")
    table.add_column("measured", justify="right")
    if p:
        table.add_column("predicted (farm eval)", justify="right")
    rows = [
        ("batches / requests", f"{m['batches']} / {m['requests']}", p and f"{p['batches']} / {p['requests']}"),
        ("extra delay mean (s)", _fmt(m["extra_delay_mean_s"], 2), p and _fmt(p["extra_delay_mean_s"], 2)),
        ("extra delay p95 (s)", _fmt(m["extra_delay_p95_s"], 2), p and _fmt(p["extra_delay_p95_s"], 2)),
        ("extra delay max (s)", _fmt(m["extra_delay_max_s"], 2), p and _fmt(p["extra_delay_max_s"], 2)),
    ]
    for tenant, own in m.get("tenants", {}).items():  # several tenants: each one's batches, as `farm eval` gives them
        other = (p or {}).get("tenants", {}).get(tenant, {})
        rows.append((f"tenant {tenant}: extra delay mean / max (s)",
                     f"{_fmt(own['extra_delay_mean_s'], 2)} / {_fmt(own['extra_delay_max_s'], 2)}",
                     p and f"{_fmt(other.get('extra_delay_mean_s'), 2)} / {_fmt(other.get('extra_delay_max_s'), 2)}"))
    for name, stage in m["stages"].items():
        other = (p or {}).get("stages", {}).get(name, {})
        rows.append((f"{name}: allocated worker-s", _fmt(stage["allocated_s"]), p and _fmt(other.get("allocated_s"))))
        rows.append((f"{name}: busy worker-s", _fmt(stage["busy_s"]), p and _fmt(other.get("busy_s"))))
        rows.append((f"{name}: normalised", _fmt(stage["normalized"], 2), p and _fmt(other.get("normalized"), 2)))
    for kind, seconds in m["resources"].items():
        rows.append((f"{kind}-seconds", _fmt(seconds), p and _fmt(p["resources"].get(kind))))
    rows.append(("planner runtime mean / max (s)",
                 f"{m['planner_runtime_mean_s']:.3f} / {m['planner_runtime_max_s']:.3f}",
                 p and f"{p['planner_runtime_mean_s']:.3f} / {p['planner_runtime_max_s']:.3f}"))
    for row in rows:
        table.add_row(*(row if p else row[:2]))
    console = Console()
    console.print(table)
    physics = report.get("physics")
    if physics:
        console.print(f"measured on this run and assumed by the prediction (real seconds): start-up "
                      f"{physics['startup_s']:.2f} s + {physics['startup_per_start_s']:.3f} s per concurrent start, "
                      f"exit lag {physics['retire_s']:.2f} s, dispatch {physics['dispatch_s']:.3f} s")
    results = report["results"]
    console.print(f"results: {results['received']} of {results['expected']} received, {results['lost']} lost, "
                  f"{results['duplicated']} duplicated; statuses {results['statuses']}")
    fidelity = report.get("fidelity")
    if fidelity:
        parts = [f"{k} {v['relative_error']:.0%}" for k, v in fidelity.items() if isinstance(v, dict)]
        verdict = "within" if fidelity["ok"] else "NOT within"
        console.print(f"fidelity ({verdict} 15% of the prediction): " + ", ".join(parts))


def _warn_without_planner(settings) -> None:
    """A replay without a planner daemon runs on whatever fixed workers exist: say so, it is rarely meant."""
    client = redis_lib.Redis.from_url(settings.redis_url)
    try:
        if not heartbeat.read(client, settings.namespace):
            click.echo("warning: no planner daemon serves this farm (start `farm planner`); "
                       "the replay runs on the workers that exist", err=True)
    except redis_lib.RedisError as exc:
        raise click.ClickException(f"cannot reach the farm's Redis at {settings.redis_url}: {exc}") from exc
    finally:
        client.close()


@click.command()
@click.argument("trace_spec", metavar="TRACE")
@replay_options
@click.option("--share", "share_items", multiple=True, metavar="TENANT=W",
              help="A trace tenant's fair share, as `farm eval --share` (in force for the run; default 1 each).")
@click.option("--tenant-max-workers", "cap_items", multiple=True, metavar="TENANT:KIND=N",
              help="A trace tenant's cap of workers of a resource kind (repeatable), as `farm eval`'s.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: measured, predicted, results, fidelity.")
@settings_options
def replay(trace_spec: str, speed, tasks, batches, delay_s, policy, scheduler, startup_s, seed, share_items,
           cap_items, as_json: bool, settings) -> None:
    """Replay TRACE (a reward-trace/1 file, or a bundled trace's name) against the running farm.

    The farm must be serving the `synthetic` pipeline with the trace's stages: `farm up` with
    `farm planner` (elastic pools), or fixed workers."""
    require_redis(settings)
    try:
        options = replace(make_options(speed, tasks, batches, delay_s, policy, scheduler, startup_s, seed),
                          shares=parse_shares(share_items, cap_items))
        trace = select(tracefile.read(tracefile.resolve(trace_spec)), options.tasks, options.batches)
        engine = open_store(settings)
    except (ReplayError, tracefile.TraceError, StoreError, ValueError) as exc:  # ShareError is a ValueError
        raise click.ClickException(str(exc)) from exc
    try:
        _warn_without_planner(settings)
        report = run_with_progress(settings, engine, trace, options, quiet=as_json)
    except (ReplayError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        print_report(report)
