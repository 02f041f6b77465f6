"""`farm eval TRACE`: replay a trace with a policy in the loop and report docs/design.md's metrics."""

from __future__ import annotations

import json

import click

from farm.pipeline import RESOURCES
from farm.app.cli.knob_options import knob_options, knobs_from_options
from planner.eval import trace as tr
from planner.eval.compare import STARTUP_SWEEP_S, run_compare
from planner.eval.loop import evaluate
from planner.eval.startup import Startup, parse_startup
from planner.policy.capacity import UNBOUNDED, Capacity, parse_capacity
from planner.policy.decide import parse_policy
from planner.runtime import native
from farm.protocol.shares import FairShare, ShareError, parse_shares


# a replay's pools are bounded by the policy alone, not by the live farm's default bound
REPLAY_DEFAULTS = {"max_workers": 100_000}


def _load(spec: str):
    try:
        return tr.read(tr.resolve(spec))
    except tr.TraceError as e:
        raise click.ClickException(str(e)) from None


def _startup(value: str) -> Startup:
    try:
        return parse_startup(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--startup-s") from None


def _capacity(value: str | None, t: tr.Trace) -> Capacity:
    if value is None:
        return UNBOUNDED
    try:
        capacity = parse_capacity(value, RESOURCES)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--capacity") from None
    for s in t.stages:  # no worker could ever serve the stage: the replay would never end
        if capacity.limit(s.resource) == 0:
            raise click.BadParameter(f"stage {s.name!r} runs on {s.resource} workers, and the capacity holds none",
                                     param_hint="--capacity")
    return capacity


def _shares(shares: tuple[str, ...], caps: tuple[str, ...], reserve: tuple[str, ...]) -> dict[str, FairShare]:
    """The fair shares of the trace's tenants from `--share NAME=W`, `--tenant-max-workers NAME:KIND=N` and
    `--reserve NAME`."""
    try:
        return parse_shares(shares, caps, reserve)
    except ShareError as e:
        raise click.BadParameter(str(e), param_hint="--share/--tenant-max-workers") from None


def _sweep(value: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"expected seconds separated by commas, not {value!r}",
                                 param_hint="--startup-sweep") from None
    if any(not (x >= 0) or x == float("inf") for x in out):
        raise click.BadParameter("start-ups must be finite numbers >= 0", param_hint="--startup-sweep")
    return out


def _startup_text(summary: dict) -> str:
    spec = summary.get("startup") or format(summary["startup_s"], "g")
    return f"{spec} s" if spec.replace(".", "", 1).isdigit() else spec


def _table(summary: dict) -> str:
    lines = [
        f"policy {summary['policy']}  scheduler {summary['scheduler']}  D {summary['delay_s']:g} s  "
        f"start-up {_startup_text(summary)}",
        f"{summary['batches']} batches, {summary['requests']} requests, {summary['decisions']} decisions"
        + (f", on a cluster of {', '.join(f'{n} {k}' for k, n in summary['capacity'].items())} workers "
           f"({summary['capacity_bound_decisions']} decisions held below their want)" if "capacity" in summary else ""),
        f"extra delay   mean {summary['extra_delay_mean_s']:.3f} s   p95 {summary['extra_delay_p95_s']:.3f} s   "
        f"max {summary['extra_delay_max_s']:.3f} s",
        f"{'stage':<16}{'resource':<10}{'allocated s':>14}{'busy s':>14}{'normalised':>12}",
    ]
    for name, s in summary["stages"].items():
        norm = "-" if s["normalized"] is None else f"{s['normalized']:.3f}"
        lines.append(f"{name:<16}{s['resource']:<10}{s['allocated_s']:>14.1f}{s['busy_s']:>14.1f}{norm:>12}")
    for tenant, x in summary.get("tenants", {}).items():
        lines.append(f"tenant {tenant:<9}{x['batches']:>4} batches   extra delay mean {x['extra_delay_mean_s']:.3f} s"
                     f"   max {x['extra_delay_max_s']:.3f} s")
    if "preempted" in summary:  # running requests stopped for a reserved share, per stage
        lines.append("preempted     " + "   ".join(f"{name} {n}" for name, n in summary["preempted"].items()))
    lines.append("resources     " + "   ".join(f"{k} {v:.1f} s" for k, v in summary["resources"].items()))
    lines.append(
        f"planner       mean {summary['planner_runtime_mean_s'] * 1000:.1f} ms   "
        f"max {summary['planner_runtime_max_s'] * 1000:.1f} ms per decision"
    )
    return "\n".join(lines)


@click.command("eval")
@click.argument("trace")
@knob_options(REPLAY_DEFAULTS)  # --delay, --scheduler, --policy, --tick-s, --max-workers
@click.option("--startup-s", "startup", default="0", show_default=True,
              help="seconds for a new worker to be ready: a number, a preset (paper: 0, realistic: 30), "
                   "lognormal:MEDIAN,SIGMA, or file:PATH of observed samples; the policy plans with its "
                   "90th percentile")
@click.option("--capacity", default=None, metavar="KIND=N,...",
              help="replay on a fixed-size cluster of this many workers per resource kind (e.g. gpu=2,cpu=16; "
                   "a kind not named is unbounded): workers beyond it pend, and the policy plans within it")
@click.option("--share", "shares", multiple=True, metavar="TENANT=W",
              help="a tenant's fair share of the pools (the trace's batches name their `tenant`; default 1 each)")
@click.option("--tenant-max-workers", "caps", multiple=True, metavar="TENANT:KIND=N",
              help="a tenant's cap of workers of a resource kind (repeatable)")
@click.option("--reserve", multiple=True, metavar="TENANT",
              help="reserve a tenant's share: held for it while it has an open batch, and taken back at once from "
                   "tenants over theirs by stopping their running requests (preemption; repeatable)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the policy's sampling")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object instead of a table")
@click.option("--compare", is_flag=True, help="run every policy, print a side-by-side table and write figures")
@click.option("--runtime-sizes", default="1000,2000,4000,8000,16000", show_default=True,
              help="--compare: estimated-request counts of the planner-runtime figure (comma list)")
@click.option("--startup-sweep", default=",".join(f"{x:g}" for x in STARTUP_SWEEP_S), show_default=True,
              help="--compare: fixed start-ups of the start-up sweep (comma list; empty to skip)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="eval-out", show_default=True,
              help="where --compare writes its figures and JSON")
def eval_(trace, startup, capacity, shares, caps, reserve, seed, as_json, compare, runtime_sizes, startup_sweep,
          out_dir, **knob_values):
    """Replay TRACE (a path or a bundled name: cuda-colocated, cuda-disaggregated, demo) with the policy
    deciding at every epoch, and report extra delay, allocated and busy worker-seconds, planner runtime."""
    native.load()  # the compiled sweeps where this machine can build them: the same replay, faster
    t = _load(trace)
    startup = _startup(startup)
    sweep = _sweep(startup_sweep)
    capacity = _capacity(capacity, t)
    fair = _shares(shares, caps, reserve)
    if compare and not capacity.unbounded:
        raise click.BadParameter("--compare replays without a capacity; give --capacity to one replay",
                                 param_hint="--capacity")
    try:
        parse_policy(knob_values["policy"], len(t.stages))
        knobs = knobs_from_options(knob_values, [f"trace.{s.name}" for s in t.stages])
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if compare:
        try:
            sizes = tuple(int(x) for x in runtime_sizes.split(","))
        except ValueError:
            raise click.BadParameter(f"--runtime-sizes must be whole numbers, not {runtime_sizes!r}") from None
        report = run_compare(t, knobs, out_dir=out_dir, startup=startup, seed=seed, runtime_sizes=sizes,
                             sweep_startups=sweep,
                             echo=lambda line: click.echo(line, err=True))
        click.echo(json.dumps(report, indent=1) if as_json else report["table"])
        return
    result = evaluate(t, knobs, startup=startup, seed=seed, capacity=capacity, shares=fair)
    summary = result.summary()
    click.echo(json.dumps(summary) if as_json else _table(summary))
