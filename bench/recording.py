"""What recording the history costs: the recorder's sustained rate into PostgreSQL, and the XADD on the hot path.

    python bench/recording.py [--batches 20 --batch-size 100 --round-trips 3000]

Prints one JSON object:
- `recorder_events_per_s`: events drained from the stream into the store per second (bulk upserts, T and d);
- `hot_path`: sequential round trips of a dispatch-like Lua call (EBF index update, as the farm does per
  request), without and with the history XADD, both with the XADD inside the script and with the XADD
  pipelined after it; medians, means and p99 in microseconds, and the ratios with/without XADD.
By default it creates a scratch PostgreSQL database next to FARM_TEST_POSTGRES_URL's and drops it after.
"""

from __future__ import annotations

import argparse
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

import redis  # noqa: E402
from sqlalchemy import create_engine, func, select, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from farm.config import Settings  # noqa: E402
from farm.events import encode, stream_key  # noqa: E402
from farm.store import engine as store  # noqa: E402
from farm.store.models import Request  # noqa: E402
from farm.store.recorder import Recorder  # noqa: E402

ADMIN_URL = os.environ.get("FARM_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")

# A stand-in for the dispatch's submit: put the request in its batch's FIFO and the batch in the stage's EBF index.
SUBMIT = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[3])
return 1
"""
# The same, with the history entry appended inside the script: still one round trip.
SUBMIT_AND_RECORD = SUBMIT.replace("return 1", "redis.call('XADD', KEYS[3], '*', 'e', ARGV[4])\nreturn 1")


def _events(batches: int, size: int, t0: float):
    for b in range(batches):
        batch, opened = f"bench-b{b}", t0 + 100.0 * b
        yield encode("batch_opened", batch=batch, task=f"task-{b % 4}", pipeline="synthetic", size=size, opened_at=opened)
        for i in range(size):
            rid, arrived = f"r{i}", opened + i * 0.01
            yield encode("request_arrived", batch=batch, request=rid, arrived_at=arrived, group=f"g{i // 8}",
                         stages=["compile", "execute"])
            yield encode("stage_done", batch=batch, request=rid, stage="synthetic.compile", queued_at=arrived,
                         started_at=arrived + 0.1, finished_at=arrived + 1.1, status="passed", worker="c1")
            yield encode("stage_done", batch=batch, request=rid, stage="synthetic.execute", queued_at=arrived + 1.1,
                         started_at=arrived + 1.2, finished_at=arrived + 1.5, status="ok", worker="g1")
            yield encode("request_done", batch=batch, request=rid, status="ok", reward=1.0, outcome="success",
                         finished_at=arrived + 1.5, message="")
        yield encode("batch_completed", batch=batch, completed_at=opened + size * 0.01 + 2.0)


def bench_recorder(client: redis.Redis, url: str, namespace: str, batches: int, size: int) -> dict:
    key = stream_key(namespace)
    count = 0
    pipe = client.pipeline(transaction=False)
    for fields in _events(batches, size, time.time()):
        pipe.xadd(key, fields)
        count += 1
        if count % 1000 == 0:
            pipe.execute()
    pipe.execute()
    engine = store.make_engine(url)
    try:
        recorder = Recorder(Settings(namespace=namespace), engine, redis=client)
        started = time.perf_counter()
        drained = recorder.run_once()
        elapsed = time.perf_counter() - started
        with engine.connect() as conn:
            requests = conn.execute(select(func.count()).select_from(Request)).scalar_one()
    finally:
        engine.dispose()
    assert drained == count and requests == batches * size, (drained, count, requests)
    return {"events": count, "seconds": round(elapsed, 3), "recorder_events_per_s": round(count / elapsed, 1),
            "stream_left": client.xlen(key)}


def _round_trips(fn, n: int) -> list[float]:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def _summary(samples: list[float]) -> dict:
    return {"p50_us": round(statistics.median(samples), 1), "mean_us": round(statistics.fmean(samples), 1),
            "p99_us": round(sorted(samples)[int(0.99 * (len(samples) - 1))], 1)}


def bench_hot_path(client: redis.Redis, namespace: str, n: int) -> dict:
    """Four ways to submit, timed interleaved: the Lua call alone, with the XADD inside it, and both pipelined."""
    submit = client.register_script(SUBMIT)
    submit_and_record = client.register_script(SUBMIT_AND_RECORD)
    fifo, index, key = f"{namespace}:bench:fifo", f"{namespace}:bench:ebf", stream_key(namespace) + ":hot"
    event = encode("request_arrived", batch="b", request="r", arrived_at=time.time(), group=None,
                   stages=["compile", "execute"])["e"]

    def lua(i: int) -> None:
        submit(keys=[fifo, index], args=[f"r{i}", 1.0, "b"])

    def lua_xadd(i: int) -> None:
        submit_and_record(keys=[fifo, index, key], args=[f"r{i}", 1.0, "b", event])

    def pipe(i: int) -> None:
        p = client.pipeline(transaction=False)
        submit(keys=[fifo, index], args=[f"r{i}", 1.0, "b"], client=p)
        p.execute()

    def pipe_xadd(i: int) -> None:
        p = client.pipeline(transaction=False)
        submit(keys=[fifo, index], args=[f"r{i}", 1.0, "b"], client=p)
        p.xadd(key, {"e": event})
        p.execute()

    variants = {"lua": lua, "lua_with_xadd": lua_xadd, "pipeline": pipe, "pipeline_with_xadd": pipe_xadd}
    for fn in variants.values():
        fn(0)  # load the scripts once
    samples: dict[str, list[float]] = {name: [] for name in variants}
    rounds = 5
    for _ in range(rounds):  # interleave, so drift in machine load hits every variant alike
        for name, fn in variants.items():
            samples[name] += _round_trips(fn, max(1, n // rounds))
    client.delete(fifo, index, key)
    out = {name: _summary(s) for name, s in samples.items()}

    def ratio(a: str, b: str, stat: str) -> float:
        return round(out[b][stat] / out[a][stat], 3)

    return {"round_trips": len(samples["lua"]), **out,
            "lua_p50_ratio": ratio("lua", "lua_with_xadd", "p50_us"),
            "lua_mean_ratio": ratio("lua", "lua_with_xadd", "mean_us"),
            "pipeline_p50_ratio": ratio("pipeline", "pipeline_with_xadd", "p50_us"),
            "pipeline_mean_ratio": ratio("pipeline", "pipeline_with_xadd", "mean_us")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", default=os.environ.get("FARM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--database-url", default=None, help="a PostgreSQL database to record into (default: a scratch one)")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--round-trips", type=int, default=3000)
    parser.add_argument("--json", action="store_true", help="accepted for symmetry with the other benches (JSON is always printed)")
    args = parser.parse_args(argv)

    namespace = f"bench{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(args.redis_url)
    scratch = None
    url = args.database_url
    admin = None
    if url is None:
        scratch = f"farm_bench_{uuid.uuid4().hex[:10]}"
        admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{scratch}"'))
        url = make_url(ADMIN_URL).set(database=scratch).render_as_string(hide_password=False)
    try:
        store.upgrade(url)
        out = {"recorder": bench_recorder(client, url, namespace, args.batches, args.batch_size),
               "hot_path": bench_hot_path(client, namespace, args.round_trips)}
    finally:
        for key in client.scan_iter(match=f"{namespace}*"):
            client.delete(key)
        client.close()
        if scratch is not None:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)'))
            admin.dispose()
    out["recorder_events_per_s"] = out["recorder"]["recorder_events_per_s"]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
