"""The interface every cgroup version implements (`Hierarchy`: make a run's group, limit it, kill everything in
it, read what it used, remove it) and a run's group (`RunGroup`), with the small file helpers both versions use."""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from typing import Callable

log = logging.getLogger("workers.sandbox.cgroups")


class CgroupsUnavailable(RuntimeError):
    """This machine offers no cgroup hierarchy the sandbox can write to."""


class RunGroup:
    """One run's group (one directory per hierarchy); `join_fds` are opened for the launcher to write its pid."""

    def __init__(self, hierarchy: "Hierarchy", paths: tuple[str, ...]) -> None:
        self.hierarchy, self.paths = hierarchy, paths
        self.join_fds: tuple[int, ...] = tuple(
            os.open(os.path.join(p, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC) for p in paths)

    def admit(self, pid: int) -> None:
        """Moves a process into the group (bubblewrap's, while it waits to start the program)."""
        for fd in self.join_fds:
            os.write(fd, str(pid).encode())

    def close_fds(self) -> None:
        for fd in self.join_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.join_fds = ()

    def pids(self) -> list[int]:
        found: set[int] = set()
        for p in self.paths:
            try:
                with open(os.path.join(p, "cgroup.procs")) as fh:
                    found.update(int(line) for line in fh if line.strip())
            except FileNotFoundError:
                pass
        return sorted(found)

    def kill(self) -> None:
        """SIGKILL every process of the run, including any that left the launcher's process group."""
        if self.pids():  # most runs have ended by now: no freezing, no listing twice
            self.hierarchy.kill(self)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the run at its memory limit."""
        return self.hierarchy.oom_killed(self)

    def remove(self, wait_s: float = 2.0) -> bool:
        """Kills what is left and removes the group; False (and a log line) when it stays busy: the sweep
        of the next worker start takes it then."""
        self.close_fds()
        deadline = time.monotonic() + wait_s
        pause = 0.0005  # killed processes take a moment to go: a run's cleanup waits that long, not 10 ms
        for path in self.paths:
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.error("sandbox: cannot remove cgroup %s: %s", path, exc)
                        return False
                    self.kill()
                    time.sleep(pause)
                    pause = min(2 * pause, 0.01)
        return True


def write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def counted(text: str, key: str) -> int:
    """A counter from a flat-keyed cgroup file (`oom_kill 2`)."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def kill_listed(group: RunGroup) -> None:
    """For a group that is not frozen: a process may fork between the read and the kill, and a killed one may
    exit and its pid be reused by such a child, so the group is read again until it is empty."""
    for _ in range(100):
        pids = group.pids()
        if not pids:
            return
        _kill(pids)


def kill_frozen(group: RunGroup) -> None:
    """For a frozen group (every task of it frozen, so none is inside a fork): once a read lists no pid that was
    not killed already, every process of the group has been sent SIGKILL. Frozen, a killed process stays listed (it
    dies once thawed) and its pid cannot be reused meanwhile, so reading until the group is empty, as `kill_listed`
    does, would spin (up to its 100 reads, three files each) for nothing: about a run in three ended that way."""
    killed: set[int] = set()
    for _ in range(100):
        fresh = [pid for pid in group.pids() if pid not in killed]
        if not fresh:
            return
        _kill(fresh)
        killed.update(fresh)


def kill_freezing(group: RunGroup, freeze: Callable[[bool], None], frozen: Callable[[], bool]) -> None:
    """Kill a group while its freezer holds it (`freeze(True)` starts freezing, `frozen()` says every task is):
    frozen, no task is inside a fork and one pass kills all (`kill_frozen`); still freezing after `settled`'s wait
    (a task in an uninterruptible sleep), one may be, so the group is read until it is empty (`kill_listed`).
    Thawed at the end either way: killed processes die once thawed."""
    freeze(True)
    try:
        if settled(frozen):
            kill_frozen(group)
        else:
            kill_listed(group)
    finally:
        freeze(False)


def settled(check: Callable[[], bool], wait_s: float = 0.05) -> bool:
    """Whether `check` holds within `wait_s` (looked at every 0.2 ms): a freezer's state once asked to freeze."""
    deadline = time.monotonic() + wait_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    return True


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Hierarchy:
    """A cgroup version on this machine: where the sandbox's groups go and how a run's group is made."""

    version = 0

    def __init__(self, parents: tuple[str, ...]) -> None:
        self.parents = parents  # the directory that holds the runs' groups, one per hierarchy

    def describe(self) -> str:
        return f"cgroup v{self.version} at {', '.join(self.parents)}"

    def create(self, name: str, memory_bytes: int | None, pids: int) -> RunGroup:
        paths = []
        try:
            for parent in self.parents:
                path = os.path.join(parent, name)
                os.mkdir(path, 0o755)
                paths.append(path)
            self._limit(tuple(paths), memory_bytes, pids)
            return RunGroup(self, tuple(paths))
        except BaseException:
            for path in paths:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            raise

    def stale(self) -> list[str]:
        """Names of run groups under the parent (a killed worker's runs leave theirs)."""
        try:
            return sorted(n for n in os.listdir(self.parents[0]) if n.startswith("run-"))
        except FileNotFoundError:
            return []

    def adopt(self, name: str) -> RunGroup:
        group = RunGroup.__new__(RunGroup)
        group.hierarchy, group.paths, group.join_fds = self, tuple(os.path.join(p, name) for p in self.parents), ()
        return group

    def _limit(self, paths: tuple[str, ...], memory_bytes: int | None, pids: int) -> None:
        raise NotImplementedError

    def kill(self, group: RunGroup) -> None:
        raise NotImplementedError

    def oom_killed(self, group: RunGroup) -> bool:
        raise NotImplementedError


