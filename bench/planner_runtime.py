"""Planner runtime (Fig. 15): one Algorithm 1+2 decision against the number of estimated requests.

    python bench/planner_runtime.py [--sizes 1000,2000,4000,8000,16000,32000,64000] [--repeat 5]

Prints one JSON object: per size, the median and min seconds of `decide()` (policy distrs, EBF, two
stages) over `--repeat` runs, the estimated requests, the simulations it ran, the growth from the
smallest size, and whether 16,000 requests take at most the 0.2 s target (the paper reports about 2 s).
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

TARGET_S = 0.2
TARGET_REQUESTS = 16_000


def measure(requests: int, repeat: int) -> dict:
    snap = snapshot(requests)
    knobs = Knobs(policy="distrs", stages={s.queue: StageKnobs(max_workers=1_000_000) for s in snap.stages})
    estimated = estimate(snap, random.Random(0))[0].size
    times, decision = [], None
    for i in range(repeat):
        started = time.perf_counter()
        decision = decide(snap, knobs, random.Random(i))
        times.append(time.perf_counter() - started)
    return {
        "requests": requests, "estimated": estimated, "batches": len(snap.batches),
        "median_s": statistics.median(times), "min_s": min(times), "workers": dict(decision.workers),
        "reason": decision.reason,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2000,4000,8000,16000,32000,64000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = [measure(n, args.repeat) for n in sizes]
    base = rows[0]["median_s"]
    for row in rows:
        row["growth"] = row["median_s"] / base if base > 0 else None
    at_target = [r for r in rows if r["requests"] == TARGET_REQUESTS]
    print(json.dumps({
        "policy": "distrs", "stages": 2, "target_s": TARGET_S, "rows": rows,
        "target_met": (at_target[0]["median_s"] <= TARGET_S) if at_target else None,
    }, indent=1))


if __name__ == "__main__":
    main()
