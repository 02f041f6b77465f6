"""What the farm's exact EBF dispatch and history cost over plain Celery, on trivial rewards.

    python bench/dispatch.py --json [--workers 2] [--requests 2000] [--sequential 300] [--rounds 3]

Both sides run the same stage code, the built-in `synthetic` pipeline's compile stage with a 1 µs
time (payload {"times": [1e-06, 0]}: one stage visited, no real sleep), through workers with the
same settings (prefork pool, concurrency 1, prefetch 1, acks late, no task events, the same hard time
limit), the same number of workers, on the same Redis, in one process tree:

- farm: RewardClient -> EBF index (Lua) + wake-up token -> `farm worker --stage synthetic.compile`
  -> pick (Lua) -> stage -> complete (Lua, result + history events) -> the client reads the batch's
  done stream.
- celery: a plain Celery task running the same stage code, its result through the Redis result
  backend (`AsyncResult.get`).

Throughput: N requests submitted at once, until the last result is back; the ratio is the median of
per-round ratios (farm and celery back to back, in alternating order). Latency: one request at a
time, submit to result, farm and celery requests interleaved one by one; percentiles over all rounds.
With the broker on the farm's Redis (the default) the farm's scripts publish the wake-up tokens.
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

QUEUE = "synthetic.compile"
PAYLOAD = {"times": [1e-06, 0]}
PLAIN_TASK = "bench.plain_stage"


def plain_app(redis_url: str, namespace: str):
    """The baseline: a plain Celery task with the farm workers' settings and a Redis result backend."""
    from celery import Celery

    from farm import registry
    from farm.pipeline import StageContext
    from farm.protocol.tokens import hard_limit
    from workers.runner import run_stage

    app = Celery(f"bench-{namespace}", broker=redis_url, backend=redis_url, set_as_current=False)
    app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, task_serializer="json",
                    accept_content=["json"], result_serializer="json", worker_send_task_events=False,
                    task_send_sent_event=False, worker_hijack_root_logger=False, result_expires=600,
                    task_default_queue=f"{namespace}.plain", broker_connection_retry_on_startup=True)
    pipeline, stage = registry.stage_by_queue(QUEUE)

    @app.task(name=PLAIN_TASK, time_limit=hard_limit(stage.timeout_s))
    def plain_stage(payload):
        ctx = StageContext("r", "b", "bench", payload, {}, stage, stage.timeout_s, "plain")
        outcome = run_stage(ctx)
        return {"status": "ok" if outcome.status is None else outcome.status.value, "reward": outcome.reward}

    return app, plain_stage


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)


def forget_namespace(r, namespace: str) -> None:
    """Delete a benchmark farm's keys, and the queue bindings kombu keeps outside its prefix."""
    for pattern in (f"{namespace}*", f"_kombu.binding*.{namespace}.*"):
        for key in r.scan_iter(match=pattern, count=1000):
            r.delete(key)


def wait_until(check, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout} s")
        time.sleep(0.05)


def gateway_serving(base: str) -> bool:
    """Whether a `farm gateway` answers at `base` (its OpenAPI page: no tenant needed)."""
    import httpx

    try:
        return httpx.get(f"{base}/openapi.json", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def farm_throughput(client, n: int, tag: str) -> float:
    batch = client.open_batch("bench", "synthetic", n, batch_id=f"tp-{tag}")
    t0 = time.perf_counter()
    for i in range(n):
        batch.submit(f"r{i}", PAYLOAD)
    results = batch.gather(timeout=300)
    elapsed = time.perf_counter() - t0
    assert len(results) == n and all(r.ok for r in results), "farm lost or failed requests"
    return n / elapsed


def farm_latency(client, n: int, tag: str, plain=None) -> tuple[list[float], list[float]]:
    """Sequential round trips through the farm, each followed by one through plain Celery when `plain`
    is given (paired samples under the same load)."""
    batch = client.open_batch("bench", "synthetic", n, batch_id=f"lat-{tag}")
    results = batch.as_completed(timeout=300)
    farm, celery = [], []
    for i in range(n):
        t0 = time.perf_counter()
        batch.submit(f"r{i}", PAYLOAD)
        result = next(results)
        farm.append(time.perf_counter() - t0)
        assert result.ok
        if plain is not None:
            celery += celery_latency(plain, 1)
    return farm, celery


def celery_throughput(task, n: int) -> float:
    t0 = time.perf_counter()
    pending = [task.apply_async((PAYLOAD,)) for _ in range(n)]
    results = [p.get(timeout=300) for p in pending]
    elapsed = time.perf_counter() - t0
    assert all(r["status"] == "ok" for r in results), "plain celery failed requests"
    return n / elapsed


def celery_latency(task, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        result = task.apply_async((PAYLOAD,)).get(timeout=60)
        out.append(time.perf_counter() - t0)
        assert result["status"] == "ok"
    return out


def run(args) -> dict:
    import redis

    from farm.client.sync import RewardClient
    from farm.config import Settings

    namespace = f"bench{uuid.uuid4().hex[:8]}"
    settings = Settings(redis_url=args.redis, namespace=namespace, lease_s=10.0)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FARM_REDIS_URL=args.redis, FARM_NAMESPACE=namespace, FARM_LEASE_S="10")
    procs: list[subprocess.Popen] = []
    r = redis.Redis.from_url(args.redis, decode_responses=True)
    app, plain = plain_app(args.redis, namespace)
    try:
        for i in range(args.workers):
            procs.append(start([sys.executable, "-c", "from farm.app.cli import main; main()", "worker", "--stage", QUEUE,
                                "--name", f"farm{i}", "--no-events", "--loglevel", "WARNING"], env, logs / f"farm{i}.log"))
            procs.append(start([sys.executable, __file__, "--plain-worker", "--redis", args.redis,
                                "--namespace", namespace, "--name", f"plain{i}"], env, logs / f"plain{i}.log"))
        wait_until(lambda: r.hlen(f"{namespace}:q:{QUEUE}:seen") >= args.workers, "farm workers")
        wait_until(lambda: all(p.poll() is None for p in procs), "processes", 1)
        client = RewardClient(settings)
        # warm up both paths (connections, pool processes, script cache), and wait for the plain workers
        farm_latency(client, 20, "warm")
        plain.apply_async((PAYLOAD,)).get(timeout=60)
        celery_latency(plain, 20)
        farm_rps, celery_rps, farm_lat, celery_lat = [], [], [], []
        for k in range(args.rounds):
            # the order alternates between rounds, so a load change on the shared machine hits both
            if k % 2:
                farm_rps.append(farm_throughput(client, args.requests, str(k)))
                celery_rps.append(celery_throughput(plain, args.requests))
            else:
                celery_rps.append(celery_throughput(plain, args.requests))
                farm_rps.append(farm_throughput(client, args.requests, str(k)))
            f, c = farm_latency(client, args.sequential, str(k), plain)
            farm_lat += f
            celery_lat += c
        client.close()
    finally:
        stop(procs)
        forget_namespace(r, namespace)
        r.close()
    ratios = [f / c for f, c in zip(farm_rps, celery_rps)]
    f_rps, c_rps = statistics.median(farm_rps), statistics.median(celery_rps)
    f50, c50 = percentile(farm_lat, 0.5), percentile(celery_lat, 0.5)
    f99, c99 = percentile(farm_lat, 0.99), percentile(celery_lat, 0.99)
    return {
        "workers": args.workers, "requests": args.requests, "sequential": args.sequential, "rounds": args.rounds,
        "farm_rps": round(f_rps, 1), "celery_rps": round(c_rps, 1),
        "throughput_ratio": round(statistics.median(ratios), 3),  # median of the paired per-round ratios
        "farm_rps_rounds": [round(x, 1) for x in farm_rps], "celery_rps_rounds": [round(x, 1) for x in celery_rps],
        "farm_p50_ms": round(f50 * 1000, 3), "celery_p50_ms": round(c50 * 1000, 3), "p50_ratio": round(f50 / c50, 3),
        "farm_p99_ms": round(f99 * 1000, 3), "celery_p99_ms": round(c99 * 1000, 3), "p99_ratio": round(f99 / c99, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=2000, help="requests per throughput round")
    ap.add_argument("--sequential", type=int, default=300, help="sequential requests per latency round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--redis", default=os.environ.get("FARM_REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--logs", default="/tmp/farm-bench-logs")
    ap.add_argument("--plain-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--namespace", help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain_worker:
        app, _ = plain_app(args.redis, args.namespace)
        app.worker_main(["worker", "--pool=prefork", "--concurrency=1", "--prefetch-multiplier=1",
                         "--without-gossip", "--without-mingle", "--loglevel=WARNING", "-Q", f"{args.namespace}.plain",
                         "-n", f"{args.name}@%h"])
        return
    figures = run(args)
    if args.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:>18}: {v}")


if __name__ == "__main__":
    main()
