"""`farm eval --compare`: every policy on one trace, a side-by-side table, ratios, and the paper's figures.

Figures (PNG, matplotlib's Agg backend): workers over time per policy and stage (Fig. 10a/b), extra
delay per batch (10c), normalised worker time per stage (12), EBF vs FCFS mean extra delay against the
pool of the costliest stage (14a: two batches, the second opened 100 s after the first, other stages
ample, requests at their actual times and keys at their actual T; with the bound no dispatch order
beats, `planner.eval.bound`), and planner runtime against the number of estimated requests (15). Beyond
the paper: the start-up sweep, distrs against zq-dedicated at each of `STARTUP_SWEEP_S` (GPU-seconds
ratio, or cost where the pipeline has no GPU stage, and mean extra delay): where the savings go when
workers take time to start.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
from rich.console import Console
from rich.progress import Progress

from farm.knobs import Knobs
from planner.eval.bound import mean_delay_bound
from planner.eval.loop import evaluate
from planner.eval.runtime_case import snapshot
from planner.eval.startup import Startup
from planner.eval.trace import Trace, TraceBatch
from planner.policy.decide import decide
from planner.policy.simulate import Simulator
from planner.policy.workload import Workload

POLICIES = ("zq-dedicated", "history", "distrs", "ideal")
RUNTIME_SIZES = (1000, 2000, 4000, 8000, 16000)
STARTUP_SWEEP_S = (0.0, 5.0, 15.0, 30.0, 60.0)
EBF_TARGET_S = 3.0  # Fig. 14a: the pool that brings the mean extra delay under this many seconds


def two_batch_workload(trace: Trace, gap_s: float = 100.0,
                       pair: tuple[TraceBatch, TraceBatch] | None = None) -> Workload:
    """Two batches opened `gap_s` apart, actual times: `pair`, by default the first batch of two tasks
    (or the first two batches)."""
    firsts = list(pair) if pair is not None else [trace.batches_of(t)[0] for t in trace.tasks[:2]]
    if len(firsts) < 2:
        firsts = list(trace.batches[:2])
    if len(firsts) < 2:
        raise ValueError("the EBF/FCFS sweep needs two batches")
    arrival, times, batch, t = [], [], [], []
    for j, b in enumerate(firsts):
        start = j * gap_s
        arrival.append(start + b.arrivals)
        times.append(b.times)
        batch.append(np.full(b.size, j))
        t.append(start + float((b.arrivals + b.times.sum(axis=1)).max()))
    m = len(trace.stages)
    return Workload(now=0.0, arrival=np.concatenate(arrival), times=np.concatenate(times),
                    running=np.zeros(sum(b.size for b in firsts), dtype=bool), batch=np.concatenate(batch),
                    keys=np.array(t), deadlines=np.array(t), timeouts=trace.timeouts, workers=np.zeros(m),
                    starting=np.zeros(m))


def ebf_vs_fcfs(trace: Trace, pools: list[int] | None = None,
                pair: tuple[TraceBatch, TraceBatch] | None = None) -> dict:
    """Mean extra delay of the two-batch case per pool size of the costliest stage, EBF and FCFS."""
    w = two_batch_workload(trace, pair=pair)
    swept = int(np.argmax([s.cost for s in trace.stages]))
    ample = [w.size] * w.stages
    top = int((w.times[:, swept] > 0).sum())
    # every pool size up to 64 (where the curves cross the target), then a geometric grid to the top
    pools = pools or sorted(set(range(1, min(top, 64) + 1)) | {int(x) for x in np.geomspace(64, max(top, 64), 12)})
    out: dict = {"stage": trace.stages[swept].name, "pools": pools}
    for scheduler in ("ebf", "fcfs"):
        sim = Simulator(w, scheduler=scheduler, timeout_aware=False)
        delays = []
        for n in pools:
            workers = list(ample)
            workers[swept] = n
            c = sim.run(workers, stop_early=False).completion
            delays.append(float(np.maximum(c - w.deadlines, 0.0).mean()))
        out[scheduler] = delays
        under = [n for n, d in zip(pools, delays) if d < EBF_TARGET_S]
        out[f"{scheduler}_smallest_under_{EBF_TARGET_S:g}s"] = min(under) if under else None
    # the room there was: no dispatch order gets the mean under the target with fewer workers than this
    out["bound"] = [mean_delay_bound(w, swept, n) for n in pools]
    out[f"any_smallest_under_{EBF_TARGET_S:g}s"] = next(
        (n for n in range(1, top + 1) if mean_delay_bound(w, swept, n) < EBF_TARGET_S), None)
    e, f = out[f"ebf_smallest_under_{EBF_TARGET_S:g}s"], out[f"fcfs_smallest_under_{EBF_TARGET_S:g}s"]
    a = out[f"any_smallest_under_{EBF_TARGET_S:g}s"]
    out["fcfs_over_ebf"] = (f / e) if e and f else None
    out["fcfs_over_any"] = (f / a) if a and f else None
    return out


def runtime_curve(sizes=RUNTIME_SIZES, repeat: int = 3) -> list[dict]:
    rows = []
    for n in sizes:
        snap = snapshot(n)
        knobs = Knobs(stages={s.queue: replace(Knobs().stage(s.queue), max_workers=1_000_000) for s in snap.stages})
        times = []
        for i in range(repeat):
            started = time.perf_counter()
            decide(snap, knobs, random.Random(i))
            times.append(time.perf_counter() - started)
        rows.append({"requests": n, "median_s": float(np.median(times))})
    return rows


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _table(rows: dict[str, dict]) -> str:
    stages = list(next(iter(rows.values()))["stages"])
    kinds = list(next(iter(rows.values()))["resources"])
    head = f"{'policy':<14}{'mean d':>9}{'p95 d':>9}{'max d':>9}" + "".join(f"{k + '-s':>14}" for k in kinds)
    head += "".join(f"{'norm ' + s:>16}" for s in stages) + f"{'planner ms':>12}"
    lines = [head]
    for name, r in rows.items():
        line = f"{name:<14}{r['extra_delay_mean_s']:>9.3f}{r['extra_delay_p95_s']:>9.3f}{r['extra_delay_max_s']:>9.3f}"
        line += "".join(f"{r['resources'][k]:>14.0f}" for k in kinds)
        line += "".join(f"{(r['stages'][s]['normalized'] or 0):>16.3f}" for s in stages)
        line += f"{r['planner_runtime_mean_s'] * 1000:>12.1f}"
        lines.append(line)
    return "\n".join(lines)


def _sweep_line(sweep: dict) -> str:
    under = f"under_{EBF_TARGET_S:g}s"
    return (f"Fig. 14a, smallest {sweep['stage']} pool with mean extra delay under {EBF_TARGET_S:g} s: "
            f"EBF {sweep['ebf_smallest_' + under]}, FCFS {sweep['fcfs_smallest_' + under]}, "
            f"any scheduler at least {sweep['any_smallest_' + under]}")


def _spent(summary: dict) -> tuple[str, float]:
    """What the sweep compares: GPU-seconds where the pipeline has a GPU stage, else the cost."""
    if "gpu" in summary["resources"]:
        return "gpu_s", summary["resources"]["gpu"]
    return "cost", summary["cost"]


def startup_sweep(trace: Trace, knobs: Knobs, startups=STARTUP_SWEEP_S, seed: int = 0,
                  tick: Callable[[], None] = lambda: None,
                  known: dict[float, dict[str, dict]] | None = None) -> list[dict]:
    """distrs and zq-dedicated at each fixed start-up: zq-dedicated's spend over distrs' and both mean delays.
    `known`: start-up -> policy -> summary of replays already run with these knobs and seed (not run again)."""
    rows = []
    for s in startups:
        got = {}
        for policy in ("distrs", "zq-dedicated"):
            got[policy] = (known or {}).get(s, {}).get(policy) or evaluate(
                trace, replace(knobs, policy=policy), startup=Startup.fixed(s), seed=seed).summary()
            tick()
        what, d = _spent(got["distrs"])
        _, zq = _spent(got["zq-dedicated"])
        rows.append({"startup_s": s, "measure": what, "distrs": d, "zq_dedicated": zq, "zq_over_distrs": _ratio(zq, d),
                     "distrs_delay_mean_s": got["distrs"]["extra_delay_mean_s"],
                     "zq_delay_mean_s": got["zq-dedicated"]["extra_delay_mean_s"]})
    return rows


def _startup_line(r: dict) -> str:
    ratio = r["zq_over_distrs"]
    return (f"start-up {r['startup_s']:g} s: zq-dedicated/distrs {r['measure']} "
            f"{'n/a' if ratio is None else f'{ratio:.2f}x'}, mean extra delay distrs {r['distrs_delay_mean_s']:.2f} s, "
            f"zq-dedicated {r['zq_delay_mean_s']:.2f} s")


def run_compare(trace: Trace, knobs: Knobs, *, out_dir: str | Path, startup_s: float = 0.0, seed: int = 0,
                echo: Callable[[str], None] = print, runtime_sizes=RUNTIME_SIZES, startup: Startup | None = None,
                sweep_startups=STARTUP_SWEEP_S) -> dict:
    startup = startup or Startup.fixed(startup_s)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    start = min(b.start_s for b in trace.batches)
    end = max(b.start_s + float((b.arrivals + b.times.sum(axis=1)).max()) for b in trace.batches)
    with Progress(console=Console(stderr=True)) as progress:  # stdout stays the report
        bars = {p: progress.add_task(p, total=max(end - start, 1.0)) for p in POLICIES}
        for policy in POLICIES:
            bar = bars[policy]
            results[policy] = evaluate(trace, replace(knobs, policy=policy), startup=startup, seed=seed,
                                     progress=lambda now, bar=bar: progress.update(bar, completed=now - start))
            progress.update(bar, completed=end - start)
        sweep_bar = progress.add_task("EBF vs FCFS sweep", total=1)
        sweep = ebf_vs_fcfs(trace)
        progress.update(sweep_bar, completed=1)
        rt_bar = progress.add_task("planner runtime", total=1)
        runtime = runtime_curve(runtime_sizes)
        progress.update(rt_bar, completed=1)
        su_bar = progress.add_task("start-up sweep", total=max(2 * len(sweep_startups), 1))
        # the comparison's own replays at a fixed start-up are that point of the sweep: not run twice
        known = {startup.median_s: {p: r.summary() for p, r in results.items()}} if startup.kind == "fixed" else {}
        startups = startup_sweep(trace, knobs, sweep_startups, seed, lambda: progress.advance(su_bar), known)
    rows = {p: r.summary() for p, r in results.items()}
    d, zq, hist, ideal = rows["distrs"], rows["zq-dedicated"], rows["history"], rows["ideal"]
    ratios = {
        f"zq_over_distrs_{k}": _ratio(zq["resources"][k], d["resources"][k]) for k in d["resources"]
    }
    ratios["history_over_distrs_mean_delay"] = _ratio(hist["extra_delay_mean_s"], d["extra_delay_mean_s"])
    ratios.update({f"distrs_over_history_{k}": _ratio(d["resources"][k], hist["resources"][k]) for k in d["resources"]})
    ratios.update({
        f"distrs_over_ideal_normalized_{s}": _ratio(d["stages"][s]["normalized"] or 0,
                                                    ideal["stages"][s]["normalized"] or 0)
        for s in d["stages"]
    })
    table = _table(rows) + "\n" + _sweep_line(sweep) + "".join("\n" + _startup_line(r) for r in startups)
    report = {"policies": rows, "ratios": ratios, "ebf_vs_fcfs": sweep, "runtime": runtime, "startup_sweep": startups,
              "table": table}
    _figures(results, sweep, runtime, out)
    if startups:
        _startup_figure(startups, out)
    (out / "compare.json").write_text(json.dumps(report, indent=1))
    echo(f"figures and compare.json written to {out}")
    return report


def _pyplot():
    """matplotlib's pyplot, drawing to files: heavy, and only the figures need it, so loaded here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)


def _figures(results, sweep, runtime, out: Path) -> None:
    plt = _pyplot()
    first = next(iter(results.values()))
    m = len(first.stage_names)
    fig, axes = plt.subplots(m, 1, figsize=(10, 3 * m), squeeze=False)
    for k in range(m):
        ax = axes[k][0]
        for name, r in results.items():
            t = [p[0] for p in r.timeline]
            n = [p[1][k] for p in r.timeline]
            ax.step(t, n, where="post", label=name, linewidth=0.8)
        ax.set(title=f"workers over time: {first.stage_names[k]} ({first.resources[k]})", xlabel="time (s)",
               ylabel="workers")
        ax.legend(fontsize=7)
    _save(fig, out / "fig10ab_workers.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in results.items():
        ax.plot(np.sort(r.extra_delay), marker=".", linewidth=0.8, label=f"{name} (mean {r.extra_delay.mean():.2f} s)")
    ax.set(xlabel="batch (sorted by extra delay)", ylabel="extra delay (s)", title="extra delay per batch (Fig. 10c)")
    ax.legend(fontsize=7)
    _save(fig, out / "fig10c_extra_delay.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(len(results), 1)
    for j, (name, r) in enumerate(results.items()):
        ax.bar(np.arange(m) + j * width, np.nan_to_num(r.normalized), width, label=name)
    ax.set_xticks(np.arange(m) + width * (len(results) - 1) / 2, first.stage_names)
    ax.axhline(1.0, color="k", linewidth=0.5)
    ax.set(ylabel="allocated / busy worker-seconds", title="normalised worker time (Fig. 12)")
    ax.legend(fontsize=7)
    _save(fig, out / "fig12_normalized.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for scheduler in ("ebf", "fcfs"):
        ax.plot(sweep["pools"], sweep[scheduler], marker=".", label=scheduler.upper())
    ax.plot(sweep["pools"], sweep["bound"], color="grey", linestyle=":", label="no scheduler below")
    ax.axhline(EBF_TARGET_S, color="k", linewidth=0.5, linestyle="--")
    ax.set_xlabel(f"{sweep['stage']} workers")
    ax.set_ylabel("mean extra delay (s)")
    ax.set_yscale("symlog")
    ax.set_ylim(bottom=0)
    # the curves meet at zero long before the top of the grid: show up to twice where FCFS gets there
    settled = [n for n, d in zip(sweep["pools"], sweep["fcfs"]) if d <= 0]
    if settled:
        ax.set_xlim(0, 2 * settled[0])
    ax.set_title("EBF vs FCFS, two batches 100 s apart (Fig. 14a)")
    ax.legend()
    _save(fig, out / "fig14a_ebf_fcfs.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["requests"] for r in runtime], [r["median_s"] for r in runtime], marker="o")
    ax.set(xlabel="estimated requests", ylabel="decision time (s)", title="planner runtime (Fig. 15)")
    _save(fig, out / "fig15_runtime.png")


def _startup_figure(rows: list[dict], out: Path) -> None:
    plt = _pyplot()
    x = [r["startup_s"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(x, [r["zq_over_distrs"] or 0 for r in rows], marker="o")
    left.set(xlabel="worker start-up (s)", ylabel=f"zq-dedicated / distrs ({rows[0]['measure']})",
             title="savings against start-up")
    left.set_ylim(bottom=0)
    for key, label in (("distrs_delay_mean_s", "distrs"), ("zq_delay_mean_s", "zq-dedicated")):
        right.plot(x, [r[key] for r in rows], marker="o", label=label)
    right.set(xlabel="worker start-up (s)", ylabel="mean extra delay (s)", title="extra delay against start-up")
    right.legend()
    _save(fig, out / "startup_sweep.png")
