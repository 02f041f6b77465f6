"""Fig. 14a over every pair of batches, not just the default one: how much fewer workers EBF needs than
FCFS, and how much fewer any scheduler at all could (the bound of `planner.eval.bound`).

    python bench/ebf_pairs.py [--trace cuda-colocated] [--json]

A pair is batch i of one task and batch i of another (every ordered pair of tasks, every i), the
second opened 100 s after the first, the compile pool ample. Per pair: the smallest execute pool with
a mean extra delay under 3 s for EBF, for FCFS, and the fewest workers with which the bound allows it.
Prints the distribution of FCFS/EBF and FCFS/bound, and how many pairs reach 1.5x.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.eval.compare import EBF_TARGET_S, ebf_vs_fcfs  # noqa: E402
from planner.eval.trace import read, resolve  # noqa: E402

UNDER = f"under_{EBF_TARGET_S:g}s"


def pairs(trace):
    by_task = {t: trace.batches_of(t) for t in trace.tasks}
    for a, b in itertools.permutations(trace.tasks, 2):
        for first, second in zip(by_task[a], by_task[b]):
            yield first, second


def summary(values: list[float]) -> dict:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    q = np.percentile(v, [25, 50, 75]) if len(v) else [np.nan] * 3
    return {"pairs": int(len(v)), "p25": float(q[0]), "median": float(q[1]), "p75": float(q[2]),
            "max": float(v.max()) if len(v) else None, "at_least_1.5x": int((v >= 1.5 - 1e-9).sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="cuda-colocated")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trace = read(resolve(args.trace))
    over_ebf, over_any = [], []
    for pair in pairs(trace):
        r = ebf_vs_fcfs(trace, pools=list(range(1, 129)), pair=pair)
        e, f, a = r["ebf_smallest_" + UNDER], r["fcfs_smallest_" + UNDER], r["any_smallest_" + UNDER]
        over_ebf.append(f / e if e and f else None)
        over_any.append(f / a if a and f else None)
    report = {"trace": args.trace, "fcfs_over_ebf": summary(over_ebf), "fcfs_over_any": summary(over_any)}
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.trace}: smallest execute pool with mean extra delay under {EBF_TARGET_S:g} s, over batch pairs")
    for name, label in (("fcfs_over_ebf", "FCFS / EBF"), ("fcfs_over_any", "FCFS / any scheduler (bound)")):
        s = report[name]
        print(f"  {label:<30} median {s['median']:.3f}  IQR {s['p25']:.3f}-{s['p75']:.3f}  max {s['max']:.3f}  "
              f">= 1.5x in {s['at_least_1.5x']} of {s['pairs']}")


if __name__ == "__main__":
    main()
