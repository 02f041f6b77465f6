"""`farm demo`: the whole farm on this machine, elastic, on a small bundled trace, in a minute or two.

An embedded farm (in-process Redis, SQLite history, recorder) with the planner daemon and the local
backend and no fixed workers; the bundled `demo` trace's trainers replayed against it; the report
(measured beside `farm eval`'s prediction) and a PNG of the workers over time per stage against the
`ideal` policy's, with the workers actually busy.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from sqlalchemy import select

from farm import registry
from farm.app import live_replay as rp
from farm.app.embedded import EmbeddedFarm
from farm.app.live_replay.plan import farm_shares, split_tenants
from farm.app.planner_process import DaemonProcess
from farm.config import Settings
from farm.knobs import Knobs
from farm.protocol.shares import FairShare
from farm.store.knob_store import KnobStore
from farm.store.models import RequestStage, Worker
from planner.eval import trace as tracefile
from planner.backends import STARTUP_S

DEMO_TRACE = "demo"
# One machine runs every worker: bound the pools so the cold start of the first batches (the policy
# sizes them for the worst case until history exists) does not start more processes than it can carry.
DEMO_MAX_WORKERS = 12
DEMO_LEASE_S = 4.0
# The demo's trainers run on this machine, next to the workers (real trainers run elsewhere), and a burst
# of starting workers competes with them for the CPU: at speed 20 on 2 cores their batches open up to
# a second late. Lowering the workers' priority (FARM_WORKER_NICE, bench/fidelity.py --worker-nice) puts
# the trainers back on time but slows the workers' own per-request work more: on the 2-core machine
# the fidelity was worse at 10 than at 0 in every run (see bench/fidelity.py), so the demo keeps 0.
DEMO_WORKER_NICE = 0


def demo_knobs(base: Knobs, queues: Sequence[str], max_workers: int) -> Knobs:
    knobs = base
    for q in queues:
        knobs = knobs.with_stage(q, max_workers=max_workers, min_workers=0)
    return knobs


def workers_over_time(lives: Sequence[tuple[float, float | None]], start: float, end: float,
                      step_s: float) -> tuple[np.ndarray, np.ndarray]:
    """The number of workers that exist at each sample time in [start, end]."""
    t = np.arange(start, end + step_s, step_s)
    n = np.zeros(len(t))
    for spawned, retired in lives:
        n += (t >= spawned) & (t < (end + step_s if retired is None else retired))
    return t, n


def busy_over_time(spans: Sequence[tuple[float, float]], t: np.ndarray) -> np.ndarray:
    n = np.zeros(len(t))
    for a, b in spans:
        n += (t >= a) & (t < b)
    return n


def plot(path: Path, report: dict[str, Any], engine: Any, trace: Any, ideal: Any, predicted: Any = None,
         pipeline: str = "synthetic") -> Path:
    """Workers over time per stage: measured on the farm, predicted by `farm eval`, the `ideal` policy's, busy."""
    import matplotlib  # heavy, and only the PNG needs it: loaded here, not with the demo

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = report["measured"]["speed"]
    start = report["started_at"]
    duration = report["measured"]["duration_s"] / speed
    origin = min(b.start_s for b in trace.batches)
    step = max(duration / 600, 0.01)
    fig, axes = plt.subplots(len(trace.stages), 1, figsize=(9, 3.2 * len(trace.stages)), sharex=True)
    axes = np.atleast_1d(axes)
    with engine.connect() as conn:
        for k, (ax, stage) in enumerate(zip(axes, trace.stages)):
            queue = f"{pipeline}.{stage.name}"
            lives = conn.execute(select(Worker.spawned_at, Worker.retired_at).where(Worker.stage == queue)).all()
            t, n = workers_over_time(lives, start, start + duration, step)
            spans = conn.execute(select(RequestStage.started_at, RequestStage.finished_at).where(
                RequestStage.stage == queue, RequestStage.started_at.is_not(None),
                RequestStage.finished_at.is_not(None), RequestStage.started_at >= start - 1.0)).all()
            busy = busy_over_time(spans, t)
            x = origin + (t - start) * speed
            ax.step(x, n, where="post", label="workers (measured)", color="tab:blue")
            ax.fill_between(x, busy, step="post", alpha=0.3, color="tab:blue", label="busy (measured)")
            for result, label, color, style in ((ideal, "ideal policy (simulated)", "tab:green", "--"),
                                                (predicted, f"{report['measured']['policy']} (farm eval)",
                                                 "tab:orange", ":")):
                if result is None:
                    continue
                times = [origin] + [tt for tt, _ in result.timeline]
                counts = [0] + [c[k] for _, c in result.timeline]
                ax.step(times, counts, where="post", label=label, color=color, linestyle=style)
            ax.set_ylabel(f"{stage.name} ({stage.resource})")
            ax.legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("trace time (s)")
    m = report["measured"]
    fig.suptitle(f"farm demo: {m['batches']} batches, {m['requests']} requests at speed {speed:g}; "
                 f"mean extra delay {m['extra_delay_mean_s']:.2f} s")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_demo(*, speed: float = 1.0, out: Path | None = None, data_dir: str | None = None,
             max_workers: int = DEMO_MAX_WORKERS, startup_s: float | None = None, trace_spec: str = DEMO_TRACE,
             tasks: Sequence[str] | int | None = None, batches: int | None = None, png: bool = True,
             replayer: Callable[..., dict[str, Any]] | None = None, say: Callable[[str], None] = print,
             worker_nice: int = DEMO_WORKER_NICE, worker_events: bool = False, backend: str = "local",
             backend_options: Mapping[str, Any] | None = None, tenants: int | None = None,
             shares: Mapping[str, FairShare] | None = None) -> tuple[dict[str, Any], Path | None]:
    """Run the demo (by default the bundled demo trace, whole); returns the report and the PNG's path.

    The demo's farm runs no Flower, so its workers send no Celery task events unless `worker_events`.
    `backend` "ray" (with `backend_options={"address": ...}`) puts the workers on a Ray cluster. `tenants`:
    the replayed tasks divided between that many tenants `t1`..`tN` (`live_replay.plan.split_tenants`), with
    `shares` by those names (1 each, no cap, unless given)."""
    startup = STARTUP_S[backend] if startup_s is None else startup_s
    backend_args = ["--ray-address", str(backend_options["address"])] if (backend_options or {}).get("address") else []
    trace = rp.select(tracefile.read(tracefile.resolve(trace_spec)), tasks, batches)
    if tenants is not None:
        trace = split_tenants(trace, tenants)
    options = rp.ReplayOptions(speed=speed, startup_s=startup, shares=dict(shares or {}))
    farm_shares(trace, options.shares)  # a share for a tenant the trace lacks: refused before the farm starts
    data_dir = data_dir or tempfile.mkdtemp(prefix="farm-demo-")
    out = Path(out) if out else Path(data_dir)
    queues = registry.get(options.pipeline).queues
    say(f"starting an embedded farm in {data_dir} (Redis, SQLite history, recorder, planner, local workers)")
    # A short lease: a killed worker's request is back in its queue within seconds of the trace's scale.
    settings = Settings(data_dir=data_dir, namespace="demo", lease_s=DEMO_LEASE_S)
    with EmbeddedFarm(settings=settings, workers_per_stage=0, backend_kind=backend,
                      backend_options=dict(backend_options or {})) as farm:
        redis = farm._redis()
        store = KnobStore(farm.engine, redis, farm.settings.namespace)
        store.save(demo_knobs(store.load(), queues, max_workers))
        with DaemonProcess(farm.settings, ["--backend", backend, *backend_args, "--startup-s", str(startup)],
                           env={"FARM_WORKER_NICE": str(worker_nice),
                                "FARM_WORKER_EVENTS": "1" if worker_events else "0"}) as daemon:
            daemon.wait_ready(redis, farm.settings.namespace)
            say(f"replaying {trace_spec!r}: {len(trace.tasks)} tasks, {len(trace.batches)} batches, "
                f"{trace.num_requests} requests, at speed {speed:g}")
            report = (replayer or rp.run)(farm.settings, farm.engine, trace, options)
        path = None
        if png:
            in_trace_time = Knobs.from_dict(report["knobs"])
            same_run = rp.same_run(options, report)
            ideal = rp.predict_result(trace, replace(in_trace_time, policy="ideal"), same_run)
            predicted = rp.predict_result(trace, in_trace_time, same_run)
            path = plot(out / "demo-workers.png", report, farm.engine, trace, ideal, predicted, options.pipeline)
        redis.close()
    return report, path
