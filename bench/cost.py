"""What one judged request costs in CPU: the whole farm against the bare program, same run (issue 34).

    python bench/cost.py [--quick] [--rounds 3] [--requests 100] [--cpp-requests 32] [--idle-s 30] [--json]
                         [--concurrency 8 32] [--workloads py_io humaneval math cpp]

The farm is `farm up --pipeline run_code --pipeline math --workers 2` (its embedded redis-server, the recorder
in its own process, 2 workers per stage, Flower unless `--no-flower`) and one `farm gateway`, started here on a
data dir of their own. CPU is read from a cpuacct cgroup per role where this machine has one (bench.cpu_groups;
each process is moved into its role's group once the farm is up, and what it starts follows), and from /proc
(bench.proc_cpu: utime+stime of every live process plus what it reaped) for the split of a stage's group into
its worker processes and their sandbox runs, or for everything with `--proc-only`. Roles: gateway, recorder (the `farm up` process: recorder, metrics,
supervision), redis, flower, launcher, `worker <stage>` (the Celery main and pool processes: the worker's
bookkeeping) and `sandbox <stage>` (everything a pool process starts: launchers and the program).

Workloads, each request distinct (the gateway replays identical /run_code bodies): Python stdin -> stdout and a
HumanEval-style function + asserts (canonical solution, its tests, `check(...)`) and C++ compile + run through
SandboxFusion's `/run_code`; a math answer (\\boxed{} against a reference) through the native API (one batch
per client thread, one request in flight each). Concurrency 8 and 32. The bare side is the farm's own command
run with plain `subprocess` here (`python3 -E -s -S main.py` with the stdin; `g++ -std=c++17 -O2` then
`./main`; for math, `equivalent` in a forked child, as `sandbox.call` runs it), one at a time, CPU from
RUSAGE_CHILDREN. A farm window runs from the first request to the last answer plus `--settle-s` (the
recorder's writes land after the answer), gross: the farm's idle CPU in it is counted (the JSON's `net_ms`
takes it out). Rounds alternate the order of farm and bare and of the workloads; figures are medians of rounds.
Idle: the farm's CPU per second over `--idle-s` with nothing submitted, once the warm-up's batches are done (the
gateway seals a rolling batch when no sample came for its rollover) and `--settle-s` more.

`--sandboxfusion DIR --sandboxfusion-python PY` also runs the real SandboxFusion server (a checkout and a Python with
its dependencies, which the operator provides: bench.cost_sf) and sends it the same `/run_code` workloads in the
same rounds (its turn rotating with the farm's and the bare side's), so the 0.8x targets are judged against
SandboxFusion measured in this run, on this machine's state, not against the issue's figures (which the table
shows when SandboxFusion is not run). Its idle CPU is read in the same window as the farm's.

`--code DIR` measures the farm of another checkout (its `farm up` and gateway run from DIR) with this bench,
for a before/after pair: run both sides in alternation, e.g. `--idle-only` rounds.

Targets (issue 34): Python I/O and HumanEval at most 0.8x SandboxFusion's CPU per request (26 and 35 ms; it
measured 32/31 and 45/41 ms at concurrency 8/32) and at most 2x the bare program; idle at most 3 ms/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import proc_cpu  # noqa: E402
from bench.cost_farm import Farm, exit_on_signals, free_port  # noqa: E402
from bench.cost_load import WORKLOADS, bare_ms, drive, python_executable  # noqa: E402
from bench.cost_sf import SandboxFusion  # noqa: E402

SANDBOX_FUSION_MS = {("py_io", 8): 32, ("py_io", 32): 31, ("humaneval", 8): 45, ("humaneval", 32): 41,
                     ("cpp", 8): 567, ("cpp", 32): 649}
TARGET_MS = {"py_io": 26, "humaneval": 35}
TARGET_OVER_SF = 0.8  # the short workloads' CPU per request, at most this much of SandboxFusion's
SF_WORKLOADS = ("py_io", "humaneval", "cpp")  # what SandboxFusion's /run_code serves of ours (math is the farm's)


def window(target: Farm | SandboxFusion, workload: str, n: int, concurrency: int, tag: str, settle_s: float) -> dict:
    """One workload through the farm or SandboxFusion: CPU ms by role from the first request to the last answer
    plus `settle_s` (both gross of their idle CPU), the window, requests per second."""
    before, started = target.cpu(), time.monotonic()
    drive(target, workload, n, concurrency, tag)
    elapsed = time.monotonic() - started
    time.sleep(settle_s)
    roles = proc_cpu.delta(before, target.cpu())
    return {"roles": roles, "window_s": elapsed + settle_s, "rps": n / elapsed}


def idle(farm: Farm, seconds: float, sf: SandboxFusion | None = None) -> tuple[dict[str, float], float | None]:
    """The farm's idle CPU per role, and SandboxFusion's in the same window (ms per second)."""
    before, sf_before, started = farm.cpu(), sf.cpu() if sf else {}, time.monotonic()
    time.sleep(seconds)
    span = time.monotonic() - started
    sf_rate = sum(proc_cpu.delta(sf_before, sf.cpu()).values()) / span if sf else None
    return {role: ms / span for role, ms in proc_cpu.delta(before, farm.cpu()).items()}, sf_rate


def same_run_sf(workload: str, farm_ms: float, samples: list[float], rps: list[float]) -> dict:
    """A row's SandboxFusion figures from this run, its rounds' `samples` (none where it was not run), and, for the
    short workloads, whether the farm met its target against their median (at most TARGET_OVER_SF of it)."""
    if not samples:
        return {}
    sf_ms = statistics.median(samples)
    out = {"sf_ms": round(sf_ms, 2), "farm_over_sf": round(farm_ms / sf_ms, 2),
           "sf_samples_ms": [round(x, 2) for x in samples], "sf_rps": round(statistics.median(rps), 1)}
    if workload in TARGET_MS:
        out["sf_target_ms"] = round(TARGET_OVER_SF * sf_ms, 2)
        out["meets_sf_target"] = farm_ms <= TARGET_OVER_SF * sf_ms
    return out


def sides(k: int, with_sf: bool) -> tuple[str, ...]:
    """Round k's order of the sides: rotated, so that no side always runs first or last."""
    order = ("farm", "bare", "sf") if with_sf else ("farm", "bare")
    return order[k % len(order):] + order[:k % len(order)]


def run(args) -> dict:
    workloads = tuple(w for w in WORKLOADS if w in args.workloads)
    sizes = {w: (args.cpp_requests if w == "cpp" else args.requests) for w in workloads}
    farm_ms: dict[tuple[str, int], list[float]] = {}
    net_ms: dict[tuple[str, int], list[float]] = {}
    rps: dict[tuple[str, int], list[float]] = {}
    roles: dict[tuple[str, int], list[dict[str, float]]] = {}
    bare: dict[str, list[float]] = {}
    sf_ms: dict[tuple[str, int], list[float]] = {}
    sf_rps: dict[tuple[str, int], list[float]] = {}
    with contextlib.ExitStack() as stack:
        farm = stack.enter_context(Farm(flower=not args.no_flower, workers=args.workers, port=args.port,
                                        cgroups=not args.proc_only, code=args.code.resolve()))
        sf = None
        if args.sandboxfusion:
            sf = stack.enter_context(SandboxFusion(args.sandboxfusion.resolve(), args.sandboxfusion_python,
                                                   python_executable(), free_port(), cgroups=not args.proc_only))
        accounting = farm.accounting
        for w in workloads:  # warm: imports, the first compile, the gateway's first batches
            drive(farm, w, 4, 4, "warm")
            if sf and w in SF_WORKLOADS:
                drive(sf, w, 4, 4, "warm")
            bare_ms(w, 2)
        farm.wait_idle()  # the warm-up's rolling batches seal once no sample came for their rollover
        time.sleep(args.settle_s)
        idle_rates, sf_idle = idle(farm, args.idle_s, sf)
        idle_total = sum(idle_rates.values())
        for k in range(0 if args.idle_only else args.rounds):
            order = workloads if k % 2 == 0 else tuple(reversed(workloads))
            for w in order:
                for side in sides(k, sf is not None):
                    if side == "bare":
                        bare.setdefault(w, []).append(bare_ms(w, sizes[w]))
                        continue
                    if side == "sf":
                        for c in args.concurrency if w in SF_WORKLOADS else ():
                            got = window(sf, w, sizes[w], c, f"sf{k}-{c}", args.settle_s)
                            sf_ms.setdefault((w, c), []).append(sum(got["roles"].values()) / sizes[w])
                            sf_rps.setdefault((w, c), []).append(got["rps"])
                        continue
                    for c in args.concurrency:
                        got = window(farm, w, sizes[w], c, f"{k}-{c}", args.settle_s)
                        total = sum(got["roles"].values())
                        farm_ms.setdefault((w, c), []).append(total / sizes[w])
                        net_ms.setdefault((w, c), []).append((total - idle_total * got["window_s"]) / sizes[w])
                        rps.setdefault((w, c), []).append(got["rps"])
                        roles.setdefault((w, c), []).append({r: ms / sizes[w] for r, ms in got["roles"].items()})
        per_process = farm.per_process_idle(args.idle_s / 3) if args.idle_detail else None
    rows = []
    for (w, c), samples in farm_ms.items():
        b = statistics.median(bare[w])
        f = statistics.median(samples)
        split = {r: round(statistics.median(x.get(r, 0.0) for x in roles[(w, c)]), 2)
                 for r in sorted({r for x in roles[(w, c)] for r in x})}
        rows.append({"workload": w, "concurrency": c, "farm_ms": round(f, 2),
                     "net_ms": round(statistics.median(net_ms[(w, c)]), 2), "bare_ms": round(b, 2),
                     "farm_over_bare": round(f / b, 2), "sandbox_fusion_ms": SANDBOX_FUSION_MS.get((w, c)),
                     **same_run_sf(w, f, sf_ms.get((w, c), []), sf_rps.get((w, c), [])),
                     "target_ms": TARGET_MS.get(w), "rps": round(statistics.median(rps[(w, c)]), 1),
                     "samples_ms": [round(x, 2) for x in samples], "bare_samples_ms": [round(x, 2) for x in bare[w]],
                     "roles_ms": split})
    out = {"code": str(args.code.resolve()), "accounting": accounting, "rounds": args.rounds, "requests": sizes, "workers_per_stage": args.workers, "flower": not args.no_flower,
           "idle_ms_per_s": round(idle_total, 2),
           "sf_idle_ms_per_s": None if sf_idle is None else round(sf_idle, 2), "idle_roles_ms_per_s": {r: round(v, 2) for r, v in
                                                                           sorted(idle_rates.items())},
           "rows": rows, "targets": {"short_ms": TARGET_MS, "farm_over_bare_max": 2.0, "idle_ms_per_s_max": 3.0}}
    if per_process is not None:
        out["idle_per_process_ms_per_s"] = per_process
    return out


def report(out: dict) -> None:
    print(f"{out['rounds']} rounds, requests {out['requests']}, {out['workers_per_stage']} workers per stage, "
          f"flower {'on' if out['flower'] else 'off'}; CPU ms per request, medians of rounds; {out['accounting']}")
    same_run = any("sf_ms" in row for row in out["rows"])
    # SF: SandboxFusion measured in this run where it was run, else the issue's figures (and its targets)
    sf_head = "SF(run) farm/SF" if same_run else "SF(issue)"
    print(f"{'workload':10s} {'conc':>4s} {'farm':>8s} {'bare':>8s} {'farm/bare':>9s} {sf_head:>15s} {'target':>6s} "
          f"{'rps':>6s}  split (ms/request)")
    for row in out["rows"]:
        split = ", ".join(f"{r} {v:.1f}" for r, v in sorted(row["roles_ms"].items(), key=lambda kv: -kv[1]))
        if same_run:
            sf = f"{row['sf_ms']:7.1f} {row['farm_over_sf']:7.2f}" if "sf_ms" in row else f"{'-':>7s} {'-':>7s}"
            target = row.get("sf_target_ms")
        else:
            sf, target = f"{row['sandbox_fusion_ms'] or '-'}", row["target_ms"]
        print(f"{row['workload']:10s} {row['concurrency']:4d} {row['farm_ms']:8.1f} {row['bare_ms']:8.1f} "
              f"{row['farm_over_bare']:9.2f} {sf:>15s} {target or '-':>6} {row['rps']:6.1f}  {split}")
    idle_split = ", ".join(f"{r} {v:.2f}" for r, v in sorted(out["idle_roles_ms_per_s"].items(), key=lambda kv: -kv[1]))
    sf_idle = out.get("sf_idle_ms_per_s")
    sf_idle_text = f"SandboxFusion {sf_idle:.2f} in the same window" if sf_idle is not None else "SandboxFusion 1"
    print(f"idle: {out['idle_ms_per_s']:.2f} ms CPU per second (target <= 3; {sf_idle_text}): {idle_split}")
    if same_run:
        print(f"targets: Python I/O and HumanEval <= {TARGET_OVER_SF}x SandboxFusion's CPU per request in this run "
              "(the target column), <= 2x the bare program")
    else:
        print("targets: Python I/O <= 26 ms and HumanEval <= 35 ms per request (0.8x SandboxFusion), <= 2x the bare "
              "program")
    for line in out.get("idle_per_process_ms_per_s", ()):
        print(f"  idle {line}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="1 round, 40 requests (C++ 16), 10 s idle")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100, help="per short workload, round and concurrency")
    ap.add_argument("--cpp-requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS),
                    help="which workloads to run (default: all)")
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--idle-only", action="store_true", help="only the idle figure (no rounds)")
    ap.add_argument("--idle-detail", action="store_true", help="also each process's and thread's idle CPU")
    ap.add_argument("--settle-s", type=float, default=1.0, help="after the last answer, before the window closes")
    ap.add_argument("--workers", type=int, default=2, help="workers per stage")
    ap.add_argument("--no-flower", action="store_true")
    ap.add_argument("--proc-only", action="store_true", help="no cpuacct groups: /proc totals only (loses what "
                    "bubblewrap's killed PID namespaces ran)")
    ap.add_argument("--port", type=int, default=0, help="the gateway's port (0: a free one)")
    ap.add_argument("--sandboxfusion", type=Path, default=None, metavar="DIR",
                    help="a SandboxFusion checkout to run and measure in the same rounds (bench.cost_sf)")
    ap.add_argument("--sandboxfusion-python", default=None, metavar="PY",
                    help="a Python with SandboxFusion's dependencies (with --sandboxfusion; default: DIR/.venv/bin/python)")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose farm is measured (default: this one; "
                    "another, e.g. `git worktree add /tmp/before <commit>`, for a before/after pair)")
    args = ap.parse_args()
    if args.sandboxfusion and not args.sandboxfusion_python:
        args.sandboxfusion_python = str(args.sandboxfusion / ".venv" / "bin" / "python")
    if args.sandboxfusion and not os.access(args.sandboxfusion_python, os.X_OK):
        ap.error(f"--sandboxfusion-python {args.sandboxfusion_python} is not a program this user can run")
    if args.quick:
        args.rounds, args.requests, args.cpp_requests, args.idle_s = 1, 40, 16, 10.0
    os.environ.setdefault("TMPDIR", tempfile.gettempdir())
    exit_on_signals()
    out = run(args)
    if args.json:
        print(json.dumps(out))
    else:
        report(out)


if __name__ == "__main__":
    main()
