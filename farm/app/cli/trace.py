"""`farm trace`: generate `reward-trace/1` workloads and summarise trace files."""

from __future__ import annotations

import json
import os

import click

from planner.eval import trace as tracefile
from planner.eval.tracegen import MODES, GeneratorParams, generate
from planner.eval.tracestats import DEFAULT_BIN_S, summary

_DEFAULTS = GeneratorParams()


@click.group()
def trace() -> None:
    """Reward traces (reward-trace/1): generate the paper's workload, inspect a trace."""


@trace.command("generate")
@click.option("--mode", type=click.Choice(MODES), default=_DEFAULTS.mode, show_default=True,
              help="colocated trainer (idle gaps between batches) or disaggregated with one-step staleness.")
@click.option("--tasks", type=click.IntRange(min=1), default=_DEFAULTS.tasks, show_default=True)
@click.option("--batches", type=click.IntRange(min=1), default=_DEFAULTS.batches, show_default=True,
              help="Batches (training iterations) per task.")
@click.option("--batch-size", type=click.IntRange(min=1), default=_DEFAULTS.batch_size, show_default=True)
@click.option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Multiply every time (below 1 for a short live demo).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="Trace file to write (.jsonl, or .jsonl.gz to compress).")
def generate_cmd(mode: str, tasks: int, batches: int, batch_size: int, time_scale: float, seed: int,
                 output: str) -> None:
    """Generate a CUDA reward workload after §3 of the DistRS paper (see planner/tracegen.py)."""
    try:
        params = GeneratorParams(mode=mode, tasks=tasks, batches=batches, batch_size=batch_size,
                                 time_scale=time_scale)
        result = generate(params, seed)
        tracefile.write(output, result)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"wrote {output}: {len(result.tasks)} tasks, {len(result.batches)} batches, "
               f"{result.num_requests} requests")


@trace.command("show")
@click.argument("file")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--bin-s", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_BIN_S, show_default=True,
              help="Bin width for the arrival-gap fraction (Fig. 5(b) uses 5 s).")
def show(file: str, as_json: bool, bin_s: float) -> None:
    """Summarise FILE (a trace path, or a bundled name: cuda-colocated, cuda-disaggregated, demo)."""
    try:
        path = tracefile.resolve(file)
        info = {"file": str(path), **summary(tracefile.read(path), bin_s=bin_s)}
    except ValueError as e:
        hint = "" if os.path.exists(file) else f" (bundled traces: {', '.join(tracefile.BUNDLED)})"
        raise click.ClickException(f"{e}{hint}") from None
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(_render(info))


def _shares(shares: dict[str, float]) -> str:
    return ", ".join(f"{name} {share:.1%}" for name, share in shares.items())


def _render(info: dict) -> str:
    lines = [
        f"trace      {info['file']}",
        f"tasks      {len(info['tasks'])} ({', '.join(info['tasks'])})",
        f"batches    {info['batches']}, sizes {', '.join(str(s) for s in info['batch_sizes'])}",
        f"requests   {info['requests']}",
        f"span       {info['span_s']:.1f} s; mean batch duration T {info['batch_duration_mean_s']:.1f} s",
        f"no-arrival {info['arrival_gap_fraction']:.1%} of {info['arrival_gap_bin_s']:g} s bins (mean over tasks)",
        "",
        f"{'stage':<12}{'resource':<10}{'cost':>6}{'timeout':>9}{'visited':>9}{'mean':>9}{'p95':>9}{'at timeout':>12}",
    ]
    for s in info["stages"]:
        lines.append(
            f"{s['name']:<12}{s['resource']:<10}{s['cost']:>6g}{s['timeout_s']:>8g}s{s['visited']:>9}"
            f"{s['mean_s']:>8.2f}s{s['p95_s']:>8.2f}s{s['timeout_fraction']:>12.1%}"
        )
    lines += ["", f"last stage visited: {_shares(info['last_stage'])}"]
    if "outcomes" in info:
        lines += [
            f"outcomes (all):            {_shares(info['outcomes']['all'])}",
            f"outcomes (first batches):  {_shares(info['outcomes']['first_batches'])}",
            f"outcomes (last batches):   {_shares(info['outcomes']['last_batches'])}",
        ]
    return "\n".join(lines)
