"""Where a function problem's judgement spends its wall time, step by step, in this process (issue 34: with two workers
on two cores, the wall time a request holds its worker bounds the farm's throughput, not the CPU it costs).

    python bench/judge_path.py [--judgements 120] [--cold] [--json]

Judges HumanEval's canonical solutions one after another (`workers.judge.function.judge`, every one must score ok),
timing the steps between marks set around the sandbox's own functions: the working directory, uid and cgroup; the
response's launch (bubblewrap's start, the moves into the run's cgroup); the tests' fork; the wait for the verdict (the
response's interpreter starting and loading the solution, the tests running); and ending the response's sandbox. Medians
and 90th percentiles in ms. A judgement whose response takes a warm sandbox (`workers.sandbox.warm`: started on another
thread while the judgement before ran) has no launch on its path; `warm_judgements` counts them, and `--cold` turns warm
sandboxes off (`FARM_SANDBOX_WARM=0`) for the figures before. Needs root (the full sandbox).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (module, attribute, mark): each is timed from its call to its return; the steps are the gaps between marks
MARKED = (("workers.sandbox.launch", "Launch.start", "launch"),
          ("workers.sandbox.verifier", "_read_until", "verdict"),
          ("workers.sandbox.program", "Spawned._end", "end"))
STEPS = {"start -> launch>": "workdir, uid and cgroup", "launch> -> launch<": "the response's launch",
         "start -> verdict>": "warm: files, hand-over, fork",
         "launch< -> verdict>": "the tests' fork", "verdict> -> verdict<": "until the verdict",
         "verdict< -> end>": "the verdict read", "end> -> end<": "ending the response's sandbox",
         "end< -> done": "the cleanup"}


def _marking(marks: list[tuple[str, float]], fn: Callable[..., Any], mark: str) -> Callable[..., Any]:
    judging = threading.get_ident()  # a warm sandbox's launch, on the warmer's thread, is off the judgement's path

    def marked(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != judging:
            return fn(*args, **kwargs)
        marks.append((mark + ">", time.perf_counter()))
        try:
            return fn(*args, **kwargs)
        finally:
            marks.append((mark + "<", time.perf_counter()))
    return marked


def owner_of(module: str, attribute: str) -> tuple[Any, str]:
    """Where a marked function lives (its module or class) and its name there."""
    owner: Any = importlib.import_module(module)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def install(marks: list[tuple[str, float]]) -> Callable[[], None]:
    """Wraps the marked functions; returns what puts them back."""
    undo = []
    for module, attribute, mark in MARKED:
        owner, name = owner_of(module, attribute)
        original = getattr(owner, name)
        setattr(owner, name, _marking(marks, original, mark))
        undo.append((owner, name, original))
    return lambda: [setattr(owner, name, original) for owner, name, original in undo]


def steps(marks: list[tuple[str, float]]) -> dict[str, float]:
    """One judgement's marks as the ms between consecutive marks, by step name."""
    out: dict[str, float] = {}
    for (a, ta), (b, tb) in zip(marks, marks[1:]):
        out[f"{a} -> {b}"] = out.get(f"{a} -> {b}", 0.0) + (tb - ta) * 1000
    return out


def measure(judgements: int) -> dict[str, Any]:
    from workers.judge import function
    from workers.testcases import HumanEvalStore

    store = HumanEvalStore()
    ids = store.ids()
    marks: list[tuple[str, float]] = []
    undo = install(marks)
    samples: dict[str, list[float]] = {}
    totals, warm = [], 0
    try:
        for i in range(judgements):
            p = store.raw(ids[i % len(ids)])
            marks.clear()
            marks.append(("start", time.perf_counter()))
            verdict = function.judge(prompt=p["prompt"], test=p["test"], entry_point=p["entry_point"],
                                     program=p["prompt"] + p["canonical_solution"], time_limit_s=10.0)
            marks.append(("done", time.perf_counter()))
            if verdict.status != "ok":
                raise SystemExit(f"{ids[i % len(ids)]}: {verdict.status}: {verdict.message[:300]}")
            totals.append((marks[-1][1] - marks[0][1]) * 1000)
            warm += not any(mark == "launch>" for mark, _ in marks)
            for key, ms in steps(marks).items():
                samples.setdefault(key, []).append(ms)
    finally:
        undo()
    report = {"judgements": judgements, "warm_judgements": warm, "total_ms": _summary(totals), "steps": {}}
    for key, name in STEPS.items():
        if key in samples:
            report["steps"][name] = _summary(samples[key])
    return report


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50_ms": round(statistics.median(ordered), 2),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * (len(ordered) - 1)))], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--judgements", type=int, default=120, help="canonical solutions judged (default 120)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--cold", action="store_true", help="no warm sandboxes: every response's sandbox on the path")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/judge_path.py needs root: the full sandbox")
    if args.judgements < 1:
        ap.error("--judgements must be at least 1")
    if args.cold:
        from workers.sandbox import warm

        os.environ[warm.ENV] = "0"
    report = measure(args.judgements)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['judgements']} judgements ({report['warm_judgements']} warm); a judgement's wall time "
          f"p50 {report['total_ms']['p50_ms']} ms (p90 {report['total_ms']['p90_ms']})")
    for name, figures in report["steps"].items():
        print(f"  {name:32s} p50 {figures['p50_ms']:7.2f} ms   p90 {figures['p90_ms']:7.2f} ms")


if __name__ == "__main__":
    main()
