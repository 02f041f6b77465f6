"""One bench script run against two checkouts of the farm, in alternating pairs, to tell a change from noise.

    python bench/paired.py --before /path/to/old/checkout [--pairs 3] bench/dispatch.py --rounds 1 ...

Each pair runs the script once in each checkout (the order alternates from pair to pair), each run in its own
process with that checkout first on PYTHONPATH, so its workers and clients are that checkout's code. The script
must print one JSON object with `--json`; every numeric figure is reported per side as the median over pairs, with
the median of the per-pair after/before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(checkout: Path, script: str, args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, str(checkout / script), "--json", *args], cwd=checkout, env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def numbers(figures: dict, prefix: str = "") -> dict[str, float]:
    """The numeric figures of a (possibly nested) JSON object, by dotted name."""
    found: dict[str, float] = {}
    for k, v in figures.items():
        if isinstance(v, dict):
            found.update(numbers(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            found[f"{prefix}{k}"] = float(v)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, type=Path, help="the checkout to compare against")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("script", help="a bench script, relative to the checkouts' root")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    a = ap.parse_args()
    before, after = [], []
    for i in range(a.pairs):
        sides = [("before", a.before.resolve()), ("after", ROOT)]
        for name, checkout in sides if i % 2 == 0 else sides[::-1]:
            (before if name == "before" else after).append(numbers(run(checkout, a.script, a.args)))
            print(f"pair {i + 1}: {name} done", file=sys.stderr, flush=True)
    report = {}
    for key in sorted(set(before[0]) & set(after[0])):
        b, f = [r[key] for r in before], [r[key] for r in after]
        ratios = [y / x for x, y in zip(b, f) if x]
        report[key] = {"before": statistics.median(b), "after": statistics.median(f),
                       "ratio": round(statistics.median(ratios), 3) if ratios else None}
    print(json.dumps({"script": a.script, "args": a.args, "pairs": a.pairs, "figures": report}, indent=1))


if __name__ == "__main__":
    main()
