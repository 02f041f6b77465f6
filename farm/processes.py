"""The farm's processes as the operating system knows them: a process's start time (a pid with another
start time is another process), finding one by its command line or its process group, the local workers'
niceness; and how the farm starts a Python child (`python`) and ties a child's life to its parent's
(`die_with_parent`, `popen_tethered`), and what starts processes and stops them when its `with` block ends
(`Started`).

Neutral ground: the local backend and its launcher use it for their workers, the embedded farm for its
Redis, Flower and planner, and the next farm of a data dir to end what a killed one left (farm.app.leftovers).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from queue import SimpleQueue
from typing import Any, Callable, Mapping

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
TETHER_ENV = "FARM_WORKER_TETHER"  # "1": local workers end with the process that started them (`farm up` sets it)


class Started:
    """What runs processes between `start()` and `stop()`: `with` it, it is started, and whatever a start that failed
    part way had already started is stopped (the embedded farm; the benches' farms and servers)."""

    def start(self) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def python(*args: str) -> list[str]:
    """The command line of a Python child of the interpreter running this process, `python -P ARGS`.

    `-P` (3.11's safe path) keeps the current directory off the child's sys.path: `python -c` would put
    `''` first and `python -m` the current directory, so a directory named `farm` (or `celery`) where the
    farm was started would shadow the installed package in every process the farm starts."""
    return [sys.executable, "-P", *args]


def end_by_stdin(proc: subprocess.Popen, timeout_s: float) -> None:
    """End a child that serves requests on its stdin (a launcher, a Ray driver): close its stdin, give it
    `timeout_s` to finish on its own, then kill it."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def tether(parent: int, signum: int = signal.SIGTERM) -> bool:
    """Have this process sent `signum` when its parent `parent` dies (Linux's PR_SET_PDEATHSIG); False
    where that cannot be had. Call it in the child, right after the fork: a parent already gone by then
    never signals, so then the signal comes at once."""
    prctl = _prctl()
    if prctl is None or prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)
    return True


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` for `subprocess.Popen` that tethers the child to this process (None where tethering
    is not available): a `kill -9` of this process then ends the child too.

    Linux sends the signal when the *thread* that forked the child exits, not the process: start
    tethered children from a thread that lives as long as the process (the main thread)."""
    prctl = _prctl()  # looked up here: the child, forked from a threaded parent, should only call it
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return preexec


class _Forker:
    """One daemon thread, started on first use, that lives as long as the process: children tethered from
    it get their signal when the process dies, never because the thread that asked for them ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: SimpleQueue = SimpleQueue()
        self._thread: threading.Thread | None = None

    def popen(self, argv: list[str], kwargs: dict[str, Any]) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="tethered-forker", daemon=True)
                self._thread.start()
        done: Future = Future()
        self._jobs.put((argv, kwargs, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            argv, kwargs, done = self._jobs.get()
            try:
                done.set_result(subprocess.Popen(argv, **kwargs))
            except BaseException as exc:  # handed to the caller, the forker goes on
                done.set_exception(exc)


_forker = _Forker()


def popen_tethered(argv: list[str], signum: int = signal.SIGTERM, **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **kwargs)` of a child that gets `signum` when this process dies, whichever
    thread asks: from a thread other than the main one the fork happens on a thread that lives as long as
    the process, since Linux signals when the forking *thread* ends (a restart made from a short-lived
    thread would otherwise end the restarted child with that thread)."""
    kwargs["preexec_fn"] = die_with_parent(signum)
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(argv, **kwargs)
    return _forker.popen(argv, kwargs)


def worker_nice(nice: int | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The niceness of local workers: `nice`, else FARM_WORKER_NICE, else 0; a whole number 0-19."""
    source = "nice"
    if nice is None:
        raw = (os.environ if environ is None else environ).get("FARM_WORKER_NICE", "").strip()
        if not raw:
            return 0
        source = "FARM_WORKER_NICE"
        try:
            nice = int(raw)
        except ValueError:
            raise ValueError(f"{source}={raw!r}: the workers' niceness must be a whole number 0-19") from None
    if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
        raise ValueError(f"{source}={nice!r}: the workers' niceness must be a whole number 0-19")
    if nice and shutil.which("nice") is None:
        raise ValueError(f"{source}={nice}: lowering the workers' priority needs the `nice` command on PATH")
    return nice


def nice_session(pid: int, nice: int) -> None:
    """Lower the priority of a worker's session too. Under Linux's autogroup scheduling (the default on
    desktops and many servers) every session is its own scheduling group and `nice` counts only within
    it: each worker, in a session of its own, would still get as much CPU as all the farm's other
    processes together. The autogroup's own nice value is what counts between sessions."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass  # no autogroup scheduling here (or no /proc): the process's own nice is all there is


def process_start(pid: int) -> str | None:
    """The start time of a live process as an opaque token; None when there is none (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return _ps_start(pid)
    fields = stat[stat.rindex(b")") + 2:].split()
    if fields[0] in (b"Z", b"X"):  # exited, waiting for its parent to reap it
        return None
    return fields[19].decode()  # field 22 of proc(5): start time in clock ticks since boot


def _ps_start(pid: int) -> str | None:
    """Where there is no /proc (macOS): the start time `ps` prints."""
    out = subprocess.run(["ps", "-o", "lstart=,stat=", "-p", str(pid)], capture_output=True, text=True)
    line = out.stdout.strip()
    if out.returncode != 0 or not line or line.split()[-1].startswith("Z"):
        return None
    return " ".join(line.split()[:-1])


def _read_each_process(filename: str):
    """(pid, bytes of /proc/<pid>/<filename>) for every process still readable; nothing where there is no /proc."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            data = (entry / filename).read_bytes()
        except OSError:  # it exited while we listed, or it is not ours to read
            continue
        yield int(entry.name), data


def cmdline(pid: int) -> bytes:
    """The command line of a process, its arguments joined by NULs; b"" when it cannot be read."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def find_by_cmdline(name: str) -> int | None:
    """The pid of a process whose command line names this worker (for a record the pid never reached)."""
    needle = b"\0--name\0" + name.encode() + b"\0"
    return next((pid for pid, cmdline in _read_each_process("cmdline") if needle in b"\0" + cmdline), None)


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group (from /proc; none where there is no /proc)."""
    members = []
    for pid, stat in _read_each_process("stat"):
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:  # state, ppid, pgrp
            members.append(pid)
    return members
