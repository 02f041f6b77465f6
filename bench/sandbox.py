"""What the sandbox costs per run, and HumanEval's canonical solutions through the farm.

    python bench/sandbox.py --json [--runs 200] [--no-farm] [--workers 2] [--baseline DIR --rounds 3]

- overhead: the same trivial program (`/bin/true`, and `python3 -I -S -c pass`) run N times bare
  (`subprocess.run`) and in the sandbox (`workers.sandbox.run`: namespaces, uid, rlimits, tmpfs
  working directory, output pipes); also `sandbox.call` of a trivial function against a bare
  `os.fork` + `waitpid`. Rounds interleave bare and sandboxed runs; p50 and p99 in ms. Where a cpuacct
  hierarchy (cgroup v1) is writable, also each run's CPU (`cpu_p50_ms`): this process and everything it
  starts in a group of their own, bubblewrap's namespace init included (reparented to the host's init, it is
  missing from this process's reaped-children times).
- farm: the 164 HumanEval canonical solutions submitted at once through RewardClient to real
  `farm worker` processes (one `code.fetch_tests`, `--workers` `code.run`), until the last result is
  back: requests per second; the same solutions scored one after another in this process
  (`workers.runner.score`) as the baseline. Needs Redis (FARM_REDIS_URL or 127.0.0.1:6379) and root.
- `--batches N`: N batches of the 164 one after another through each fresh farm (default 1), each a sample: on a
  2-core machine shared with other work, one batch's figure varies by 20 % from round to round.
- `--baseline DIR`: the same figures for another checkout of the farm (the code before a change, e.g.
  `git worktree add /tmp/farm-before <commit>`), in the same run: rounds alternate this code and that one
  (its own `bench/sandbox.py` for the overhead, its workers for the farm), and the report gives each side's
  median and this code's ratio to it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import cpu_groups  # noqa: E402
from workers import sandbox  # noqa: E402


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2), "p99_ms": round(p99 * 1000, 2)}


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _bare_fork() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _nothing(_):
    return None


class _Cpu:
    """The CPU of what a call runs, from a cpuacct group around this process (None without one)."""

    def __init__(self) -> None:
        self.groups = cpu_groups.CpuGroups() if cpu_groups.available() else None
        if self.groups is not None:
            self.groups.move(os.getpid(), "bench")

    def used_ms(self) -> float | None:
        return None if self.groups is None else self.groups.usage_ms()["bench"]

    def close(self) -> None:
        if self.groups is not None:
            self.groups.close()


def _measured(fn, cpu: _Cpu, wall: list[float], used: list[float]) -> None:
    before = cpu.used_ms()
    wall.append(_timed(fn))
    if before is not None:
        used.append(cpu.used_ms() - before)


def _figures(wall: list[float], used_ms: list[float]) -> dict[str, float]:
    return {**_percentiles(wall), **({"cpu_p50_ms": round(statistics.median(used_ms), 2)} if used_ms else {})}


def overhead(runs: int) -> dict:
    programs = {"true": ["/bin/true"], "python": [sandbox.python_executable(), "-I", "-S", "-c", "pass"]}
    out = {}
    cpu = _Cpu()
    try:
        for name, argv in programs.items():
            bare, boxed, bare_cpu, boxed_cpu = [], [], [], []
            for _ in range(runs):
                _measured(lambda: subprocess.run(argv, capture_output=True, check=True), cpu, bare, bare_cpu)
                _measured(lambda: sandbox.run(argv), cpu, boxed, boxed_cpu)
            b, s = _figures(bare, bare_cpu), _figures(boxed, boxed_cpu)
            out[name] = {"bare": b, "sandbox": s, "overhead_p50_ms": round(s["p50_ms"] - b["p50_ms"], 2),
                         "ratio_p50": round(s["p50_ms"] / b["p50_ms"], 2)}
            if "cpu_p50_ms" in s:
                out[name]["cpu_overhead_p50_ms"] = round(s["cpu_p50_ms"] - b["cpu_p50_ms"], 2)
    finally:
        cpu.close()
    bare = [_timed(_bare_fork) for _ in range(runs)]
    boxed = [_timed(lambda: sandbox.call(_nothing, None)) for _ in range(runs)]
    b, s = _percentiles(bare), _percentiles(boxed)
    out["call"] = {"bare_fork": b, "sandbox_call": s, "overhead_p50_ms": round(s["p50_ms"] - b["p50_ms"], 2)}
    return out


def _humaneval_payloads() -> list[tuple[str, dict]]:
    from workers.testcases import HumanEvalStore

    store = HumanEvalStore()
    return [(pid, {"response": store.raw(pid)["canonical_solution"], "problem": pid}) for pid in store.ids()]


def in_process() -> dict:
    from workers.pipelines.code import pipeline
    from workers.runner import score

    payloads = _humaneval_payloads()
    started = time.perf_counter()
    rewards = [score(pipeline, p).reward for _, p in payloads]
    elapsed = time.perf_counter() - started
    return {"requests": len(payloads), "seconds": round(elapsed, 2), "requests_per_s": round(len(payloads) / elapsed, 2),
            "all_scored_one": all(r == 1.0 for r in rewards)}


def _spawn(queue: str, name: str, env: dict, root: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from farm.app.cli import main; main()", "worker", "--stage", queue, "--name", name,
           "--loglevel", "WARNING", "--no-events"]
    return subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def through_farm(workers: int, redis_url: str, root: Path = ROOT, batches: int = 1) -> dict:
    """The 164 solutions through fresh workers of `root`'s checkout, `batches` times one after another: requests
    per second of each batch, and their median (`requests_per_s`)."""
    import redis

    from farm.client.sync import RewardClient
    from farm.config import Settings

    namespace = f"bench{uuid.uuid4().hex[:8]}"
    settings = Settings(redis_url=redis_url, namespace=namespace)
    env = {**os.environ, "FARM_REDIS_URL": redis_url, "FARM_NAMESPACE": namespace, "PYTHONPATH": str(root)}
    spawned = [("code.fetch_tests", "fetch-0")] + [("code.run", f"run-{i}") for i in range(workers)]
    procs = [_spawn(q, n, env, root) for q, n in spawned]
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        deadline = time.monotonic() + 60
        while not all(r.hexists(f"{namespace}:q:{q}:seen", n) for q, n in spawned):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("the bench's workers did not start")
            time.sleep(0.1)
        payloads = _humaneval_payloads()
        each, scored_one, seconds = [], True, 0.0
        with RewardClient(settings) as client:
            for b in range(batches):
                started = time.perf_counter()
                batch = client.open_batch(f"bench-humaneval-{b}", "code", len(payloads))
                for pid, payload in payloads:
                    batch.submit(pid, payload)
                results = batch.gather(timeout=600)
                elapsed = time.perf_counter() - started
                each.append(round(len(results) / elapsed, 2))
                seconds += elapsed
                scored_one = scored_one and len(results) == len(payloads) and all(x.reward == 1.0 for x in results)
        return {"requests": len(payloads) * batches, "run_workers": workers, "seconds": round(seconds, 2),
                "requests_per_s": round(statistics.median(each), 2), "batches_requests_per_s": each,
                "all_scored_one": scored_one}
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)
        for key in r.scan_iter(match=f"{namespace}*", count=1000):
            r.delete(key)
        r.close()


def overhead_of(checkout: Path, runs: int) -> dict:
    """A checkout's overhead figures, from its own bench script in a fresh process. Both sides of a pair are
    measured so: measured in this long-lived process instead, this side's `sandbox.call` forked a process grown by
    the rounds through the farm, and read 1.2-1.4x the baseline's where the two trees measure the same alone."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "bench/sandbox.py", "--json", "--no-farm", "--runs", str(runs)], cwd=checkout,
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["overhead"]


def paired(baseline: Path, rounds: int, runs: int, workers: int, redis_url: str, farm: bool, batches: int = 1) -> dict:
    """Rounds alternating this code and the baseline; medians per side and this code's ratios. Each batch through
    a round's farm is a sample of its own."""
    sides: dict[str, dict[str, list[float]]] = {"this": {}, "baseline": {}}

    def note(side: str, key: str, value: float) -> None:
        sides[side].setdefault(key, []).append(value)

    for i in range(rounds):
        order = ("this", "baseline") if i % 2 == 0 else ("baseline", "this")
        for side in order:
            o = overhead_of(ROOT if side == "this" else baseline, runs)
            note(side, "python_p50_ms", o["python"]["sandbox"]["p50_ms"])
            note(side, "bare_python_p50_ms", o["python"]["bare"]["p50_ms"])
            note(side, "call_p50_ms", o["call"]["sandbox_call"]["p50_ms"])
            for name in ("python", "true"):
                if "cpu_p50_ms" in o[name]["sandbox"]:  # a baseline from before the CPU figure has none
                    note(side, f"{name}_cpu_p50_ms", o[name]["sandbox"]["cpu_p50_ms"])
            if farm:
                f = through_farm(workers, redis_url, ROOT if side == "this" else baseline, batches)
                for rate in f["batches_requests_per_s"]:
                    note(side, "humaneval_requests_per_s", rate)
                note(side, "humaneval_all_scored_one", float(f["all_scored_one"]))
    medians = {side: {k: round(statistics.median(v), 2) for k, v in figures.items()} for side, figures in sides.items()}
    ratios = {k: round(medians["this"][k] / medians["baseline"][k], 3)
              for k in medians["this"] if medians["baseline"].get(k)}
    return {"rounds": rounds, "samples": sides, "median": medians, "this_over_baseline": ratios}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--runs", type=int, default=200, help="runs per program and side (default 200)")
    ap.add_argument("--workers", type=int, default=2, help="code.run workers for the farm figure (default 2)")
    ap.add_argument("--no-farm", action="store_true", help="skip HumanEval through the farm")
    ap.add_argument("--redis-url", default=os.environ.get("FARM_REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--baseline", type=Path, help="another checkout of the farm to compare with, round by round")
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds with --baseline (default 3)")
    ap.add_argument("--batches", type=int, default=1,
                    help="batches of the 164 through each fresh farm, one after another (default 1); each a sample")
    args = ap.parse_args()
    if args.batches < 1:
        ap.error("--batches must be at least 1")
    if args.baseline:
        report = paired(args.baseline.resolve(), args.rounds, args.runs, args.workers, args.redis_url, not args.no_farm,
                        args.batches)
        print(json.dumps(report, indent=2 if args.json else None))
        return
    report = {"mode": sandbox.mode(), "runs": args.runs, "overhead": overhead(args.runs),
              "humaneval_in_process": in_process()}
    if not args.no_farm:
        report["humaneval_farm"] = through_farm(args.workers, args.redis_url, batches=args.batches)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for name, o in report["overhead"].items():
        print(f"{name:8s} {json.dumps(o)}")
    for key in ("humaneval_in_process", "humaneval_farm"):
        if key in report:
            print(f"{key}: {json.dumps(report[key])}")


if __name__ == "__main__":
    main()
