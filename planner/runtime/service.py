"""Wiring the planner daemon to a real farm: Redis (live state, EBF keys, epochs, knobs), the history
store (history, decisions) and a backend. `farm planner` and the embedded farm call `run`."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import redis as redis_lib

from farm import registry
from farm.config import Settings, redis_url
from farm.knobs import Knobs, redis_key
from farm.protocol import counters, heartbeat
from farm.protocol.dispatch import Dispatch
from farm.protocol.heartbeat import Bound, Heartbeat, Pool, Startup
from farm.protocol.keys import Keys
from farm.protocol.live_knobs import knobs_now
from farm.store.decisions import DecisionRecord, save_decision
from farm.store.engine import open_store
from farm.store.knob_store import KnobStore
from planner.backends import STARTUP_S, create
from planner.policy.decide import decide
from planner.runtime.daemon import Daemon
from planner.runtime.epochs import RedisEpochs
from planner.runtime.live import LiveFarm
from planner.runtime.view import capacity_report

log = logging.getLogger("farm.planner")

@dataclass
class Planner:
    """A daemon with its connections; `close()` releases them and leaves the workers running."""

    daemon: Daemon
    settings: Settings
    redis: Any
    engine: Any
    backend: Any

    def close(self) -> None:
        for closer in (self.backend.close, self.redis.close, self.engine.dispose):
            try:
                closer()
            except Exception:
                log.warning("closing %s failed", closer, exc_info=True)


def pool_report(workers: Sequence[Any]) -> dict[str, Pool]:
    """Per stage, the backend's workers by state, and where they run (node -> workers in the pool)."""
    counts: dict[str, dict[str, Any]] = {}
    for w in workers:
        pool = counts.setdefault(w.stage, {"pending": 0, "starting": 0, "running": 0, "stopping": 0, "nodes": {}})
        state = getattr(w.state, "value", w.state)
        pool[state] += 1
        node = getattr(w, "node", "")
        if node and w.alive and state != "pending":
            pool["nodes"][node] = pool["nodes"].get(node, 0) + 1
    return {stage: Pool(**pool) for stage, pool in counts.items()}


def update_bound(bound: dict[str, Bound], records: Sequence[DecisionRecord]) -> None:
    """The stages held below their want, as each pipeline's latest decision (`records`) says: a pipeline
    decided again replaces all of its own."""
    for r in records:
        pipeline = r.details.get("pipeline")
        for q in [q for q in bound if q.partition(".")[0] == pipeline]:
            del bound[q]
        bound.update({q: Bound(**b) for q, b in (r.details.get("binding") or {}).items()})


def build(settings: Settings, *, backend: str | Any = "local", database_url: str | None = None,
          pipelines: Sequence[str] | None = None, startup_s: float | None = None, seed: int = 0,
          cold_workers: int = 0, backend_options: dict[str, Any] | None = None) -> Planner:
    client = redis_lib.Redis.from_url(redis_url(settings), decode_responses=True)
    engine = open_store(settings, url=database_url)
    if client.get(redis_key(settings.namespace)) is None:
        KnobStore(engine, client, settings.namespace).publish()  # workers and the daemon read the live copy

    def knobs() -> Knobs:
        return knobs_now(client, Keys(settings.namespace))  # afresh for every decision: `farm knobs set` counts at the next

    def timeout_for(stage: str) -> float:
        return registry.stage_timeout(stage, knobs())

    if isinstance(backend, str):
        kind = backend
        backend = create(backend, settings, timeout_for=timeout_for, **(backend_options or {}))
    else:
        kind = getattr(backend, "kind", "custom")
    dispatch = Dispatch(settings, client)

    def record(r: DecisionRecord) -> None:
        save_decision(engine, r)

    view = LiveFarm(settings, client, engine, pipelines=pipelines, backend=kind,
                    startup_s=STARTUP_S.get(kind, 2.0) if startup_s is None else startup_s)

    targets: dict[str, int] = {}  # per stage queue, the pool its pipeline's last decision asked for
    bound: dict[str, Bound] = {}  # per stage queue held below its want, by its pipeline's last decision

    def on_step(records: list[DecisionRecord]) -> None:
        tick = knobs().tick_s
        now = time.time()
        startups = {q: Startup(st.count, st.median_s, st.plan_s, st.max_s)
                    for q, st in view.startups(now).items()}  # `farm status` shows them
        if records:
            targets.update({q: int(n) for r in records for q, n in r.workers.items()})
        update_bound(bound, records)
        heartbeat.beat(client, settings.namespace,
                       Heartbeat(pid=os.getpid(), at=now, backend=kind, decisions=len(records),
                                 startup_s=view.startup_s, startups=startups, pools=pool_report(daemon.workers),
                                 targets=dict(targets), capacity=capacity_report(daemon.capacity),
                                 node_startup_s=daemon.capacity.node_startup_s, bound=dict(bound)),
                       ttl_s=max(3 * tick, 5.0))
        # every decision made, quiet ticks included: the metrics' planner_decision_seconds
        counters.observe_decisions(client, settings.namespace, [r.runtime_s for r in records])

    daemon = Daemon(view=view, backend=backend, decide=decide, knobs=knobs,
                    set_estimate=dispatch.set_estimate, record=record, seed=seed, cold_workers=cold_workers,
                    on_step=on_step, dump=snapshot_dumper(os.environ.get(DUMP_DIR_ENV)))
    return Planner(daemon, settings, client, engine, backend)


DUMP_DIR_ENV = "FARM_PLANNER_DUMP_DIR"  # a directory: every decision's snapshot, knobs and decision pickled there


def snapshot_dumper(directory: str | None):
    """With a directory (FARM_PLANNER_DUMP_DIR, off by default): a hook that pickles each decision's
    (snapshot, knobs, decision) there, one file per decision, to set a live decision beside a replay's."""
    if not directory:
        return None
    import itertools
    import pickle
    from pathlib import Path

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    seq = itertools.count()

    def dump(snapshot: Any, knobs: Knobs, decision: Any) -> None:
        (out / f"{next(seq):06d}.pkl").write_bytes(pickle.dumps((snapshot, knobs, decision)))

    return dump


def run(planner: Planner, stop: threading.Event | None = None, *, once: bool = False) -> None:
    """Serve until SIGTERM/SIGINT (or `stop`); with `once`, reconcile, decide once and return."""
    stop = stop or threading.Event()
    if once:
        planner.daemon.start()
        planner.daemon.step("once")
        return
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    wake = RedisEpochs(planner.redis, planner.settings.namespace)
    try:
        planner.daemon.serve(wake, stop)
    finally:
        wake.close()
        _clear_heartbeat(planner)


def _clear_heartbeat(planner: Planner) -> None:
    # a daemon that stops says so at once (`farm status`, `farm planner --retire-all`)
    try:
        heartbeat.clear(planner.redis, planner.settings.namespace, os.getpid())
    except redis_lib.RedisError:
        log.warning("could not clear the planner's heartbeat", exc_info=True)


def retire_all(planner: Planner, *, wait_s: float, poll_s: float = 0.5) -> list[str]:
    """Retire every worker of this farm on the planner's backend and wait until none is alive: what takes a
    farm down, since workers outlive a stopped daemon (so that a restarted one adopts them). Each retires as
    the daemon retires one (the stage's timeout plus a grace to finish its request). Returns the names of
    those still there (running or stopping) after `wait_s`, none when all are gone."""
    backend = planner.backend
    backend.reconcile()
    backend.retire([w.name for w in backend.list() if w.alive])
    deadline = time.monotonic() + wait_s
    while True:
        # every worker listed, stopping ones included, is still there; listing also observes the ends of
        # lives (and lets the docker backend remove the exited containers)
        left = sorted(w.name for w in backend.list())
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll_s)
