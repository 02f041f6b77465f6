"""What the HTTP gateway costs over the direct Python client, same run, same workers.

    python bench/gateway.py --json [--workers 2] [--requests 2000] [--sequential 300] [--rounds 3]

Both sides run trivial rewards (the `synthetic` pipeline's compile stage for 1 µs, as bench/dispatch.py)
through the same `farm worker --stage synthetic.compile` processes on the same Redis:

- direct: `RewardClient` (Redis): open_batch, submit_many, gather; one request at a time: submit, then the
  next result from `as_completed`.
- gateway: `farm gateway` (uvicorn, one process) with a tenant on a SQLite store, called with httpx over
  loopback: POST /v1/batches, POST .../requests/bulk (500 per call), GET .../results long polls; one at a
  time: POST .../requests, then GET .../results from the last cursor.

Throughput: N requests submitted at once until the last result is in, per round both sides back to back in
alternating order; the ratio is the median of per-round ratios. Latency: sequential submit-to-result round
trips, the two sides interleaved one by one (paired under the same load); p50 and p95 over all rounds.
Targets (issue 14): gateway throughput >= 0.5x direct, gateway p50 <= 3x direct.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.dispatch import (  # noqa: E402
    PAYLOAD, QUEUE, forget_namespace, gateway_serving, percentile, start, stop, wait_until)

CHUNK = 500


def direct_throughput(client, n: int, tag: str) -> float:
    t0 = time.perf_counter()
    batch = client.open_batch("bench", "synthetic", n, batch_id=f"tp-{tag}")
    batch.submit_many([(f"r{i}", PAYLOAD) for i in range(n)])
    results = batch.gather(timeout=300)
    elapsed = time.perf_counter() - t0
    assert len(results) == n and all(r.ok for r in results), "direct: lost or failed requests"
    return n / elapsed


def gateway_throughput(http, n: int, tag: str) -> float:
    t0 = time.perf_counter()
    batch = f"tp-{tag}"
    http.post("/v1/batches", json={"task": "bench", "pipeline": "synthetic", "size": n, "batch_id": batch}
              ).raise_for_status()
    for start_at in range(0, n, CHUNK):
        http.post(f"/v1/batches/{batch}/requests/bulk", json={"requests": [
            {"request_id": f"r{i}", "payload": PAYLOAD} for i in range(start_at, min(n, start_at + CHUNK))]}
        ).raise_for_status()
    got, cursor = [], "0-0"
    while len(got) < n:
        page = http.get(f"/v1/batches/{batch}/results", params={"cursor": cursor, "wait_s": 10, "limit": 10000})
        page.raise_for_status()
        body = page.json()
        got += body["results"]
        cursor = body["cursor"]
    elapsed = time.perf_counter() - t0
    assert len(got) == n and all(r["status"] == "ok" for r in got), "gateway: lost or failed requests"
    return n / elapsed


def latencies(client, http, n: int, tag: str) -> tuple[list[float], list[float]]:
    batch = client.open_batch("bench", "synthetic", n, batch_id=f"lat-direct-{tag}")
    results = batch.as_completed(timeout=300)
    gw = f"lat-gw-{tag}"
    http.post("/v1/batches", json={"task": "bench", "pipeline": "synthetic", "size": n, "batch_id": gw}
              ).raise_for_status()
    direct, gateway, cursor = [], [], "0-0"
    for i in range(n):
        t0 = time.perf_counter()
        batch.submit(f"r{i}", PAYLOAD)
        assert next(results).ok
        direct.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        http.post(f"/v1/batches/{gw}/requests", json={"request_id": f"r{i}", "payload": PAYLOAD}).raise_for_status()
        got = []
        while not got:
            body = http.get(f"/v1/batches/{gw}/results", params={"cursor": cursor, "wait_s": 10}).json()
            got, cursor = body["results"], body["cursor"]
        gateway.append(time.perf_counter() - t0)
        assert got[0]["status"] == "ok"
    return direct, gateway


def run(args) -> dict:
    import httpx
    import redis

    from farm.client.sync import RewardClient
    from farm.config import Settings
    from farm.store.engine import make_engine, upgrade
    from farm.store.tenants import create_tenant

    namespace = f"bench{uuid.uuid4().hex[:8]}"
    settings = Settings(redis_url=args.redis, namespace=namespace, lease_s=10.0)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    store = tempfile.mkdtemp(prefix="farm-bench-gateway-")
    db = f"sqlite:///{store}/history.db"
    upgrade(db)
    engine = make_engine(db)
    _, token = create_tenant(engine, "bench", now=time.time())
    engine.dispose()
    env = dict(os.environ, FARM_REDIS_URL=args.redis, FARM_NAMESPACE=namespace, FARM_LEASE_S="10",
               FARM_DATABASE_URL=db)
    port = args.port
    r = redis.Redis.from_url(args.redis, decode_responses=True)
    procs = []
    farm_cli = [sys.executable, "-c", "from farm.app.cli import main; main()"]
    try:
        for i in range(args.workers):
            procs.append(start(farm_cli + ["worker", "--stage", QUEUE, "--name", f"w{i}", "--no-events",
                                           "--loglevel", "WARNING"], env, logs / f"w{i}.log"))
        procs.append(start(farm_cli + ["gateway", "--port", str(port)], env, logs / "gateway.log"))
        wait_until(lambda: r.hlen(f"{namespace}:q:{QUEUE}:seen") >= args.workers, "workers")
        base = f"http://127.0.0.1:{port}"

        wait_until(lambda: gateway_serving(base), "gateway")
        client = RewardClient(settings)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            direct_throughput(client, 50, "warm")
            gateway_throughput(http, 50, "warm")
            ratios, direct_rps, gateway_rps, direct_lat, gateway_lat = [], [], [], [], []
            for k in range(args.rounds):
                if k % 2:
                    g = gateway_throughput(http, args.requests, str(k))
                    d = direct_throughput(client, args.requests, str(k))
                else:
                    d = direct_throughput(client, args.requests, str(k))
                    g = gateway_throughput(http, args.requests, str(k))
                direct_rps.append(d)
                gateway_rps.append(g)
                ratios.append(g / d)
                dl, gl = latencies(client, http, args.sequential, str(k))
                direct_lat += dl
                gateway_lat += gl
        client.close()
    finally:
        stop(procs)
        forget_namespace(r, namespace)
        r.close()
    d50, g50 = statistics.median(direct_lat), statistics.median(gateway_lat)
    return {
        "workers": args.workers, "requests": args.requests, "sequential": args.sequential, "rounds": args.rounds,
        "direct_rps": [round(x, 1) for x in direct_rps], "gateway_rps": [round(x, 1) for x in gateway_rps],
        "throughput_ratio_median": round(statistics.median(ratios), 3),
        "direct_p50_ms": round(d50 * 1000, 2), "gateway_p50_ms": round(g50 * 1000, 2),
        "direct_p95_ms": round(percentile(direct_lat, 0.95) * 1000, 2),
        "gateway_p95_ms": round(percentile(gateway_lat, 0.95) * 1000, 2),
        "p50_ratio": round(g50 / d50, 3),
        "targets": {"throughput_ratio_min": 0.5, "p50_ratio_max": 3.0},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--sequential", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=8611)
    ap.add_argument("--redis", default=os.environ.get("FARM_REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--logs", default="/tmp/farm-bench-gateway")
    args = ap.parse_args()
    out = run(args)
    if args.json:
        print(json.dumps(out))
        return
    print(f"{args.requests}-request batches and {args.sequential} one-at-a-time round trips, {args.workers} workers, "
          f"{args.rounds} rounds")
    print(f"  throughput  direct {statistics.median(out['direct_rps']):.0f} rps, gateway "
          f"{statistics.median(out['gateway_rps']):.0f} rps: ratio {out['throughput_ratio_median']:.3f} (target >= 0.5)")
    print(f"  round trip  direct p50 {out['direct_p50_ms']:.2f} ms, gateway p50 {out['gateway_p50_ms']:.2f} ms: "
          f"ratio {out['p50_ratio']:.3f} (target <= 3)")


if __name__ == "__main__":
    main()
