"""What a stage worker's own bookkeeping costs in CPU: trivial synthetic requests (1 ms per stage, no sandbox)
through one compile and one execute worker of an embedded farm, the CPU of the worker processes (the Celery main
process and its pool process, from /proc) per request and per stage visit.

    python bench/worker_cpu.py [--requests 600] [--rounds 3] [--in-flight N] [--code DIR ...] [--json]

`--code DIR` (repeatable) measures another checkout's workers too (e.g. `git worktree add /tmp/before <commit>`),
rounds alternating between the checkouts; each round is a fresh farm. Medians printed per checkout.

On this 2-core machine (2026-11, loaded by other jobs), 600 requests, 3 alternating rounds: 12.7 ms per request
(6.3 per stage visit) before kombu's channel kept one redis-py client (farm.broker_client), 10.2 ms (5.1) after.
On an Intel 2-core VM (2026-11-28), 1,500 requests, 2 alternating rounds against 876797a: 7.49 ms per request
before a worker served on the requests queued behind its token (workers.stage), 1.71 ms after.
The same VM kind (2026-11-28, later), 300 requests one in flight (`--in-flight 1`: a Celery task per request),
3 alternating rounds against b499a6c: 5.57 ms per request before a worker wrote no log line per task served
well (workers.process.quiet_task_lines), 4.97 after.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _proc_cpu():
    """bench/proc_cpu.py, loaded from beside this file: a run measuring another checkout (`--code`) imports `farm`
    and `bench` from there, and that checkout may have none."""
    spec = importlib.util.spec_from_file_location("bench_proc_cpu", Path(__file__).with_name("proc_cpu.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def one_round(requests: int, in_flight: int | None = None) -> dict[str, float]:
    """One fresh farm of this process's checkout; the workers' CPU per request over `requests`, all queued at once,
    or `in_flight` at a time (each sent as one comes back: every request then costs a Celery task)."""
    import tempfile

    from farm.app.embedded import EmbeddedFarm
    from farm.client.sync import RewardClient
    from farm.config import Settings

    with tempfile.TemporaryDirectory() as data_dir:
        with EmbeddedFarm(Settings(data_dir=data_dir), workers={"synthetic.compile": 1, "synthetic.execute": 1}) as farm:
            farm.wait_ready()

            proc_cpu = _proc_cpu()
            snap = proc_cpu.snapshot()
            one = proc_cpu.Placed("workers", "workers", "workers")

            def under(root: int) -> dict:  # every process below `root`, all placed as the workers
                where = proc_cpu.placed(snap, {root: one}, lambda pid, parent: parent)
                del where[root]
                return where

            launchers = [pid for pid in under(os.getpid()) if "launcher_process" in proc_cpu.cmdline(pid)]
            if not launchers:
                raise RuntimeError("no local worker launcher among this process's children")
            workers = under(launchers[0])  # each worker's main process and its pool process

            def cpu_ms() -> float:  # what they ran and what they reaped (proc_cpu's accounting)
                now = proc_cpu.snapshot()
                return proc_cpu.by_role(now, {pid: p for pid, p in workers.items() if pid in now}).get("workers", 0.0)

            with RewardClient(farm.settings) as client:
                before = cpu_ms()
                batch = client.open_batch("bench-worker-cpu", "synthetic", requests)
                payloads = [(f"r{i}", {"times": [0.001, 0.001]}) for i in range(requests)]
                if in_flight is None:
                    batch.submit_many(payloads)
                    batch.gather(timeout=600)
                else:
                    sent = len(batch.submit_many(payloads[:in_flight]))
                    for _ in batch.as_completed(timeout=600):
                        if sent < requests:
                            batch.submit(*payloads[sent])
                            sent += 1
                spent = cpu_ms() - before
    return {"ms_per_request": spent / requests, "ms_per_stage_visit": spent / requests / 2}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--code", action="append", default=[], help="another checkout to measure, round by round")
    ap.add_argument("--in-flight", type=int, default=None,
                    help="at most this many requests in flight (default: all queued at once)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)  # a child's run: one checkout
    args = ap.parse_args(argv)
    if args.requests < 1 or args.rounds < 1 or (args.in_flight is not None and args.in_flight < 1):
        ap.error("--requests, --rounds and --in-flight must be at least 1")
    if args.one_round:
        print(json.dumps(one_round(args.requests, args.in_flight)))
        return 0
    flight = [] if args.in_flight is None else ["--in-flight", str(args.in_flight)]
    checkouts = [str(ROOT)] + [str(Path(c).resolve()) for c in args.code]
    seen: dict[str, list[dict[str, float]]] = {c: [] for c in checkouts}
    for _ in range(args.rounds):
        for code in checkouts:  # a process per round: its imports, and its workers', are that checkout's
            env = {**os.environ, "PYTHONPATH": code}
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one-round", "--requests",
                                  str(args.requests), *flight], env=env, cwd=code, capture_output=True, text=True, check=True)
            seen[code].append(json.loads(out.stdout.strip().splitlines()[-1]))
    report = {code: {key: statistics.median(r[key] for r in rounds) for key in ("ms_per_request", "ms_per_stage_visit")}
              | {"rounds": [round(r["ms_per_request"], 2) for r in rounds]} for code, rounds in seen.items()}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for code, r in report.items():
            print(f"{code}: {r['ms_per_request']:.2f} ms per request, {r['ms_per_stage_visit']:.2f} per stage visit "
                  f"(median of {args.rounds}; rounds {r['rounds']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
