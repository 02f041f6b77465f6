"""The launcher process (`python -m planner.backends.local.launcher_process`) that a `Launcher` starts and speaks
to (planner.backends.local.launcher gives the protocol): it imports what a worker needs once, then forks each
worker it is asked for.

A forked worker is exactly a `farm worker --stage S --name N` (same code, `workers.process.serve`) in a
session of its own, with its output in its `log` and its pid in `pidfile` (the backend finds a worker by it
when a daemon died between asking and recording). The launcher keeps no thread, so forking is safe, and
it exits when its stdin closes; the workers it forked run on (they are in their own sessions) and the
next backend re-adopts them from their records like any other, unless they were asked for tethered: those
end with the launcher.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Mapping

from farm.processes import nice_session, tether
from workers.process import serve
from workers.stage import kind_queues_of

# imported before any fork: what every worker needs to reach Celery's worker_ready
PRELOAD = (
    "farm.registry", "farm.celery_app", "farm.config", "workers.process", "workers.stage",
    "celery.apps.worker", "celery.worker.consumer", "celery.worker.components", "celery.worker.strategy",
    "celery.concurrency.prefork", "celery.concurrency.asynpool", "celery.app.trace", "celery.events.dispatcher",
    "kombu.transport.redis", "billiard.pool",
)


def main() -> int:
    for module in PRELOAD:
        importlib.import_module(module)
    out = sys.stdout
    children: set[int] = set()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD writes to the wakeup fd
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C for the daemon is not for its launcher
    stdin_fd = sys.stdin.fileno()
    sel = selectors.DefaultSelector()
    sel.register(stdin_fd, selectors.EVENT_READ, "in")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    inherited = (wake_r, wake_w, stdin_fd, out.fileno(), *_selector_fd(sel))
    pending = b""

    def say(message: Mapping[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                return
            if pid == 0:
                return
            children.discard(pid)
            say({"exited": pid, "at": time.time(), "status": os.waitstatus_to_exitcode(status)})

    while True:
        for key, _ in sel.select():
            if key.data == "wake":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap()
                continue
            chunk = os.read(stdin_fd, 65536)
            if not chunk:
                return 0  # the backend went away: so do we (our workers stay)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                    pid = _fork_worker(request, inherited)
                except Exception as exc:  # answered, never fatal: the next request may be fine
                    say({"name": _name_of(line), "error": f"{type(exc).__name__}: {exc}"})
                    continue
                children.add(pid)
                say({"name": request["name"], "pid": pid})
        reap()


def _selector_fd(sel: selectors.BaseSelector) -> tuple[int, ...]:
    try:
        return (sel.fileno(),)  # epoll, kqueue: an fd of their own
    except (AttributeError, NotImplementedError):
        return ()


def _name_of(line: bytes) -> str | None:
    try:
        return json.loads(line).get("name")
    except (ValueError, AttributeError):
        return None


def _fork_worker(request: Mapping[str, Any], close_fds: tuple[int, ...]) -> int:
    name, stage, log_path = request["name"], request["stage"], request["log"]
    # the pipelines' modules load here, once, for every later fork: the stage's, and every pipeline's for the
    # queues of its resource kind
    kind_queues_of(stage)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    launcher = os.getpid()
    sync_r, sync_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (log_fd, sync_r, sync_w):
            os.close(fd)
        raise
    if pid:
        # answer only once the child leads its own session: from then on the backend may signal its group
        os.close(log_fd)
        os.close(sync_w)
        try:
            os.read(sync_r, 1)  # b"" if it died first: the exit notice follows
        finally:
            os.close(sync_r)
        return pid
    # the child: become `farm worker --stage S --name N`
    code = 1
    try:
        os.setsid()
        if request.get("tether"):
            tether(launcher)  # we are single-threaded: the thread that forked is the launcher's only one
        _name_process("farm worker")
        os.close(sync_r)
        if request.get("pidfile"):
            Path(request["pidfile"]).write_text(str(os.getpid()))
        os.write(sync_w, b"1")
        os.close(sync_w)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        for fd in {devnull, log_fd, *close_fds}:
            if fd > 2:
                try:
                    os.close(fd)
                except OSError:
                    pass
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.update(request.get("env") or {})
        nice = int(request.get("nice") or 0)
        if nice:
            os.nice(nice)
            nice_session(os.getpid(), nice)
        code = serve(stage, name, loglevel=request.get("loglevel", "INFO"), events=request.get("events", True))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _name_process(title: str) -> None:
    """The short name `ps -o comm`, `top` and `pgrep` (without -f) show; the full command line stays the
    launcher's (`python -m planner.backends.local.launcher_process`): a forked process cannot change it."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(title[:15])
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
