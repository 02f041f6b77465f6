"""`farm status`: per stage queued / running / workers (starting, pending, per node) and the start-up its
workers take, per active batch progress n/B, estimated T and how long its trainer has been silent (against
abandon_after_s), per tenant its use now and its fair share (share, caps, workers busy on it per resource kind,
how late its active batches run); the cluster's capacity per resource kind and each stage it holds
below what it wants (by how much, and the extra delay the planner now expects against D). Start-ups come from
the planner daemon's heartbeat (it reads them from the
worker lives in the store): with no daemon running there is none to show. Below: what waits for the
recorder in the history stream, loudly when its cap drops history."""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import click
import redis
from rich.console import Console
from rich.table import Table

from farm import registry
from farm.app import fair_shares
from farm.app.cli.common import require_redis, settings_options
from farm.app.overview import batch_rows, tenant_shares, tenant_use
from farm.protocol import counters, heartbeat
from farm.protocol.heartbeat import Heartbeat, Pool
from farm.protocol.keys import Keys
from farm.protocol.live import inspect
from farm.protocol.live_knobs import knobs_now
from farm.protocol.stream import WARN_FILL
from farm.protocol.stream import health as stream_health


def history_report(stream, counted) -> dict:
    """The recorder's side: what waits in the history stream, and any history its cap dropped."""
    return {
        "waiting": stream.length, "cap": stream.cap, "oldest_age_s": round(stream.oldest_age_s, 3),
        "at_cap": stream.at_cap, "overflows": counted.history_overflows, "lost_at": counted.history_lost_at,
        "lost_ids": counted.history_lost,
    }


def status_report(live, knobs, planner: Heartbeat | None = None, history: dict | None = None,
                  shares: dict | None = None) -> dict:
    """The live state as plain data (also what --json prints); `planner` is the daemon's heartbeat, if any;
    `shares` the tenants' fair shares in force (farm.app.fair_shares.read)."""
    rows = batch_rows(live, knobs)  # late ones first, with the silence of their trainers
    startups = planner.startups if planner else {}
    pools = planner.pools if planner else {}
    bound = planner.bound if planner else {}
    stages = {}
    for q in sorted(set(live.stages) | set(pools) | set(bound)):
        st = live.stages.get(q)
        pool = pools.get(q) or Pool()
        stages[q] = {
            "queued": len(st.pending) if st else 0,
            "running": len(st.running) if st else 0,
            "workers": sum(1 for w in st.workers if w.alive) if st else 0,
            "idle": sum(1 for w in st.workers if w.alive and w.idle) if st else 0,
            # the daemon's backend: workers waiting for a machine with room (not allocated), starting ones
            "pending": pool.pending,
            "starting": pool.starting,
            "nodes": dict(pool.nodes),  # node -> the pool's workers there (backends that span machines)
            # seconds from placement to ready of the daemon's backend's recent workers (None: too few seen)
            "startup": asdict(startups[q]) if q in startups else None,
            # held below its want by the cluster's capacity (None: not bound), as its last decision says
            "bound": {**asdict(bound[q]), "short": bound[q].short} if q in bound else None,
        }
    return {
        "now": live.now,
        "planner": planner.to_dict() if planner else None,
        "history": history,
        "scheduler": live.scheduler,
        "delay_s": knobs.delay_s,
        "policy": knobs.policy,
        # per resource kind the workers the backend can run now and at most (an unbounded kind is absent)
        "capacity": {k: asdict(c) for k, c in planner.capacity.items()} if planner else {},
        "node_startup_s": planner.node_startup_s if planner else 0.0,
        "stages": stages,
        "abandon_after_s": knobs.abandon_after(),
        "batches": rows,
        "tenants": tenant_use(rows),  # per tenant ('-': batches opened directly on the farm), its use now
        # per tenant, its share and caps against the workers busy on it per resource kind, and how late it runs
        "fair_shares": tenant_shares(live, rows, shares or {}, registry.resource_of),
    }


def _startup_cell(st: dict | None) -> str:
    if not st:
        return "-"
    return f"{st['median_s']:.1f} / {st['plan_s']:.1f} s ({st['count']})"


def _relative(t: float, now: float) -> str:
    delta = t - now
    return f"in {delta:.1f} s" if delta >= 0 else f"{-delta:.1f} s ago"


@click.command()
@settings_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(settings, as_json):
    """Show what the farm is doing now."""
    client = redis.Redis.from_url(require_redis(settings), decode_responses=True)
    try:
        live = inspect(client, settings, now=time.time())
        knobs = knobs_now(client, Keys(settings.namespace))
        planner = heartbeat.read(client, settings.namespace)
        history = history_report(stream_health(client, settings.namespace), counters.read(client, settings.namespace))
        shares = fair_shares.read(client, settings.namespace)
    except redis.ConnectionError as exc:
        raise click.ClickException(f"cannot reach the farm's Redis at {settings.redis_url}: {exc}") from exc
    finally:
        client.close()
    report = status_report(live, knobs, planner, history, shares)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return

    console = Console()
    console.print(f"scheduler [bold]{report['scheduler']}[/]  D = {report['delay_s']:g} s  policy {report['policy']}")
    daemon = report["planner"]
    console.print(f"planner daemon: pid {daemon.get('pid')} ({daemon.get('backend')} backend)" if daemon
                  else "planner daemon: none running (pools stay as they are)")
    # starting and pending workers go below the table, which stays within 80 columns
    stages = Table("stage", "queued", "running", "workers", "idle", "start-up p50 / p90", title="stages")
    for q, st in report["stages"].items():
        stages.add_row(q, str(st["queued"]), str(st["running"]), str(st["workers"]), str(st["idle"]),
                       _startup_cell(st["startup"]))
    console.print(stages)
    if any(st["nodes"] for st in report["stages"].values()):
        nodes = Table("stage", "node", "workers", title="workers per node")
        for q, st in report["stages"].items():
            for node, n in sorted(st["nodes"].items()):
                nodes.add_row(q, node, str(n))
        console.print(nodes)
    starting = {q: st["starting"] for q, st in report["stages"].items() if st["starting"]}
    if starting:
        console.print("starting (placed, not yet taking requests): " + ", ".join(f"{q} {n}" for q, n in starting.items()))
    pending = {q: st["pending"] for q, st in report["stages"].items() if st["pending"]}
    if pending:
        console.print("pending (waiting for a machine with room; not allocated): "
                      + ", ".join(f"{q} {n}" for q, n in pending.items()))
    _print_capacity(console, report)
    _print_batches(console, report)
    _print_shares(console, report)
    _print_history(console, report["history"], report["now"])


def _heard(b: dict) -> str:
    if b["silent_s"] is None:
        return "-"
    after = "never abandoned" if b["abandon_after_s"] is None else f"of {b['abandon_after_s']:g}"
    heard = f"{b['silent_s']:.0f} s ago ({after})"
    return f"[bold red]{heard} SILENT[/]" if b["silent"] else heard


def _print_batches(console: Console, report: dict) -> None:
    """Late ones first; a silent one (its trainer not heard for abandon_after_s) is marked; then each tenant's use."""
    batches = Table("batch", "task", "done/B", "arrived", "estimated T", "trainer heard", title="active batches")
    for b in report["batches"]:
        batches.add_row(b["batch"], b["task"], f"{b['done']}/{b['size']}", str(b["arrived"]),
                        _relative(b["estimated_at"], report["now"]), _heard(b))
    console.print(batches if report["batches"] else "no active batch")
    if report["tenants"]:
        tenants = Table("tenant", "batches", "outstanding", "queued", "running", "silent", title="use per tenant")
        for name, use in report["tenants"].items():
            tenants.add_row(name, *(str(use[k]) for k in ("batches", "outstanding", "queued", "running", "silent")))
        console.print(tenants)


def busy_cell(busy: dict, caps: dict) -> str:
    """Workers busy on a tenant per resource kind, each against its cap where it has one ("gpu 4 of 4 AT CAP")."""
    cells = []
    for kind in sorted(set(busy) | set(caps)):
        n, cap = busy.get(kind, 0), caps.get(kind)
        if cap is None:
            cells.append(f"{kind} {n}")
        else:
            cells.append(f"{kind} {n} of {cap}" + (" [bold yellow]AT CAP[/]" if n >= cap else ""))
    return ", ".join(cells) or "-"


def _late_cell(row: dict) -> str:
    if row["extra_delay_mean_s"] is None:
        return "-"
    return f"{row['extra_delay_mean_s']:.1f} / {row['extra_delay_max_s']:.1f} s"


def _print_shares(console: Console, report: dict) -> None:
    """Each tenant's fair share, its workers busy now (against its caps) and how late its active batches run."""
    rows = report["fair_shares"]
    if not rows:
        return
    # its active batches' extra delay so far (past their estimated completion); completed ones: the metrics
    table = Table("tenant", "share", "busy workers (of cap)", "extra delay now mean / max",
                  title="fair shares (farm tenants set NAME --share W)")
    for t, r in rows.items():
        share = f"{r['share']:g}" + (" reserved" if r.get("reserve") else "")
        table.add_row(t, share, busy_cell(r["busy"], r["max_workers"]), _late_cell(r))
    console.print(table)


def capacity_lines(report: dict) -> list[str]:
    """The capacity per kind, then each stage it binds: the workers wanted and held, and the delay expected vs D."""
    lines = []
    if report["capacity"]:
        kinds = [f"{k} {c['placeable']}" + (f" (at most {c['most']})" if c["most"] != c["placeable"] else "")
                 for k, c in sorted(report["capacity"].items())]
        node = f"; a new node in {report['node_startup_s']:.0f} s" if report["node_startup_s"] else ""
        lines.append(f"capacity (workers placeable now): {', '.join(kinds)}{node}")
    for q, st in report["stages"].items():
        b = st["bound"]
        if not b:
            continue
        delay = ("" if b["delay_max_s"] is None else
                 f"; expected extra delay {b['delay_mean_s']:.1f} s (max {b['delay_max_s']:.1f} s) against D = "
                 f"{b['delay_s']:g} s" + (" [bold red]OVER D[/]" if b["delay_max_s"] > b["delay_s"] else ""))
        lines.append(f"[bold yellow]capacity binds[/] {q}: wants {b['wanted']} {b['resource']} workers, the cluster "
                     f"holds {b['held']} ({b['short']} short){delay}")
    return lines


def _print_capacity(console: Console, report: dict) -> None:
    for line in capacity_lines(report):
        console.print(line)


def _print_history(console: Console, h: dict, now: float) -> None:
    waiting = f"{h['waiting']} of at most {h['cap']} events"
    if h["at_cap"]:
        console.print(f"[bold red]history stream AT ITS CAP ({waiting}): unrecorded history is being lost[/]; "
                      "bring the history database back or start the recorder")
    elif h["waiting"] >= WARN_FILL * h["cap"]:
        console.print(f"[bold yellow]recorder behind[/]: {waiting} wait (oldest {h['oldest_age_s']:.0f} s); past the "
                      "cap the oldest are lost")
    else:
        console.print(f"history: {waiting} wait for the recorder (oldest {h['oldest_age_s']:.1f} s)")
    if h["overflows"]:
        upto = f" (stream ids {h['lost_ids']})" if h["lost_ids"] else ""
        console.print(f"[bold red]history LOST {h['overflows']} time(s)[/], last {_relative(h['lost_at'], now)}{upto}: "
                      "the stream's cap dropped events the recorder had not written")
