"""The local backend's launcher: a process that has imported a worker's modules once and forks each new
worker from itself, so a worker skips the interpreter's start and its imports (about two thirds of the
CPU a `farm worker` exec takes to be ready: on a small machine, a burst of new workers is ready in a
third of the time).

`python -m planner.backends.local.launcher_process` reads one JSON request a line on stdin and answers on stdout:

    {"name": N, "stage": S, "log": PATH, "pidfile": PATH, "env": {...}, "nice": 0, "events": true, "tether": false}
        -> {"name": N, "pid": PID}  or  {"name": N, "error": "why"}
    and, whenever a worker it forked exits: {"exited": PID, "at": EPOCH_SECONDS, "status": CODE}

This module is the backend's side, `Launcher`, which starts that process and speaks to it; the process
side (what a forked worker becomes) is planner.backends.local.launcher_process.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from farm.processes import end_by_stdin, python

log = logging.getLogger(__name__)

SPAWN_TIMEOUT_S = 30.0


class LauncherError(RuntimeError):
    """The launcher is gone or did not answer; the message says what happened."""


class Launcher:
    """The backend's handle on a launcher process: `spawn` forks a worker and returns its pid; exits of
    the workers it forked are reported through `on_exit(pid, at)`. Thread-safe; restarts the launcher
    when it died."""

    def __init__(self, log_path: Path, on_exit: Callable[[int, float], None]) -> None:
        self.log_path = Path(log_path)
        self.on_exit = on_exit
        self._lock = threading.Lock()  # one request at a time
        self._proc: subprocess.Popen | None = None
        self._answers: dict[str, dict] = {}
        self._answered = threading.Condition()

    def spawn(self, name: str, stage: str, *, log: Path, pidfile: Path, env: Mapping[str, str], nice: int = 0,
              events: bool = True, tether: bool = False, timeout_s: float = SPAWN_TIMEOUT_S) -> int:
        """`tether`: the worker ends with the launcher (which ends with this process: its stdin closes)."""
        request = {"name": name, "stage": stage, "log": str(log), "pidfile": str(pidfile), "env": dict(env),
                   "nice": nice, "events": bool(events), "tether": bool(tether)}
        with self._lock:
            proc = self._ensure()
            with self._answered:
                self._answers.pop(name, None)
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise LauncherError(f"the worker launcher (pid {proc.pid}) is gone: {exc}; "
                                    f"see {self.log_path}") from exc
            deadline = time.monotonic() + timeout_s
            with self._answered:
                while name not in self._answers:
                    left = deadline - time.monotonic()
                    if left <= 0 or proc.poll() is not None:
                        why = "did not answer" if proc.poll() is None else f"exited with {proc.returncode}"
                        raise LauncherError(f"the worker launcher (pid {proc.pid}) {why} while starting {name}; "
                                            f"see {self.log_path}")
                    self._answered.wait(min(left, 0.5))
                answer = self._answers.pop(name)
        if "error" in answer:
            raise LauncherError(f"the worker launcher could not start {name}: {answer['error']}")
        return int(answer["pid"])

    def start(self) -> None:
        """Start the launcher now (it imports for a moment) rather than at the first spawn."""
        with self._lock:
            self._ensure()

    def close(self) -> None:
        """Close the launcher's stdin: it exits, the workers it forked run on."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            end_by_stdin(proc, 5.0)

    def _ensure(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as err:
            proc = subprocess.Popen(python("-m", "planner.backends.local.launcher_process"), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, start_new_session=True, close_fds=True)
        self._proc = proc
        threading.Thread(target=self._read, args=(proc,), name="launcher-reader", daemon=True).start()
        return proc

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                log.warning("worker launcher said something unexpected: %r", line[:200])
                continue
            if "exited" in message:
                try:
                    self.on_exit(int(message["exited"]), float(message["at"]))
                except Exception:
                    log.exception("handling the exit of worker pid %s failed", message.get("exited"))
                continue
            with self._answered:
                self._answers[str(message.get("name"))] = message
                self._answered.notify_all()
        proc.wait()
        with self._answered:
            self._answered.notify_all()
