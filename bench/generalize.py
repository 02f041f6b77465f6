"""Generalisation bench (issue 33): distrs against `ideal` and zq-dedicated on workloads drawn per run.

Draws `--traces` traces of the generator family with every shape parameter drawn from wide ranges
(`planner.eval.draws.RANGES`: 1-12 tasks, batch sizes 64-4096, arrival gap, spread, burst and drift,
GRPO groups, compile and execute medians, tails and timeouts, outcome mixes, colocated and
disaggregated), crosses each with the start-ups (0, then lognormal around 10, 30 and 60 s with the
draw's jitter sigma) and replays distrs, ideal and zq-dedicated on each (`farm eval`'s replay, in
memory). Prints per case and per start-up (median, worst): distrs GPU-s and CPU-s over ideal's, mean,
p95 and max extra delay over D, zq-dedicated GPU-s over distrs', and whether issue 33's targets hold.

Scale: each trace has `--batches` batches per task and at most `--requests` requests; a drawn batch
size that does not fit is cut (the drawn one is shown as B), so pools are smaller than at that size.
The seed is new on every run and printed first; `--seed` repeats a run. `--quick`: 6 traces, start-ups
0 and 30, 1,500 requests (a few minutes). The default (24 traces x 4 start-ups x 3 policies, 2,500
requests) is about 20 minutes with `--jobs 2` on two idle cores, estimated from single replays (5-20 s
each at 3,000-4,000 requests); on a loaded machine several times that.

Where a colocated batch's first response comes before a new worker can be ready, `ideal` itself is
late (it sizes from the open batches, and the pools were idle through the training phase): the report
counts those cases per start-up beside the verdict.

    python bench/generalize.py [--traces 24] [--seed S] [--startups 0,10,30,60] [--quick] [--jobs 2] [--json F]
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.eval.draws import draw  # noqa: E402
from planner.eval.generalize import STARTUPS, cases, replay, report, table  # noqa: E402
from planner.runtime import native  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    native.load()  # the compiled sweeps where this machine can build them (decisions unchanged)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=None, help="traces to draw (default 24; --quick 6)")
    ap.add_argument("--seed", type=int, default=None, help="the draws' seed (default: a new one, printed)")
    ap.add_argument("--startups", default=None, help="median start-ups in seconds, comma-separated (default 0,10,30,60)")
    ap.add_argument("--requests", type=int, default=None, help="most requests per trace (default 2500; --quick 1500)")
    ap.add_argument("--batches", type=int, default=4, help="batches per task")
    ap.add_argument("--quick", action="store_true", help="6 traces, start-ups 0 and 30, 1,500 requests")
    ap.add_argument("--jobs", type=int, default=2, help="replays run at once (one core each)")
    ap.add_argument("--json", default="", help="also write the rows and the report to this file")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    count = args.traces or (6 if args.quick else 24)
    requests = args.requests or (1500 if args.quick else 2500)
    startups = [float(s) for s in (args.startups or ("0,30" if args.quick else ",".join(f"{s:g}" for s in STARTUPS))).split(",")]
    print(f"seed {seed}: {count} traces x start-ups {', '.join(f'{s:g}' for s in startups)} s, "
          f"at most {requests} requests of {args.batches} batches per task", flush=True)
    draws = draw(seed, count, batches=args.batches, requests=requests)
    started = time.monotonic()
    todo = cases(draws, startups)
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            rows = list(pool.map(replay, todo))
    else:
        rows = [replay(c) for c in todo]
    rep = report(rows)
    print(table(rep, draws))
    print(f"seed {seed}, {len(todo)} replays in {time.monotonic() - started:.0f} s "
          f"(rerun: python bench/generalize.py --seed {seed} --traces {count} --requests {requests} "
          f"--batches {args.batches} --startups {','.join(f'{s:g}' for s in startups)})")
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": seed, "draws": [d.describe() for d in draws], "rows": rows,
                                               "report": {**rep, "by_startup": {str(k): v for k, v in rep["by_startup"].items()}}},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
