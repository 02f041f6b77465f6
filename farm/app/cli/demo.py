"""`farm demo`: the embedded farm with the planner and local workers, replaying a small bundled trace."""

from __future__ import annotations

import json

import click

from farm.app.cli.replay import print_report, run_with_progress
from farm.app.demo import DEMO_MAX_WORKERS, run_demo
from farm.app.live_replay.plan import ReplayError
from farm.protocol.shares import parse_shares


@click.command()
@click.option("--speed", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="K: the bundled demo trace (already a short workload) played K times faster.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Where the PNG goes (default: the demo's data directory).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="The embedded farm's files (default: a fresh temporary directory).")
@click.option("--max-workers", type=click.IntRange(min=1), default=None,
              help="Bound of every pool (default: 12, what one machine carries).")
@click.option("--tenants", type=click.IntRange(min=1), default=None,
              help="Divide the demo's trainers between N tenants t1..tN, each with its fair share of the pools.")
@click.option("--share", "share_items", multiple=True, metavar="TENANT=W",
              help="With --tenants: a tenant's fair share, as `farm eval --share` (default 1 each; repeatable).")
@click.option("--tenant-max-workers", "cap_items", multiple=True, metavar="TENANT:KIND=N",
              help="With --tenants: a tenant's cap of workers of a resource kind, as `farm eval`'s (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def demo(speed: float, out: str | None, data_dir: str | None, max_workers: int | None, tenants: int | None,
         share_items: tuple[str, ...], cap_items: tuple[str, ...], as_json: bool) -> None:
    """Run a whole elastic farm on this machine on the bundled demo trace (a minute or two): an embedded
    Redis and history store, the planner daemon with the local backend, two trainers replayed with
    progress bars, then the report (measured beside `farm eval`'s prediction) and a PNG of the workers
    over time against the ideal policy."""
    if (share_items or cap_items) and tenants is None:
        raise click.UsageError("--share and --tenant-max-workers name the tenants of --tenants N")
    try:
        shares = parse_shares(share_items, cap_items)
    except ValueError as exc:  # ShareError
        raise click.UsageError(str(exc)) from exc

    def replayer(settings, engine, trace, options):
        return run_with_progress(settings, engine, trace, options, quiet=as_json)

    say = (lambda msg: None) if as_json else (lambda msg: click.echo(msg, err=True))
    try:
        report, png = run_demo(speed=speed, out=out, data_dir=data_dir, max_workers=max_workers or DEMO_MAX_WORKERS,
                               replayer=replayer, say=say, tenants=tenants, shares=shares)
    except ReplayError as exc:  # a share for a tenant the split lacks, before the farm starts
        raise click.UsageError(str(exc)) from exc
    if as_json:
        click.echo(json.dumps({**report, "png": str(png)}, indent=2))
        return
    print_report(report)
    click.echo(f"workers over time: {png}")
