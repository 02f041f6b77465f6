"""The ray backend's side of its driver process (planner.backends.ray.driver): start it, ask it, and
start it again when it died (the cluster went away and took the driver with it, or it was killed).

Thread-safe: one request at a time. A call that cannot be answered raises BackendError with what
happened, so the daemon logs it and tries again at its next epoch, serving with the workers it has.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from planner.backends import BackendError
from farm.processes import end_by_stdin, python

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 60.0  # ray.init of a head of our own takes seconds; of a remote cluster, less
CALL_TIMEOUT_S = 30.0
RETRY_AFTER_S = 2.0  # after a failed start, the next call waits this long before trying again


class Bridge:
    def __init__(self, address: str, namespace: str, log_path: Path) -> None:
        self.address = address
        self.namespace = namespace
        self.log_path = Path(log_path)
        self.info: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._ids = 0
        self._failed_at = float("-inf")
        self._last_error = ""

    def connect(self) -> dict[str, Any]:
        """Start the driver now, so a wrong address fails at start with its reason."""
        with self._lock:
            self._ensure(force=True)
            return dict(self.info)

    def call(self, op: str, timeout_s: float = CALL_TIMEOUT_S, **args: Any) -> Any:
        with self._lock:
            proc = self._ensure()
            self._ids += 1
            request = {"id": self._ids, "op": op, **args}
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                self._drop(f"the Ray driver (pid {proc.pid}) is gone: {exc}", proc)
            answer = self._read(proc, timeout_s, f"{op} call")
            if answer.get("id") != request["id"]:
                self._drop(f"the Ray driver answered {answer!r} to {op} call {request['id']}", proc)
            if "error" in answer:
                raise BackendError(f"Ray could not {op}: {answer['error']}")
            return answer.get("ok")

    def close(self) -> None:
        """Close the driver's stdin: it disconnects and exits; detached worker actors run on."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            end_by_stdin(proc, 15.0)

    def _ensure(self, force: bool = False) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if not force and time.monotonic() - self._failed_at < RETRY_AFTER_S:
            raise BackendError(f"the Ray cluster is unreachable ({self._last_error}); trying again shortly")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as err:
            proc = subprocess.Popen(python("-m", "planner.backends.ray.driver", self.address, self.namespace),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                    bufsize=1, start_new_session=True, close_fds=True)
        self._proc = proc
        try:
            first = self._read(proc, CONNECT_TIMEOUT_S, "connection")
        except BackendError as exc:
            self._failed_at, self._last_error = time.monotonic(), str(exc)
            raise
        if "ready" not in first:
            self._proc = None
            proc.wait(timeout=10)
            self._failed_at, self._last_error = time.monotonic(), first.get("error", repr(first))
            raise BackendError(self._last_error)
        self.info = first["ready"]
        log.info("ray backend connected to %s (driver pid %d)", self.info.get("address"), proc.pid)
        return proc

    def _read(self, proc: subprocess.Popen, timeout_s: float, what: str) -> dict[str, Any]:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        if reader.is_alive():
            self._drop(f"the Ray driver did not answer its {what} within {timeout_s:g} s; see {self.log_path}", proc)
        if not line or not line[0]:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self._drop(f"the Ray driver exited with status {proc.returncode} during its {what} "
                       f"(the cluster may be gone); see {self.log_path}", proc)
        try:
            return json.loads(line[0])
        except ValueError:
            self._drop(f"the Ray driver said something unexpected: {line[0][:200]!r}; see {self.log_path}", proc)

    def _drop(self, why: str, proc: subprocess.Popen | None = None):
        """Forget the driver (killed, if it still runs: it is out of step); the next call starts another."""
        self._proc = None
        if proc is not None and proc.poll() is None:
            proc.kill()
        raise BackendError(why)
