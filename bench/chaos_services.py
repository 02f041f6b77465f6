"""The services a chaos run restarts, each of its own on a free loopback port so that nothing else on the
machine is touched: a PostgreSQL cluster made for the run (Debian's binaries, run as the `postgres` user
when this is root, as PostgreSQL demands) and the worker killer. Redis is the embedded farm's own
(`EmbeddedFarm.restart_redis`)."""

from __future__ import annotations

import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")
    return found


class PrivatePostgres:
    """initdb in `folder`, trust authentication on 127.0.0.1:<port>; `restart(down_s)` stops it (fast
    shutdown: clients are cut off), waits, and starts it again on the same data."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.data = self.folder / "pgdata"
        self.port = free_port()
        self.url = f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *argv: str) -> None:
        done = subprocess.run([*self._as, *argv], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    def start(self) -> "PrivatePostgres":
        if not self.data.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            if self._as:
                shutil.chown(self.folder, "postgres", "postgres")
            self._run(_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "postgres.log"), "-w",
                  "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        return self

    def stop(self) -> None:
        if self.data.exists():
            self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self, down_s: float) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


class WorkerKiller:
    """Every `every_s`, `kill -9` one worker picked at random among those `list_pids()` names; counts kills."""

    def __init__(self, list_pids: Callable[[], list[int]], every_s: float, rng: random.Random) -> None:
        self.list_pids, self.every_s, self.rng = list_pids, every_s, rng
        self.kills = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-killer", daemon=True)

    def start(self) -> "WorkerKiller":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                pids = self.list_pids()
            except Exception:  # the farm's Redis restarting: the next round picks again
                continue
            if pids:
                try:
                    os.kill(self.rng.choice(pids), signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
