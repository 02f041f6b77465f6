"""What one run holds (`Prepared`): a uid of the pool, a fresh working directory holding its files, a cgroup of its
own and the launch that will start it; how its programs are killed and waited for; and how all of it is given
back: once every program of the run has SIGKILL, behind the worker (`remains`), inline after a failure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

from workers.sandbox import cgroups, isolation, remains, root
from workers.sandbox.launch import PROCESSES, Launch
from workers.sandbox.limits import Limits, SandboxUnavailable
from workers.sandbox.uids import _Lease, lease_uid
from workers.sandbox.workdir import _Workdir

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    launch: Launch
    workdir: _Workdir
    group: cgroups.RunGroup | None
    lease: _Lease
    reap: Callable[[], None] | None = None  # what is left to wait for of the run's programs once killed

    @classmethod
    def open(cls, argv: Sequence[str], files: Mapping[str, bytes | str], limits: Limits,
             m: str | None = None) -> "Prepared":
        """A uid of the pool, a fresh working directory holding `files`, a cgroup, the launch."""
        m = m or isolation.mode()  # read on the module: one stand-in for the machine (a test's) reaches run, call
        lease = lease_uid(m)
        workdir = group = None
        try:
            workdir = _Workdir(m, lease.uid, limits.disk_bytes)
            workdir.write(files, lease.uid)
            contained = m != "uncontained"
            root_args: list[str] = []
            if contained:
                hierarchy = cgroups.probe()
                if not isinstance(hierarchy, cgroups.Hierarchy):
                    raise SandboxUnavailable(f"no cgroup hierarchy for per-run limits: {hierarchy}")
                group = hierarchy.create(os.path.basename(workdir.path), limits.run_memory_bytes(),
                                         limits.nproc + PROCESSES)
                root_args = root_of(limits, workdir.path)
            launch = Launch(contained, argv, limits, lease.uid, group, workdir.path, root_args)
            return cls(launch, workdir, group, lease)
        except BaseException:
            _clear(group, workdir, lease)
            raise

    def kill(self, proc: subprocess.Popen) -> None:
        """Kills the run's programs without waiting for them: contained, its namespace's init (the kernel kills
        every process of the namespace), the wait left to `close`; uncontained, everything, waited for here."""
        child = self.launch.child
        if self.group is not None and child is not None:
            if proc.poll() is None:
                _signal(lambda: os.kill(child, signal.SIGKILL))
            self.reap = lambda: self.stop(proc)
        else:
            self.stop(proc)

    def stop(self, proc: subprocess.Popen) -> None:
        """Kills the run's programs and waits for its launcher, then for anything left in its cgroup."""
        if proc.poll() is None:
            _stop(proc, self.launch)
        self.finish()

    def close(self, failed: bool = False) -> None:
        """Gives back the uid, working directory and cgroup. Contained, once every program of the run was sent
        SIGKILL (`kill`, or the supervisor's stop), behind the worker (`remains`); inline after a failure."""
        if self.group is None or failed:
            try:
                if self.reap is not None:
                    self.reap()
            finally:
                _clear(self.group, self.workdir, self.lease)
            return
        steps = (self.reap,) if self.reap is not None else ()
        remains.leave(remains.Remains((*steps, self.group.remove, self.workdir.remove), self.lease.release))

    def finish(self) -> bool:
        """Kills what is left of the run; True when the kernel killed a process at the run's memory limit."""
        if self.group is None:
            return False
        self.group.kill()
        return self.group.oom_killed()

    def end(self) -> None:
        """Kills the run's programs from another thread, without waiting for them (`live.Scope.end`): its cgroup's
        processes; uncontained, the launcher's process group while the launcher is not reaped."""
        if self.group is not None:
            self.group.kill()
            return
        proc = self.launch.proc
        if proc is not None and proc.returncode is None:
            _signal(lambda: os.killpg(proc.pid, signal.SIGKILL))


def root_of(limits: Limits, workdir: str = root.WORKDIR) -> list[str]:
    """bubblewrap's arguments for a run's root as the settings of the moment make it (the hidden paths and allowed
    trees are read on every run: the operator's settings may change), its working directory bound from `workdir`."""
    return root.bwrap_args(python=isolation.python_executable(), hidden=isolation.hidden_paths(), workdir=workdir,
                           limits=limits, state_root=isolation.state_root())


@contextlib.contextmanager
def prepared(argv: Sequence[str], files: Mapping[str, bytes | str], limits: Limits,
             m: str | None = None) -> Iterator[Prepared]:
    """`Prepared.open` for a block, closed after it."""
    held = Prepared.open(argv, files, limits, m)
    try:
        yield held
    except BaseException:
        held.close(failed=True)
        raise
    held.close()


def _clear(group: cgroups.RunGroup | None, workdir: _Workdir | None, lease: _Lease) -> None:
    try:
        if group is not None:
            group.remove()
        if workdir is not None:
            workdir.remove()
    finally:
        lease.release()


def _stop(proc: subprocess.Popen, launch: Launch) -> None:
    """Ends a run from the inside out: SIGKILL to its PID namespace's init takes every process of the namespace
    down with it, and bubblewrap's monitor, seeing it gone, exits. The launcher's group is killed only if that
    fails, or where there is no namespace (uncontained). (The monitor does not reap the init: the host's init
    does, as it does after every bubblewrap run; until then it is a zombie of the run's uid, which runs nothing.)"""
    if launch.child is not None:
        _signal(lambda: os.kill(launch.child, signal.SIGKILL))
        if _ended(proc, 5, "outlived its namespace's init by"):
            return
    _signal(lambda: os.killpg(proc.pid, signal.SIGKILL))
    _ended(proc, 10, "survived SIGKILL for")


def _signal(send: Callable[[], None]) -> None:
    try:
        send()
    except ProcessLookupError:
        pass


def _ended(proc: subprocess.Popen, timeout_s: float, otherwise: str) -> bool:
    try:
        proc.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        log.error("sandbox: launcher %d %s %g s", proc.pid, otherwise, timeout_s)
        return False
