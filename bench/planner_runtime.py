"""Planner runtime (Fig. 15): one Algorithm 1+2 decision against the number of estimated requests.

    python bench/planner_runtime.py [--sizes 1000,2000,4000,8000,16000,32000,64000] [--repeat 5]

Prints one JSON object: per size, the median and min seconds of `decide()` (policy distrs, EBF, two
stages) over `--repeat` runs, the median CPU seconds of this process over them (on a shared machine the
wall clock also counts other processes' turns), the estimated requests, the simulations it ran, the
growth from the smallest size, and whether each target size is within its target (issue 33: 0.05 s at
16,000 requests in flight and 0.2 s at 64,000, so that a one-second tick keeps up at ten times the
paper's scale; the paper reports about 2 s at 16,000). A target whose size is not run reads null.
`compiled_sweeps` says whether the compiled sweeps ran (planner/runtime/native.py); `FARM_PLANNER_NATIVE=0` runs
the Python loops, for a pair on one machine: on this project's 2-core machine (2026-11, quiet), 0.051 -> 0.030 s at
16,000 and 0.37-0.38 -> 0.164 s at 64,000, decisions unchanged.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from farm.knobs import Knobs, StageKnobs  # noqa: E402
from planner.eval.runtime_case import snapshot  # noqa: E402
from planner.policy.decide import decide  # noqa: E402
from planner.policy.estimate import estimate  # noqa: E402
from planner.runtime import native  # noqa: E402

TARGETS_S = {16_000: 0.05, 64_000: 0.2}  # requests in flight -> the most seconds one decision may take


def measure(requests: int, repeat: int) -> dict:
    snap = snapshot(requests)
    knobs = Knobs(policy="distrs", stages={s.queue: StageKnobs(max_workers=1_000_000) for s in snap.stages})
    estimated = estimate(snap, random.Random(0))[0].size
    times, cpu, decision = [], [], None
    for i in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        decision = decide(snap, knobs, random.Random(i))
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return {
        "requests": requests, "estimated": estimated, "batches": len(snap.batches),
        "median_s": statistics.median(times), "min_s": min(times), "cpu_median_s": statistics.median(cpu),
        "workers": dict(decision.workers), "reason": decision.reason,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2000,4000,8000,16000,32000,64000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    compiled = native.load() is not None  # FARM_PLANNER_NATIVE=0: the Python loops, for a before/after pair
    rows = [measure(n, args.repeat) for n in sizes]
    base = rows[0]["median_s"]
    for row in rows:
        row["growth"] = row["median_s"] / base if base > 0 else None
    by_size = {r["requests"]: r for r in rows}
    met = {str(n): (by_size[n]["median_s"] <= limit) if n in by_size else None for n, limit in TARGETS_S.items()}
    print(json.dumps({
        "policy": "distrs", "stages": 2, "compiled_sweeps": compiled, "targets_s": {str(n): s for n, s in TARGETS_S.items()}, "rows": rows,
        "targets_met": met, "all_targets_met": all(met.values()),
    }, indent=1))


if __name__ == "__main__":
    main()
