"""Real `farm worker` processes for a test's `settings` (its namespace and Redis), killed at teardown.

    def test_something(settings, start_workers):
        [w] = start_workers("synthetic.compile")
        w.kill()  # kill -9 of the worker and its pool process
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from farm.config import Settings

READY_TIMEOUT_S = 30.0
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass
class WorkerProcess:
    name: str
    queue: str
    proc: subprocess.Popen
    log: Path
    killed: bool = field(default=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """kill -9 of the worker's whole process group (Celery's main process and its pool process)."""
        if not self.killed:
            self.killed = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def worker_env(settings: Settings, **env: str) -> dict[str, str]:
    out = dict(os.environ)
    out.update({
        "FARM_REDIS_URL": settings.redis_url or "",
        "FARM_BROKER_URL": settings.broker_url or "",
        "FARM_NAMESPACE": settings.namespace,
        "FARM_LEASE_S": str(settings.lease_s),
        "FARM_MAX_PAYLOAD_BYTES": str(settings.max_payload_bytes),
        "FARM_DATA_DIR": settings.data_dir,
    })
    out.update({k: str(v) for k, v in env.items()})
    return out


def spawn_worker(settings: Settings, queue: str, name: str, log: Path, *, events: bool = False,
                 imports: tuple[str, ...] = (), **env: str) -> WorkerProcess:
    cmd = [sys.executable, "-c", "from farm.app.cli import main; main()", "worker", "--stage", queue, "--name", name,
           "--loglevel", "INFO", "--events" if events else "--no-events"]
    for module in imports:
        cmd += ["--import", module]
    environ = worker_env(settings, **env)
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), str(HERE), environ.get("PYTHONPATH", "")) if p)
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ, cwd=ROOT,
                                start_new_session=True)
    return WorkerProcess(name, queue, proc, log)


def wait_ready(settings: Settings, workers: list[WorkerProcess], timeout: float = READY_TIMEOUT_S) -> None:
    """Until each worker announced itself (worker_ready writes its `seen` entry)."""
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        deadline = time.monotonic() + timeout
        waiting = list(workers)
        while waiting:
            waiting = [w for w in waiting if not r.hexists(f"{settings.namespace}:q:{w.queue}:seen", w.name)]
            for w in waiting:
                if w.proc.poll() is not None:
                    raise RuntimeError(f"worker {w.name} exited with {w.proc.returncode}:\n{w.log_tail()}")
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"workers {[w.name for w in waiting]} not ready after {timeout} s:\n"
                                   + "\n".join(w.log_tail() for w in waiting))
            if waiting:
                time.sleep(0.05)
    finally:
        r.close()


@pytest.fixture
def start_workers(settings, tmp_path):
    """start_workers(queue, count=1, *, events=False, imports=(), **env) -> [WorkerProcess], ready to serve.

    `imports`: modules the worker imports first (e.g. one registering a test pipeline); `env`: extra
    environment variables."""
    started: list[WorkerProcess] = []

    def start(queue: str, count: int = 1, *, events: bool = False, imports: tuple[str, ...] = (),
              **env: str) -> list[WorkerProcess]:
        batch = []
        for _ in range(count):
            name = f"{queue}-w{len(started)}"
            w = spawn_worker(settings, queue, name, tmp_path / f"{name}.log", events=events, imports=imports, **env)
            started.append(w)
            batch.append(w)
        wait_ready(settings, batch)
        return batch

    yield start
    for w in started:
        w.kill()


@pytest.fixture
def script_dispatch(redis_url):
    """The farm's scripts on a namespace of their own with hour-long leases (no worker runs: a test plays them);
    every key of it is deleted afterwards."""
    import uuid

    from farm.protocol.dispatch import Dispatch

    ns = f"sd{uuid.uuid4().hex[:10]}"
    d = Dispatch(Settings(redis_url=redis_url, namespace=ns, lease_s=3600.0))
    yield d
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"{ns}*", count=1000):
        client.delete(key)
    client.close()
    d.close()


@pytest.fixture
def reward_client(settings):
    from farm.client.sync import RewardClient

    c = RewardClient(settings)
    yield c
    c.close()
    # kombu keeps queue bindings outside the namespace's prefix
    r = redis.Redis.from_url(settings.redis_url)
    for key in r.scan_iter(match=f"_kombu.binding*.{settings.namespace}.*", count=1000):
        r.delete(key)
    r.close()


@pytest.fixture
def engine(postgres_url):
    """A history store migrated to head on a fresh PostgreSQL database."""
    from tests.integration.store_support import migrated_engine

    engine = migrated_engine(postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture
def emit(redis_url, namespace):
    """Writes history events to the test namespace's stream, as workers and clients do."""
    from tests.integration.store_support import Emitter

    emitter = Emitter(redis_url, namespace)
    yield emitter
    emitter.close()
