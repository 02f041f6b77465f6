"""A table of `bench/fidelity.py --json` runs: per run the mean extra delay and every stage's allocated
seconds, measured / predicted / error, the results lost and duplicated, and with a reserved share the running
requests stopped per stage, measured / predicted; then the median of each error (issue 36's target: the median of
three runs within 15%).

    python bench/fidelity_table.py /tmp/fid-2gpu-*.json
"""

from __future__ import annotations

import json
import statistics
import sys


def _preempted(run: dict) -> str:
    """The run's stopped requests per stage, measured / predicted ('' for a run with no share reserved)."""
    stopped = run.get("preempted")
    if not stopped:
        return ""
    return "  preempted " + " ".join(f"{name} {n}/{stopped['predicted'].get(name, 0)}"
                                      for name, n in stopped["measured"].items())


def rows(runs: list[dict]) -> list[str]:
    names = [k for k, v in runs[0]["fidelity"].items() if isinstance(v, dict)]
    out = ["run  capacity        " + "  ".join(f"{n:>34s}" for n in names) + "  lost  dup",
           " " * 22 + "  ".join(f"{'measured / predicted / error':>34s}" for _ in names)]
    for i, run in enumerate(runs, 1):
        f = run["fidelity"]
        cap = ",".join(f"{k}={n}" for k, n in sorted((run.get("capacity") or {}).items())) or "-"
        cells = [f"{f[n]['measured']:10.1f} / {f[n]['predicted']:10.1f} / {f[n]['relative_error']:6.1%}"
                 for n in names]
        out.append(f"{i:<4d} {cap:16s}" + "  ".join(f"{c:>34s}" for c in cells)
                   + f"  {run['results']['lost']:4d}  {run['results']['duplicated']:3d}" + _preempted(run))
    medians = [statistics.median(r["fidelity"][n]["relative_error"] for r in runs) for n in names]
    out.append("median error         " + "  ".join(f"{m:>34.1%}" for m in medians)
               + ("   within 15%" if all(m <= 0.15 for m in medians) else "   NOT within 15%"))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [json.load(open(path)) for path in argv]
    print("\n".join(rows(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
