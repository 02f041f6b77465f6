"""The container deployment's figures: image builds from nothing and from cache, image sizes, the stack
(docker/compose.yaml) from `up` to its first result, and the fidelity of a replay against the stack (the
planner on the docker backend running worker containers) to `farm eval`'s prediction (target: within 15%,
0 lost).

    python bench/stack.py [--from-scratch] [--runs 3] [--tasks 2] [--batches 5] [--speed 20] [--json]

`--from-scratch` first removes the farm's images and the engine's build cache, so the first build is the
build from nothing (the Debian bases from the mirror, the farm's dependencies from PyPI); the second build
is then the cached one. Without it both builds are cached. Each run brings up a stack of its own, times
it to its first result, replays the trace from this machine and takes the stack down. Needs a Docker
engine (docker/ci-engine.sh) and docker-compose or Compose v2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from farm import registry  # noqa: E402
from farm.app import live_replay as rp  # noqa: E402
from farm.app.demo import DEMO_MAX_WORKERS, demo_knobs  # noqa: E402
from farm.client import RewardClient  # noqa: E402
from farm.config import Settings  # noqa: E402
from farm.store.engine import open_store  # noqa: E402
from farm.store.knob_store import KnobStore  # noqa: E402
from planner.eval import trace as tracefile  # noqa: E402
from planner.backends import STARTUP_S  # noqa: E402
from tests.support.compose_stack import Stack, build_images, compose_commands  # noqa: E402


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False).stdout.strip()


def _timed_build() -> tuple[float, dict[str, str]]:
    started = time.monotonic()
    images = build_images()
    return time.monotonic() - started, images


def _sizes(images: dict[str, str]) -> dict[str, float]:
    tags = {v for k, v in images.items() if k != "COMPOSE_PROJECT_NAME"}
    return {tag: round(int(_docker("image", "inspect", "--format", "{{.Size}}", tag) or 0) / 1e6, 1)
            for tag in sorted(tags)}


def _first_result(stack: Stack) -> dict[str, float]:
    """From `up` to the result of one request submitted as soon as the stack's planner is alive."""
    started = time.monotonic()
    stack.up()
    planner_at = time.monotonic() - started
    with RewardClient(redis_url=stack.redis_url, namespace=stack.namespace) as client:
        with client.open_batch(task="first", pipeline="synthetic", size=1) as batch:
            batch.submit("r0", {"times": [0.1, 0.1]})
            (result,) = batch.gather(timeout=300)
    if result.status.value != "ok":
        raise RuntimeError(f"the first request came back {result.status.value}: {result.error}")
    return {"planner_alive_s": round(planner_at, 2), "first_result_s": round(time.monotonic() - started, 2)}


def _replay(stack: Stack, args) -> dict:
    settings = Settings(redis_url=stack.redis_url, namespace=stack.namespace)
    engine = open_store(settings, url=stack.database_url)
    try:
        trace = rp.select(tracefile.read(tracefile.resolve(args.trace)), rp.parse_tasks(args.tasks), args.batches)
        # what the stack's planner is told a worker takes to start (`farm planner --backend docker`)
        options = rp.ReplayOptions(speed=args.speed, startup_s=STARTUP_S["docker"])
        client = redis.Redis.from_url(stack.redis_url)
        store = KnobStore(engine, client, stack.namespace)
        store.save(demo_knobs(store.load(), registry.get(options.pipeline).queues, args.max_workers))
        client.close()
        return rp.run(settings, engine, trace, options)
    finally:
        engine.dispose()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-scratch", action="store_true", help="remove the images and build cache first")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trace", default="demo")
    ap.add_argument("--tasks", default="2")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--speed", type=float, default=20.0)
    ap.add_argument("--max-workers", type=int, default=DEMO_MAX_WORKERS)
    ap.add_argument("--compose", choices=["v2", "v1"], default=None,
                    help="Compose v2 (`docker compose`) or docker-compose 1.29 (default: v2 where installed)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    commands = compose_commands()
    compose = commands.get(args.compose) if args.compose else next(iter(commands.values()), None)
    if compose is None:
        ap.error(f"compose {args.compose or ''} is not installed (docker/ci-engine.sh installs both)")
    say = (lambda msg: print(msg, file=sys.stderr)) if args.json else print

    if args.from_scratch:
        say("removing the farm's images and the build cache")
        for tag in _docker("images", "--format", "{{.Repository}}:{{.Tag}}").split():
            if tag.startswith(("reward-farm-local/", "reward-farm-worker:")):
                _docker("rmi", "-f", tag)
        _docker("image", "prune", "-f")
        _docker("builder", "prune", "-af")
    first_build, images = _timed_build()
    say(f"build ({'from nothing' if args.from_scratch else 'as found'}): {first_build:.1f} s")
    cached_build, images = _timed_build()
    say(f"build (cached): {cached_build:.1f} s")
    sizes = _sizes(images)
    say("image sizes (MB): " + ", ".join(f"{k} {v}" for k, v in sizes.items()))

    runs = []
    for i in range(args.runs):
        stack = Stack(images, compose)
        try:
            up = _first_result(stack)
            say(f"run {i + 1}: planner alive {up['planner_alive_s']} s, first result {up['first_result_s']} s "
                f"after `up`; replaying {args.trace!r}")
            report = _replay(stack, args)
            started = time.monotonic()
            stack.down()
            down_s = time.monotonic() - started
            left = stack.leftovers()
        finally:
            stack.force_down()
        fid = report["fidelity"]
        runs.append({**up, "down_s": round(down_s, 1), "leftovers": left, "results": report["results"],
                     "fidelity": fid, "physics": report["physics"], "policy_startup_s": report["policy_startup_s"],
                     "measured": report["measured"], "predicted": report["predicted"]})
        say(f"run {i + 1}: " + ", ".join(f"{k} {v['relative_error']:.1%}" for k, v in fid.items()
                                          if isinstance(v, dict))
            + f"; within 15%: {fid['ok']}; lost {report['results']['lost']}, "
              f"duplicated {report['results']['duplicated']}; down {down_s:.1f} s, leftovers {left}")

    out = {
        "compose": " ".join(compose),
        "build_s": {"from_nothing" if args.from_scratch else "as_found": round(first_build, 1),
                    "cached": round(cached_build, 1)},
        "image_mb": sizes,
        "first_result_s_median": statistics.median(r["first_result_s"] for r in runs) if runs else None,
        "error_medians": {name: statistics.median(r["fidelity"][name]["relative_error"] for r in runs)
                          for name in runs[0]["fidelity"] if name != "ok"} if runs else {},
        "runs": runs,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        say(f"median first result {out['first_result_s_median']} s; median errors: "
            + ", ".join(f"{k} {v:.1%}" for k, v in out["error_medians"].items()) if runs else "no runs")
    return 0 if all(r["fidelity"]["ok"] and r["results"]["lost"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
