"""How soon a new worker serves the work that waits for it: spawn -> ready (what the planner measures as
start-up) and ready -> first pick (what it does not: every such second is start-up the model misses).

An embedded farm with no compile worker; a batch is queued, then one compile worker is spawned through the
local backend; the store's `workers.ready_at` and the first `request_stages.started_at` give the two spans.
Repeated `--rounds` times (a fresh farm each), medians printed.

    python bench/first_pick.py [--rounds 5] [--json]

On this 2-core machine (2026-11, loaded by other jobs), medians of 3: ready -> first pick 0.36 s when the pool process
loaded every pipeline on its first pick (fair shares' kind queues), 0.036 s once the worker finds them
before it says it is ready; spawn -> ready 0.33 and 0.22 s (the launcher loads them once).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import select  # noqa: E402

from farm.app.embedded import EmbeddedFarm  # noqa: E402
from farm.client.sync import RewardClient  # noqa: E402
from farm.config import Settings  # noqa: E402
from farm.store.models import RequestStage, Worker  # noqa: E402

STAGE = "synthetic.compile"


def one_round(requests: int = 8) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data_dir:
        with EmbeddedFarm(Settings(data_dir=data_dir), workers={STAGE: 0, "synthetic.execute": 1}) as farm:
            farm.wait_ready()
            with RewardClient(farm.settings) as client:
                batch = client.open_batch("task-first-pick", "synthetic", requests)
                for i in range(requests):
                    batch.submit(f"r{i}", {"times": [0.05, 0.01]})
                time.sleep(0.3)  # the requests wait in the queue before the worker exists
                farm.backend.spawn(STAGE, 1)
                batch.gather(timeout=60)
            deadline = time.monotonic() + 30
            while True:  # the recorder writes history within a second or so
                with farm._engine.connect() as conn:
                    ready = conn.execute(select(Worker.spawned_at, Worker.ready_at).where(Worker.stage == STAGE)).first()
                    first = conn.execute(select(RequestStage.started_at).where(RequestStage.stage == STAGE)
                                         .order_by(RequestStage.started_at)).first()
                if ready and ready.ready_at is not None and first and first.started_at is not None:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the store did not record the worker and its first pick within 30 s")
                time.sleep(0.2)
    return {"spawn_to_ready_s": ready.ready_at - ready.spawned_at, "ready_to_first_pick_s": first.started_at - ready.ready_at}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    rounds = [one_round() for _ in range(args.rounds)]
    out = {key: {"median": statistics.median(r[key] for r in rounds), "rounds": [round(r[key], 4) for r in rounds]}
           for key in ("spawn_to_ready_s", "ready_to_first_pick_s")}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for key, v in out.items():
            print(f"{key:24s} median {v['median']:.3f} s   rounds {v['rounds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
