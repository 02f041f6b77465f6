"""A before/after pair for one workload of bench/cost.py: this checkout's farm and a baseline checkout's (`git worktree
add /tmp/before <commit>`) both up at once, their windows alternating round by round, so that both sides see the
same machine (these machines are shared and noisy: a pair run minutes apart differs by more than most changes).
Prints each side's CPU per request by role, median of rounds, the new/baseline ratio, and how many rounds the new
side was the lower; `--commands` also counts the Redis commands each side's clients send per request (MONITOR, in
one extra window per side; commands scripts run inside are not counted: a script run is one command).

    python bench/cost_pair.py --baseline /tmp/before [--workload py_io] [--concurrency 8] [--requests 300]
                              [--rounds 6] [--commands] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cost import window  # noqa: E402
from bench.cost_farm import ROOT, Farm, exit_on_signals  # noqa: E402
from bench.cost_load import drive  # noqa: E402
from bench.redis_commands import counted_commands  # noqa: E402

SIDES = ("new", "baseline")
WORKLOADS = ("py_io", "humaneval", "math", "cpp")


def order(k: int) -> tuple[str, ...]:
    """Round k's sides in turn: each side goes first in every other round."""
    return SIDES if k % 2 == 0 else SIDES[::-1]


def summary(rounds: dict[str, list[dict[str, float]]]) -> dict:
    """Per side, the median by role and in all (ms per request); the ratio new/baseline of each, and in how many
    rounds the new side spent less in all."""
    out: dict = {}
    for side, seen in rounds.items():
        roles = sorted({role for r in seen for role in r})
        medians = {role: round(statistics.median(r.get(role, 0.0) for r in seen), 3) for role in roles}
        medians["all"] = round(statistics.median(sum(r.values()) for r in seen), 3)
        out[side] = medians
    new, base = out["new"], out["baseline"]
    out["ratio"] = {role: round(new[role] / base[role], 3) for role in new if base.get(role)}
    out["new_lower_in"] = sum(sum(n.values()) < sum(b.values()) for n, b in zip(rounds["new"], rounds["baseline"]))
    return out


def run(args) -> dict:
    codes = {"new": ROOT, "baseline": args.baseline.resolve()}
    farms = {side: Farm(code=code, workers=args.workers) for side, code in codes.items()}
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    commands: dict[str, dict[str, float]] = {}
    with ExitStack() as up:  # both farms stopped at the end, the one started last first
        for side in SIDES:
            up.enter_context(farms[side])
            drive(farms[side], args.workload, 20, args.concurrency, f"warm-{side}")
        for k in range(args.rounds):
            for side in order(k):
                seen = window(farms[side], args.workload, args.requests, args.concurrency, f"r{k}-{side}", 1.0)
                rounds[side].append({role: ms / args.requests for role, ms in seen["roles"].items()})
        if args.commands:
            for side in SIDES:
                farm = farms[side]
                sent = counted_commands(farm, lambda: drive(farm, args.workload, args.requests, args.concurrency,
                                                            f"monitor-{side}"))
                commands[side] = {name: round(n / args.requests, 2) for name, n in sorted(
                    sent.items(), key=lambda kv: -kv[1]) if n / args.requests >= 0.01}
    report = {"workload": args.workload, "concurrency": args.concurrency, "requests": args.requests,
              "rounds": args.rounds, "baseline_code": str(codes["baseline"]), "samples_ms": rounds,
              **summary(rounds)}
    if commands:
        report["commands_per_request"] = commands
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout (a git worktree)")
    ap.add_argument("--workload", choices=WORKLOADS, default="py_io")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=300, help="per window")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2, help="workers per stage, each side")
    ap.add_argument("--commands", action="store_true", help="also count Redis commands per request (MONITOR)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.requests < 1 or args.rounds < 1 or args.concurrency < 1:
        ap.error("--requests, --rounds and --concurrency must be at least 1")
    exit_on_signals()
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.workload} at concurrency {args.concurrency}, {args.requests} requests x {args.rounds} rounds per side; "
          f"CPU ms per request, medians of rounds (new lower in {report['new_lower_in']} of {args.rounds})")
    for role in sorted(report["new"], key=lambda r: -report["new"][r]):
        print(f"  {role:26s} baseline {report['baseline'].get(role, 0.0):7.2f}  new {report['new'][role]:7.2f}  "
              f"ratio {report['ratio'].get(role, float('nan')):.3f}")
    for side, sent in report.get("commands_per_request", {}).items():
        print(f"  Redis commands per request, {side}: {sum(sent.values()):.2f}: "
              + ", ".join(f"{name} {n}" for name, n in sent.items()))


if __name__ == "__main__":
    main()
