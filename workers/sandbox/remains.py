"""What is left of a run once every program of it was sent SIGKILL: its launcher to reap, its cgroup to remove, its
working directory to unmount, its uid to give back. A worker leaves these behind (`leave`) and goes on to its next
request, so the next request does not wait while the kernel tears down the last one's namespaces (issue 34: ending
a function problem's sandbox was 3.7 ms, and its cleanup 0.6, of a 34 ms judgement that holds the worker).

Safe because nothing of the run executes again once it is left here: its processes have SIGKILL pending, and its
uid stays leased (so no later run gets that uid, nor its keyring or process count) until its remains are gone. A
run's working directory and cgroup are its own by name, so a later run never sees them either.

One reaper thread per process, started on first use. At most `PENDING` remains wait: a worker whose remains do not
go (a cgroup that stays busy for its removal's two seconds) waits for them itself rather than pile up uids. A fork
starts its child with no remains (the parent reaps its own; every fork the farm makes closes its descriptors or
execs), and an exiting interpreter reaps what is left first (`settle`).
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)

PENDING = 4  # remains waiting at most, per process: a run's uid is held until its remains are gone
SETTLE_S = 10.0  # what an exiting process waits for its remains at most


@dataclass
class Remains:
    """One run's remains: `steps` in order (each failure is logged, the rest still run), then `release` (the uid)."""

    steps: tuple[Callable[[], object], ...]
    release: Callable[[], None]

    def reap(self) -> None:
        try:
            for step in self.steps:
                try:
                    step()
                except Exception:  # one step that fails must not keep the others (and the uid) from going
                    log.exception("sandbox: could not clear a run's remains")
        finally:
            self.release()


class Reaper:
    """The thread that reaps the remains of this process's runs, one after another, behind the worker."""

    def __init__(self, pending: int = PENDING) -> None:
        self._limit = pending
        self._cond = threading.Condition()
        self._queue: collections.deque[Remains] = collections.deque()
        self._current: Remains | None = None  # the one the thread took off the queue and reaps
        self._thread: threading.Thread | None = None

    def leave(self, remains: Remains) -> None:
        """Hands over one run's remains; waits only while `PENDING` others do."""
        with self._cond:
            while len(self._queue) >= self._limit:
                self._cond.wait()
            self._queue.append(remains)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="farm-sandbox-reaper", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def settle(self, timeout_s: float | None = None) -> bool:
        """Waits until every remains handed over is gone; False if some are left after `timeout_s`."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and self._current is None, timeout_s)

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + (self._current is not None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue))
                remains = self._current = self._queue.popleft()
                self._cond.notify_all()  # room for one more
            try:
                remains.reap()
            except Exception:  # the thread must outlive any one run's remains, or every later run would wait on it
                log.exception("sandbox: could not give back a run's uid")
            finally:
                with self._cond:
                    self._current = None
                    self._cond.notify_all()

    def _forked(self) -> None:
        """In a fork's child: the parent's remains are the parent's to reap. Their descriptors are left alone: the
        reaper may have closed one a moment before the fork, and its number be another's now."""
        self._cond = threading.Condition()
        self._queue = collections.deque()
        self._current, self._thread = None, None


_reaper = Reaper()
os.register_at_fork(after_in_child=lambda: _reaper._forked())
atexit.register(lambda: _reaper.settle(SETTLE_S))


def leave(remains: Remains) -> None:
    _reaper.leave(remains)


def settle(timeout_s: float | None = None) -> bool:
    """Waits for this process's runs' remains to be gone (a test that looks for what a run left; an exit)."""
    return _reaper.settle(timeout_s)


def pending() -> int:
    return _reaper.pending()
