"""Scale-up latency of the worker backends: from the spawn call to the new worker taking a request.

For each backend, `--runs` times: a request waits in an empty stage, one worker is spawned for that
stage, and the latency is the request's start on that worker minus the moment `spawn` was called
(what a trainer feels when the planner scales up). `ready_s` is when the worker said `worker_ready`.
The worker is retired (warm) before the next run. Prints one JSON object; targets: p50 <= 3 s local,
<= 5 s docker, <= 3 s ray (a warm cluster: its nodes up, the actor's worker process still to start).

    python bench/scaleup.py [--runs 5] [--backends local,docker] [--redis-url redis://127.0.0.1:6379/0]
    python -m tests.support.loopback_ns python bench/scaleup.py --backends local,ray [--ray-address ADDR]

The docker backend runs the local test image (tests/support/docker_image.py), so it needs an engine
(docker/ci-engine.sh) and measures the engine's container start plus the same worker start-up.
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
sys.path.insert(0, str(ROOT))

from farm.config import Settings  # noqa: E402

STAGE = "synthetic.compile"
TARGETS_S = {"local": 3.0, "docker": 5.0, "ray": 3.0}
_CLUSTER: list = []  # the ray backend's cluster, when this script started one


def make_backend(kind: str, settings: Settings, ray_address: str | None = None):
    if kind == "local":
        from planner.backends.local import LocalBackend

        return LocalBackend(settings)
    if kind == "docker":
        import docker
        from planner.backends.docker import DockerBackend, Limits
        from tests.support.docker_image import backend_options

        return DockerBackend(settings, limits={"cpu": Limits(cpus=1.0, memory="512m")}, **backend_options(docker.from_env()))
    if kind == "ray":
        from planner.backends.ray import RayBackend

        if ray_address is None:  # a 3-node cluster here (run under tests.support.loopback_ns), warm before timing
            from tests.support.ray_cluster import LocalCluster

            _CLUSTER.append(LocalCluster())
            ray_address = _CLUSTER[-1].address
        return RayBackend(settings, address=ray_address)
    raise SystemExit(f"unknown backend {kind!r}; use local, docker or ray")


def one_run(backend, client, i: int) -> dict:
    batch = client.open_batch("scaleup", "synthetic", size=1)
    batch.submit(f"r{i}", {"times": [0.01, 0.0]})  # waits: the stage has no worker yet
    t0 = time.time()
    (worker,) = backend.spawn(STAGE, 1)
    try:
        (result,) = batch.gather(timeout=120)
    except TimeoutError as exc:
        raise RuntimeError(f"run {i}: the request was not served by {worker.name}; the backend lists "
                           f"{backend.list()}; the farm: {client.dispatch.inspect([STAGE]).stages[STAGE]}") from exc
    took = result.stages[0]
    if took.worker != worker.name:
        raise RuntimeError(f"request ran on {took.worker}, not on the worker just spawned ({worker.name})")
    ready_at = None
    deadline = time.time() + 30
    while ready_at is None and time.time() < deadline:  # list() reads readiness from the event stream
        listed = [w for w in backend.list() if w.name == worker.name]
        ready_at = listed[0].ready_at if listed else None
        if ready_at is None:
            time.sleep(0.05)
    backend.retire([worker.name])
    deadline = time.time() + 60
    while any(w.name == worker.name for w in backend.list()) and time.time() < deadline:
        time.sleep(0.1)
    return {"latency_s": took.started_at - t0, "ready_s": None if ready_at is None else ready_at - t0,
            "spawn_call_s": worker.spawned_at - t0}


def summarise(kind: str, runs: list[dict]) -> dict:
    latencies = [r["latency_s"] for r in runs]
    ready = [r["ready_s"] for r in runs if r["ready_s"] is not None]
    return {
        "runs": len(runs),
        "p50_s": round(statistics.median(latencies), 3),
        "max_s": round(max(latencies), 3),
        "ready_p50_s": round(statistics.median(ready), 3) if ready else None,
        "target_p50_s": TARGETS_S[kind],
        "meets_target": statistics.median(latencies) <= TARGETS_S[kind],
        "samples_s": [round(x, 3) for x in latencies],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backends", "--backend", default="local,docker", help="comma-separated: local, docker, ray")
    parser.add_argument("--redis-url", default=os.environ.get("FARM_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--ray-address", default=None,
                        help="ray backend: a running cluster (default: start a 3-node one here; run the script "
                             "under `python -m tests.support.loopback_ns`)")
    args = parser.parse_args()
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")

    import redis

    from farm.client.sync import RewardClient

    out: dict = {"stage": STAGE, "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    for kind in [k.strip() for k in args.backends.split(",") if k.strip()]:
        namespace = f"bench{uuid.uuid4().hex[:8]}"
        settings = Settings(redis_url=args.redis_url, namespace=namespace, lease_s=5.0,
                            data_dir=tempfile.mkdtemp(prefix="farm-scaleup-"))
        backend = make_backend(kind, settings, args.ray_address)
        client = RewardClient(settings)
        try:
            runs = [one_run(backend, client, i) for i in range(args.runs)]
            out[kind] = summarise(kind, runs)
        finally:
            backend.shutdown()
            deadline = time.time() + 60
            while backend.list() and time.time() < deadline:
                time.sleep(0.2)
            client.close()
            backend.close()
            r = redis.Redis.from_url(args.redis_url)
            for key in r.scan_iter(match=f"{namespace}*", count=1000):
                r.delete(key)
            r.close()
    for cluster in _CLUSTER:
        cluster.shutdown()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
