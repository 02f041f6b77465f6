"""Chaos: a replay of at least 10k requests on an elastic embedded farm (the planner daemon, local workers,
the farm's Redis with its append-only file, a PostgreSQL history of the run's own) while a random worker
is killed every few seconds, Redis is restarted once, PostgreSQL once, and the planner daemon is killed
(`kill -9`) and started again once; then the same trace on a quiet farm, in the same session.

    python bench/chaos.py [--tasks 2] [--batches 20] [--batch-size 256] [--speed 2] [--kill-every-s 3] [--json]

Issue 15's target: 0 lost, 0 duplicated, no infra_error beyond the requests whose worker died three times,
the mean extra delay within 2x of the quiet run's, and the history complete (every batch completed with its
extra delay, every request with its result, no stage left open). Prints the figures of both runs and each
check; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select  # noqa: E402

from bench.chaos_services import PrivatePostgres, WorkerKiller  # noqa: E402
from farm import registry  # noqa: E402
from farm.app import live_replay as rp  # noqa: E402
from farm.app.demo import DEMO_LEASE_S, demo_knobs  # noqa: E402
from farm.app.embedded import EmbeddedFarm  # noqa: E402
from farm.app.planner_process import DaemonProcess  # noqa: E402
from farm.config import Settings  # noqa: E402
from farm.store.engine import upgrade  # noqa: E402
from farm.store.knob_store import KnobStore  # noqa: E402
from farm.store.models import Batch, Request, RequestStage  # noqa: E402
from farm.processes import process_start  # noqa: E402
from farm.worker_records import Records  # noqa: E402
from planner.eval.tracegen import GeneratorParams, generate  # noqa: E402
from planner.eval.tracestats import summary  # noqa: E402

TIME_SCALE = 0.03  # the demo trace's: compile ~1.6 s, execute ~0.2 s, timeouts 3.6 s and 1.8 s (trace time)
STARTUP_S = 1.0  # the local backend's (planner.backends.STARTUP_S)
LOST_WORKER = "lost its worker"  # the message of a request whose worker died MAX_ATTEMPTS times


class Faults:
    """The one-off faults of a chaos run, each at its fraction of the run's expected span, in a thread."""

    def __init__(self, farm: EmbeddedFarm, pg: PrivatePostgres, planner: list[DaemonProcess], span_s: float,
                 planner_args: list[str], say) -> None:
        self.farm, self.pg, self.planner, self.span_s = farm, pg, planner, span_s
        self.planner_args, self.say = planner_args, say
        self.done: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)

    def start(self) -> "Faults":
        self._started = time.monotonic()
        self._thread.start()
        return self

    def _at(self, fraction: float) -> None:
        time.sleep(max(0.0, self._started + fraction * self.span_s - time.monotonic()))

    def _run(self) -> None:
        for fraction, name, fault in ((0.2, "redis restart", self._redis), (0.4, "planner kill -9", self._planner),
                                      (0.6, "postgresql restart", self._postgres)):
            self._at(fraction)
            began = time.monotonic()
            try:
                fault()
            except Exception as exc:  # said in the report: the run goes on
                self.errors.append(f"{name}: {exc!r}")
            self.done.append({"fault": name, "at_s": round(began - self._started, 1),
                              "took_s": round(time.monotonic() - began, 1)})
            self.say(f"  {name} at {began - self._started:.0f} s")

    def _redis(self) -> None:
        self.farm.restart_redis(down_s=2.0)

    def _planner(self) -> None:
        self.planner[0].kill()
        time.sleep(2.0)
        self.planner[0] = DaemonProcess(self.farm.settings, self.planner_args)

    def _postgres(self) -> None:
        self.pg.restart(down_s=5.0)

    def join(self) -> None:
        self._thread.join()


def history_check(engine, report: dict[str, Any], batch_count: int, began: float) -> dict[str, Any]:
    """The store after the run: every batch completed with its d, every request finished, no stage open."""
    with engine.connect() as conn:
        batches = conn.execute(select(func.count()).select_from(Batch)
                               .where(Batch.completed_at.is_not(None), Batch.extra_delay_s.is_not(None))).scalar_one()
        requests = conn.execute(select(func.count()).select_from(Request).where(Request.status.is_not(None))).scalar_one()
        open_stages = conn.execute(select(func.count()).select_from(RequestStage)
                                   .where(RequestStage.finished_at.is_(None))).scalar_one()
        infra = conn.execute(select(Request.message).where(Request.status == "infra_error")).scalars().all()
        timeline = conn.execute(select(Batch.completed_at, Batch.extra_delay_s).where(Batch.completed_at.is_not(None))
                                .order_by(Batch.completed_at)).all()
    expected = report["results"]["expected"]
    return {
        "batches_completed": batches, "batches_expected": batch_count,
        "requests_finished": requests, "requests_expected": expected, "stages_left_open": open_stages,
        "infra_errors": len(infra), "infra_errors_not_from_dead_workers": sum(LOST_WORKER not in (m or "") for m in infra),
        "complete": batches == batch_count and requests == expected and open_stages == 0,
        # each batch's completion (wall s after the replay began, as the faults' `at_s`) and extra delay (wall
        # s): where in the run the delay was lost
        "timeline": [(round(c - began, 1), round(d, 2)) for c, d in timeline if d is not None],
    }


def run_once(trace, args, chaos: bool, say) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"farm-chaos-{'chaos' if chaos else 'quiet'}-"))
    os.chmod(folder, 0o755)  # PostgreSQL's own user reaches its cluster through it
    pg = PrivatePostgres(folder / "pg").start()
    upgrade(pg.url)  # a fresh database, as an operator's `farm db upgrade` leaves it
    queues = registry.get("synthetic").queues
    settings = Settings(data_dir=str(folder / "farm"), namespace="chaos", lease_s=DEMO_LEASE_S, database_url=pg.url)
    planner_args = ["--backend", "local", "--startup-s", str(STARTUP_S)]
    killer = faults = None
    try:
        with EmbeddedFarm(settings=settings, workers_per_stage=0) as farm:
            redis = farm._redis()
            store = KnobStore(farm.engine, redis, farm.settings.namespace)
            store.save(demo_knobs(store.load(), queues, args.max_workers))
            redis.close()
            planner = [DaemonProcess(farm.settings, planner_args)]
            planner[0].wait_ready(farm._redis(), farm.settings.namespace)
            if chaos:
                # the victims are read from the local backend's records, read-only, so that the planner's
                # backend is the only one to see a death, as on a real farm
                records = Records(Path(farm.settings.data_dir) / "workers" / farm.settings.namespace)

                def worker_pids() -> list[int]:
                    return [r["pid"] for r in records.all() if r.get("pid") and r.get("stopping_since") is None
                            and process_start(r["pid"]) == r.get("start")]

                killer = WorkerKiller(worker_pids, args.kill_every_s, random.Random(args.seed)).start()
                faults = Faults(farm, pg, planner, summary(trace)["span_s"] / args.speed, planner_args, say).start()
            began = time.time()
            report = rp.run(farm.settings, farm.engine, trace,
                            rp.ReplayOptions(speed=args.speed, startup_s=STARTUP_S, record_timeout_s=180),
                            predict_too=False)
            wall = time.time() - began
            if killer is not None:
                killer.stop()
            if faults is not None:
                faults.join()
            history = history_check(farm.engine, report, len(trace.batches), began)
            planner[0].stop()
    finally:
        if killer is not None:
            killer.stop()
        pg.stop()
        if args.keep:
            say(f"  kept {folder} (the farm's logs and data, the run's PostgreSQL)")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "mode": "chaos" if chaos else "quiet", "wall_s": round(wall, 1), "results": report["results"],
        "extra_delay_mean_s": report["measured"]["extra_delay_mean_s"],
        "extra_delay_p95_s": report["measured"]["extra_delay_p95_s"],
        "resources": report["measured"]["resources"],
        "workers_killed": killer.kills if killer else 0,
        "faults": faults.done if faults else [], "fault_errors": faults.errors if faults else [],
        "history": history,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--batches", type=int, default=20, help="per task")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--speed", type=float, default=2.0)
    # the default trace's peak wants about 46 compile workers: under a lower cap even the quiet run falls
    # behind for good (its extra delay grows batch after batch), and the chaos run's ratio measures that backlog
    ap.add_argument("--max-workers", type=int, default=64, help="per stage")
    ap.add_argument("--kill-every-s", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="quiet,chaos", help="which runs, of quiet and chaos (the ratio needs both)")
    ap.add_argument("--keep", action="store_true", help="keep each run's folder: logs, Redis data, PostgreSQL")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    trace = generate(GeneratorParams(tasks=args.tasks, batches=args.batches, batch_size=args.batch_size,
                                     time_scale=TIME_SCALE), args.seed)
    say(f"trace: {len(trace.tasks)} tasks, {len(trace.batches)} batches, {trace.num_requests} requests, "
        f"span {summary(trace)['span_s']:.0f} s (trace time), speed {args.speed:g}")
    runs = []
    modes = [m.strip() for m in args.runs.split(",") if m.strip()]
    if not modes or set(modes) - {"quiet", "chaos"}:
        ap.error(f"--runs takes quiet, chaos or both, not {args.runs!r}")
    for chaos in [m == "chaos" for m in modes]:
        say(f"{'chaos' if chaos else 'quiet'} run")
        runs.append(run_once(trace, args, chaos, say))
    by = {r["mode"]: r for r in runs}
    out = {"requests": trace.num_requests, "speed": args.speed, "kill_every_s": args.kill_every_s, "runs": runs}
    if "chaos" not in by:  # a quiet run alone: its figures, nothing to check
        print(json.dumps(out, indent=2) if args.json else json.dumps(runs, indent=2))
        return 0
    c = by["chaos"]
    checks = {
        "lost_0": c["results"]["lost"] == 0,
        "duplicated_0": c["results"]["duplicated"] == 0,
        "infra_error_only_dead_workers": c["history"]["infra_errors_not_from_dead_workers"] == 0,
        "history_complete": c["history"]["complete"],
        "faults_without_error": not c["fault_errors"],
    }
    if "quiet" in by:
        q = by["quiet"]["extra_delay_mean_s"]
        out["delay_ratio"] = c["extra_delay_mean_s"] / q if q > 0 else (1.0 if c["extra_delay_mean_s"] == 0 else float("inf"))
        checks["delay_within_2x_of_quiet"] = out["delay_ratio"] <= 2.0
    out["checks"] = checks
    out["ok"] = all(checks.values())
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for r in runs:
            res = r["results"]
            print(f"{r['mode']:6s} wall {r['wall_s']:7.1f} s  results {res['received']}/{res['expected']} lost "
                  f"{res['lost']} duplicated {res['duplicated']}  statuses {res['statuses']}")
            print(f"       mean extra delay {r['extra_delay_mean_s']:.2f} s (p95 {r['extra_delay_p95_s']:.2f}), "
                  f"workers killed {r['workers_killed']}, faults {[f['fault'] for f in r['faults']]}")
            print(f"       history {dict((k, v) for k, v in r['history'].items() if k != 'timeline')}")
            print(f"       (completed s, extra delay s) by batch: {r['history']['timeline']}")
        if "delay_ratio" in out:
            print(f"mean extra delay chaos / quiet: {out['delay_ratio']:.2f}")
        print("checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in checks.items()))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
