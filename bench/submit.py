"""Bulk submit against one request per round trip: requests/s for the same submits, same run.

    python bench/submit.py [--json] [--requests 10000] [--rounds 3] [--redis URL]

Each round opens two batches of `--requests` queued requests (payload {"times": [1, 0]}: one stage,
no worker takes it) on the same Redis and client, submits one batch with `Batch.submit` per request and
the other with `Batch.submit_many`, in alternating order between rounds so a load change on the shared
machine hits both, then cancels both. The ratio is the median of the per-round ratios. Both clients,
the blocking and the asyncio one, are measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PAYLOAD = {"times": [1, 0]}


def requests(n: int, tag: str) -> list[tuple[str, dict, str]]:
    return [(f"{tag}-{i}", PAYLOAD, f"g{i // 8}") for i in range(n)]


def sync_round(client, n: int, k: int) -> tuple[float, float]:
    def one_by_one() -> float:
        batch = client.open_batch("bench", "synthetic", n)
        items = requests(n, f"one{k}")
        start = time.perf_counter()
        for rid, payload, group in items:
            batch.submit(rid, payload, group)
        rps = n / (time.perf_counter() - start)
        batch.cancel()
        return rps

    def bulk() -> float:
        batch = client.open_batch("bench", "synthetic", n)
        items = requests(n, f"bulk{k}")
        start = time.perf_counter()
        batch.submit_many(items)
        rps = n / (time.perf_counter() - start)
        batch.cancel()
        return rps

    if k % 2:
        b = bulk()
        return one_by_one(), b
    o = one_by_one()
    return o, bulk()


async def async_round(client, n: int, k: int) -> tuple[float, float]:
    async def one_by_one() -> float:
        batch = await client.open_batch("bench", "synthetic", n)
        items = requests(n, f"aone{k}")
        start = time.perf_counter()
        for rid, payload, group in items:
            await batch.submit(rid, payload, group)
        rps = n / (time.perf_counter() - start)
        await batch.cancel()
        return rps

    async def bulk() -> float:
        batch = await client.open_batch("bench", "synthetic", n)
        items = requests(n, f"abulk{k}")
        start = time.perf_counter()
        await batch.submit_many(items)
        rps = n / (time.perf_counter() - start)
        await batch.cancel()
        return rps

    if k % 2:
        b = await bulk()
        return await one_by_one(), b
    o = await one_by_one()
    return o, await bulk()


def summary(pairs: list[tuple[float, float]]) -> dict:
    one, bulk = [p[0] for p in pairs], [p[1] for p in pairs]
    return {"one_by_one_rps": round(statistics.median(one), 1), "bulk_rps": round(statistics.median(bulk), 1),
            "ratio": round(statistics.median(b / o for o, b in pairs), 2),
            "one_by_one_rps_rounds": [round(x, 1) for x in one], "bulk_rps_rounds": [round(x, 1) for x in bulk]}


def run(args) -> dict:
    import redis

    from farm.client.aio import AsyncRewardClient
    from farm.client.sync import RewardClient

    namespace = f"bench{uuid.uuid4().hex[:8]}"
    try:
        with RewardClient(redis_url=args.redis, namespace=namespace) as client:
            sync_round(client, 200, 0)  # warm up: connections, script cache
            sync = [sync_round(client, args.requests, k) for k in range(args.rounds)]

        async def measure():
            async with AsyncRewardClient(redis_url=args.redis, namespace=namespace) as client:
                await async_round(client, 200, 0)
                return [await async_round(client, args.requests, k) for k in range(args.rounds)]
        aio = asyncio.run(measure())
    finally:
        r = redis.Redis.from_url(args.redis)
        for pattern in (f"{namespace}*", f"_kombu.binding*.{namespace}.*"):
            for key in r.scan_iter(match=pattern, count=1000):
                r.delete(key)
        r.close()
    return {"requests": args.requests, "rounds": args.rounds, "sync": summary(sync), "async": summary(aio)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--requests", type=int, default=10_000, help="submits per batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--redis", default=os.environ.get("FARM_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = ap.parse_args()
    figures = run(args)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{args.requests} submits per batch, median of {args.rounds} rounds")
    for kind in ("sync", "async"):
        f = figures[kind]
        print(f"{kind:>6}: one by one {f['one_by_one_rps']:>9.1f} req/s   bulk {f['bulk_rps']:>9.1f} req/s   "
              f"ratio {f['ratio']:.2f}x")


if __name__ == "__main__":
    main()
