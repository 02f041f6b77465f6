"""`farm planner` as a child process of this one: how the embedded farm, the demo and the tests run the daemon."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence

from farm.config import Settings
from farm.processes import popen_tethered, python
from farm.protocol import heartbeat
from planner.backends.common import worker_env


class DaemonProcess:
    """`farm planner` as a child process of this one (the embedded farm, the demo, the tests).

    It runs in its own session, so a signal to this process group does not reach it; `stop()` sends
    SIGTERM (the daemon leaves its workers running), `kill()` is a `kill -9`. It gets SIGTERM too when this
    process dies (Linux), whichever thread creates it (`popen_tethered`)."""

    def __init__(self, settings: Settings, args: Sequence[str] = (), *, log_path: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        """`env` adds to the daemon's environment (for example FARM_WORKER_NICE for the local backend)."""
        env = {**os.environ, **worker_env(settings), "FARM_DATA_DIR": str(settings.data_dir), **(env or {})}
        path = Path(log_path) if log_path else Path(os.path.expanduser(settings.data_dir)) / "planner.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = path
        with open(path, "ab") as out:
            self.proc = popen_tethered(python("-m", "farm.app.cli.planner", *args), env=env,
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> int | None:
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
        deadline = time.monotonic() + timeout_s
        while True:
            beat = heartbeat.read(redis, namespace)
            if beat and beat.pid == self.pid:
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
