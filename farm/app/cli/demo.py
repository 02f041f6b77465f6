"""`farm demo`: the embedded farm with the planner and local workers, replaying a small bundled trace."""

from __future__ import annotations

import json

import click

from farm.app.cli.replay import print_report, run_with_progress
from farm.app.demo import DEMO_MAX_WORKERS, run_demo


@click.command()
@click.option("--speed", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="K: the bundled demo trace (already a short workload) played K times faster.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Where the PNG goes (default: the demo's data directory).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="The embedded farm's files (default: a fresh temporary directory).")
@click.option("--max-workers", type=click.IntRange(min=1), default=None,
              help="Bound of every pool (default: 12, what one machine carries).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def demo(speed: float, out: str | None, data_dir: str | None, max_workers: int | None, as_json: bool) -> None:
    """Run a whole elastic farm on this machine on the bundled demo trace (a minute or two): an embedded
    Redis and history store, the planner daemon with the local backend, two trainers replayed with
    progress bars, then the report (measured beside `farm eval`'s prediction) and a PNG of the workers
    over time against the ideal policy."""
    def replayer(settings, engine, trace, options):
        return run_with_progress(settings, engine, trace, options, quiet=as_json)

    say = (lambda msg: None) if as_json else (lambda msg: click.echo(msg, err=True))
    report, png = run_demo(speed=speed, out=out, data_dir=data_dir, max_workers=max_workers or DEMO_MAX_WORKERS,
                           replayer=replayer, say=say)
    if as_json:
        click.echo(json.dumps({**report, "png": str(png)}, indent=2))
        return
    print_report(report)
    click.echo(f"workers over time: {png}")
