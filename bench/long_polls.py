"""What a thousand waiting long polls of one tenant cost another tenant (issue 32's target: its status call's
p50 at most 2x of the same run without the polls).

    python bench/long_polls.py [--polls 1000] [--calls 400] [--rounds 3] [--redis redis://127.0.0.1:6379/0]

One `farm gateway` process (uvicorn, as deployed) on a SQLite store and the given Redis; no workers (nothing
the polls wait on ever finishes). Tenant A's polls (`GET .../results?wait_s=60`) come from a separate process,
so they take no CPU from the measuring client; tenant B makes `--calls` sequential status calls
(`GET /v1/batches/<id>`) with and without A's polls waiting, the two phases alternating first per round. Printed:
B's p50 and p95 per phase, the ratio of medians per round and its median, A's polls answered early (429 or an
error: should be none), and how many Redis connections blocked in XREAD while the polls waited (one per gateway:
its results bell).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.dispatch import forget_namespace, gateway_serving, percentile, start, stop, wait_until  # noqa: E402

# the polling side, run as `python -c POLLER base token polls`: prints "sent", then per poll its status on exit
POLLER = """
import asyncio, json, sys, httpx
base, token, polls = sys.argv[1], sys.argv[2], int(sys.argv[3])
async def main():
    limits = httpx.Limits(max_connections=polls + 10, max_keepalive_connections=polls + 10)
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer " + token}, timeout=120,
                                 limits=limits) as c:
        tasks = [asyncio.create_task(c.get("/v1/batches/held/results", params={"wait_s": 60})) for _ in range(polls)]
        print("sent", flush=True)
        # time for the gateway to take them all in (a few ms of its CPU each, longer on a loaded machine); any
        # answered this early was refused or failed
        done, _ = await asyncio.wait(tasks, timeout=10)
        print(json.dumps({"early": len(done)}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # held until the measuring side is done
        for t in tasks:
            t.cancel()
asyncio.run(main())
"""


def status_calls(http, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        http.get("/v1/batches/mine").raise_for_status()
        out.append(time.perf_counter() - t0)
    return out


def blocked_reads(r) -> int:
    return sum(1 for c in r.client_list(_type="normal") if c["cmd"] == "xread" and "b" in c["flags"])


def with_polls(base: str, token: str, polls: int, http, calls: int, r) -> tuple[list[float], int, int]:
    poller = subprocess.Popen([sys.executable, "-c", POLLER, base, token, str(polls)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert poller.stdout.readline().strip() == "sent", "the poller did not start"
        early = json.loads(poller.stdout.readline())["early"]
        blocked = blocked_reads(r)
        return status_calls(http, calls), early, blocked
    finally:
        poller.stdin.write("\n")
        poller.stdin.flush()
        poller.wait(60)


def run(args) -> dict:
    import httpx
    import redis

    from farm.store.engine import make_engine, upgrade
    from farm.store.tenants import TenantLimits, create_tenant

    namespace = f"bench{uuid.uuid4().hex[:8]}"
    store = tempfile.mkdtemp(prefix="farm-bench-polls-")
    db = f"sqlite:///{store}/history.db"
    upgrade(db)
    engine = make_engine(db)
    _, flooder = create_tenant(engine, "flooder", limits=TenantLimits(waiting_calls=args.polls + 10), now=time.time())
    _, victim = create_tenant(engine, "victim", now=time.time())
    engine.dispose()
    env = dict(os.environ, FARM_REDIS_URL=args.redis, FARM_NAMESPACE=namespace, FARM_DATABASE_URL=db)
    r = redis.Redis.from_url(args.redis, decode_responses=True)
    base = f"http://127.0.0.1:{args.port}"
    procs = [start([sys.executable, "-c", "from farm.app.cli import main; main()", "gateway", "--port",
                    str(args.port)], env, Path(store) / "gateway.log")]
    rounds = []
    try:
        wait_until(lambda: gateway_serving(base), "gateway")
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {flooder}"}, timeout=60) as a, \
                httpx.Client(base_url=base, headers={"Authorization": f"Bearer {victim}"}, timeout=60) as b:
            for http, batch in ((a, "held"), (b, "mine")):
                http.post("/v1/batches", json={"task": "bench", "pipeline": "synthetic", "size": 1,
                                               "batch_id": batch}).raise_for_status()
            status_calls(b, 20)  # warm
            for k in range(args.rounds):
                if k % 2:
                    polled, early, blocked = with_polls(base, flooder, args.polls, b, args.calls, r)
                    quiet = status_calls(b, args.calls)
                else:
                    quiet = status_calls(b, args.calls)
                    polled, early, blocked = with_polls(base, flooder, args.polls, b, args.calls, r)
                rounds.append({"quiet_p50_ms": statistics.median(quiet) * 1000,
                               "polled_p50_ms": statistics.median(polled) * 1000,
                               "quiet_p95_ms": percentile(quiet, 0.95) * 1000,
                               "polled_p95_ms": percentile(polled, 0.95) * 1000,
                               "ratio": statistics.median(polled) / statistics.median(quiet),
                               "polls_answered_early": early, "blocked_xreads": blocked})
    finally:
        stop(procs)
        forget_namespace(r, namespace)
        r.close()
    ratio = statistics.median(x["ratio"] for x in rounds)
    return {"polls": args.polls, "calls": args.calls,
            "rounds": [{k: round(v, 3) if isinstance(v, float) else v for k, v in x.items()} for x in rounds],
            "p50_ratio_median": round(ratio, 3), "target_p50_ratio_max": 2.0, "target_met": ratio <= 2.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--polls", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--port", type=int, default=18093)
    print(json.dumps(run(ap.parse_args()), indent=2))


if __name__ == "__main__":
    main()
