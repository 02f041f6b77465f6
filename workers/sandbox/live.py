"""The runs of one request being served (`Scope`), so that a worker can end them at once when it no longer
holds the request: its batch was cancelled (a trainer's cancel, an abandoned batch, a revoked tenant's
`--cancel`) or its lease was lost. Its outcome is discarded then, and a program left running would hold the
worker, and the pool's CPU, until its own time limit.

A stage worker opens a scope around the stage code (`scope()`, per thread); `run`, `spawn` and `call` register
what would end each of their programs while it runs (`tracked`). `Scope.end()`, from the worker's heartbeat
thread, kills every program registered and makes any later run of the scope fail before it starts
(`RunsEnded`), so a stage that runs its program once per test case stops at the first. A run that was live when
its scope ended raises RunsEnded too, once cleaned up: what a killed program left (a signal, a broken pipe) is
the farm's doing and must never become a verdict. Outside a scope (`farm score`, a test) nothing is registered.

A registration is removed under the scope's lock before its run's processes are reaped or its cgroup removed,
so an `end` never signals a pid that may have been reused.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


class RunsEnded(RuntimeError):
    """A run asked for in a scope that was ended: the request it serves is no longer this worker's."""


class Scope:
    """What ends the live runs of one request, and whether they were ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ends: dict[int, Callable[[], None]] = {}
        self._ids = itertools.count()
        self.ended = False

    def end(self) -> int:
        """Kill every live run of the scope and refuse later ones; how many were killed. Idempotent: the
        heartbeat calls it on every beat that finds the request gone, which also ends a run that was starting
        between two of them."""
        with self._lock:
            self.ended = True
            ends = list(self._ends.values())
            for end in ends:
                try:
                    end()
                except Exception:  # one run that cannot be ended must not spare the others
                    log.exception("sandbox: could not end a run of a request no longer held")
        return len(ends)

    def live(self) -> int:
        with self._lock:
            return len(self._ends)

    @contextlib.contextmanager
    def _tracking(self, end: Callable[[], None]) -> Iterator[None]:
        with self._lock:
            if self.ended:
                raise RunsEnded("the request this run serves is no longer held by this worker (its batch was "
                                "cancelled or its lease lost)")
            key = next(self._ids)
            self._ends[key] = end
        try:
            yield
        finally:
            with self._lock:  # waits for an `end` under way: the caller reaps and cleans up only after it
                del self._ends[key]
                ended = self.ended
            if ended:  # whatever the killed run returned or raised (a launch "failed") is the farm's doing
                raise RunsEnded("the run was ended: the request it serves is no longer held by this worker")


_current = threading.local()


@contextlib.contextmanager
def scope(s: Scope | None = None) -> Iterator[Scope]:
    """`s` (a new scope by default) holds the runs this thread starts until the block ends; scopes do not nest."""
    if getattr(_current, "scope", None) is not None:
        raise RuntimeError("a sandbox scope is already open on this thread")
    s = _current.scope = s if s is not None else Scope()
    try:
        yield s
    finally:
        _current.scope = None


@contextlib.contextmanager
def tracked(end: Callable[[], None]) -> Iterator[None]:
    """Registers `end` (what kills one run's programs, from any thread, without waiting) with this thread's scope
    for the block; RunsEnded at once if the scope was ended. Without a scope, nothing."""
    s = getattr(_current, "scope", None)
    if s is None:
        yield
        return
    with s._tracking(end):
        yield
