"""Wiring the planner daemon to a real farm: Redis (live state, EBF keys, epochs, knobs), the history
store (history, decisions) and a backend. `farm planner` and the embedded farm call `run`."""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from farm.config import Settings
from farm.knobs import Knobs, from_json, redis_key
from planner.daemon import Daemon, DecisionRecord, RedisEpochs

log = logging.getLogger("farm.planner")

# How long a new worker takes to take requests, per backend, until the workers' own lives show it
# (planner.live reads the observed median and plans with the longer of the two); the policy starts
# workers this much ahead of need. local: a worker forked by the launcher is ready in 0.2-0.6 s on an
# idle 2-core machine, a burst of 24 in 1.5-2.5 s (bench/fidelity.py's runs); docker: a container start.
STARTUP_S = {"local": 1.0, "docker": 5.0, "fake": 0.0}


def heartbeat_key(namespace: str) -> str:
    """Where a running daemon says it is alive after every epoch (JSON: pid, at, backend), expiring after 3 ticks."""
    return f"{namespace}:planner"


def planner_alive(redis: Any, namespace: str) -> dict[str, Any] | None:
    """The heartbeat of the daemon serving this namespace, or None when none runs."""
    import json

    raw = redis.get(heartbeat_key(namespace))
    return json.loads(raw) if raw else None


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


def build(settings: Settings, *, backend: str | Any = "local", database_url: str | None = None,
          pipelines: Sequence[str] | None = None, startup_s: float | None = None, seed: int = 0,
          cold_workers: int = 0, backend_options: dict[str, Any] | None = None) -> Planner:
    import redis as redis_lib

    from farm.dispatch import Dispatch, redis_url
    from farm.store.decisions import record_decision
    from farm.store.engine import open_store
    from farm.store.knob_store import KnobStore
    from planner.backends import create
    from planner.live import LiveFarm
    from planner.policy import decide

    client = redis_lib.Redis.from_url(redis_url(settings), decode_responses=True)
    engine = open_store(settings, url=database_url)
    if client.get(redis_key(settings.namespace)) is None:
        KnobStore(engine, client, settings.namespace).publish()  # workers and the daemon read the live copy

    def knobs() -> Knobs:
        return from_json(client.get(redis_key(settings.namespace)))

    def timeout_for(stage: str) -> float:
        override = knobs().stage(stage).timeout_s
        if override is not None:
            return override
        from farm import registry

        return registry.stage_by_queue(stage)[1].timeout_s

    if isinstance(backend, str):
        kind = backend
        backend = create(backend, settings, timeout_for=timeout_for, **(backend_options or {}))
    else:
        kind = getattr(backend, "kind", "custom")
    dispatch = Dispatch(settings, client)

    def record(r: DecisionRecord) -> None:
        record_decision(engine, at=r.at, reason=r.reason, policy=r.policy, workers=r.workers,
                        runtime_s=r.runtime_s, estimates=r.estimates, details=dict(r.details))

    heartbeat = heartbeat_key(settings.namespace)

    def on_step(records: list[DecisionRecord]) -> None:
        import json
        import os
        import time

        tick = knobs().tick_s
        client.set(heartbeat, json.dumps({"pid": os.getpid(), "at": time.time(), "backend": kind,
                                          "decisions": len(records)}), px=int(max(3 * tick, 5.0) * 1000))

    view = LiveFarm(settings, client, engine, pipelines=pipelines,
                    startup_s=STARTUP_S.get(kind, 2.0) if startup_s is None else startup_s)
    daemon = Daemon(view=view, backend=backend, decide=decide, knobs=knobs,
                    set_estimate=dispatch.set_estimate, record=record, seed=seed, cold_workers=cold_workers,
                    on_step=on_step)
    return Planner(daemon, settings, client, engine, backend)


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


class DaemonProcess:
    """`farm planner` as a child process of this one (the embedded farm, the demo, the tests).

    It runs in its own session, so a signal to this process group does not reach it; `stop()` sends
    SIGTERM (the daemon leaves its workers running), `kill()` is a `kill -9`."""

    def __init__(self, settings: Settings, args: Sequence[str] = (), *, log_path: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        """`env` adds to the daemon's environment (for example FARM_WORKER_NICE for the local backend)."""
        import os
        import subprocess
        import sys
        from pathlib import Path

        from planner.backends.common import worker_env

        env = {**os.environ, **worker_env(settings), "FARM_DATA_DIR": str(settings.data_dir), **(env or {})}
        path = Path(log_path) if log_path else Path(os.path.expanduser(settings.data_dir)) / "planner.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = path
        with open(path, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "farm.cli.planner", *args], env=env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> int | None:
        import subprocess

        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode

    def wait_ready(self, redis: Any, namespace: str, timeout_s: float = 60.0) -> None:
        """Block until this daemon has made its first epoch (it listens for batch events from then on)."""
        import time

        deadline = time.monotonic() + timeout_s
        while True:
            beat = planner_alive(redis, namespace)
            if beat and beat.get("pid") == self.pid:
                return
            if not self.alive():
                raise RuntimeError(f"the planner daemon exited ({self.proc.returncode}): see {self.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the planner daemon did not start in {timeout_s:g} s: see {self.log_path}")
            time.sleep(0.2)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=5)

    def __enter__(self) -> "DaemonProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
