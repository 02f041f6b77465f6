"""Starting one contained program cheaply: no Python runs between fork and exec.

A worker is a large process (an interpreter with Celery, perhaps sympy or a CUDA context), so forking it costs
milliseconds per run and running Python in the child (a `preexec_fn`) costs tens more in copied pages (a 300 MB
worker: 20 ms a run). So the worker starts, with `vfork`, the farm's compiled launcher (`launcher.c`: the run's
rlimits on itself, the run's uid and gid, no groups), which execs bubblewrap; where it cannot be built,
util-linux's `prlimit` (the rlimits), which execs `setpriv` (the uid), which execs bubblewrap. bubblewrap builds
the namespaces and the root, reports its namespace child on a status descriptor, and waits on a block
descriptor. While nothing of the program has run, the worker puts bubblewrap's processes into the run's cgroup,
then lets it go: everything the program starts inherits the rlimits and the cgroup. (Setting the rlimits from the
worker with prlimit(2) would save the launcher's exec but needs CAP_SYS_RESOURCE, which a worker's container may
not grant.)

The status descriptor is bubblewrap's, closed before the program runs: its `exit-code` document says the
program was started, so a launch that failed is told apart from a program that failed, whatever it printed.
If the worker dies mid-launch, `--die-with-parent` takes bubblewrap down with it.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import shutil
import subprocess
import time
from typing import Any, Sequence

from workers.sandbox import cgroups, launcher, root
from workers.sandbox.limits import Limits, SandboxUnavailable

PROCESSES = 2  # bubblewrap's monitor and its PID namespace's init, besides the program's own
_NAMESPACES = ["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
               "--unshare-cgroup-try", "--disable-userns", "--uid", str(root.UID), "--gid", str(root.UID),
               "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
_TOOLS = "/usr/bin:/bin:/usr/local/bin"  # not the PATH: no stand-in launcher
_START_S = 10.0  # bubblewrap reports its namespace child within this, or the machine cannot contain code
_STATUS_CAP = 1 << 16  # bytes kept of bubblewrap's status documents


def tool(name: str) -> str | None:
    return shutil.which(name, path=_TOOLS)


def _admit(group: cgroups.RunGroup, pid: int) -> bool:
    """Moves a process into the run's group; False when it has died (in its setup: a launch that failed)."""
    try:
        group.admit(pid)
    except ProcessLookupError:
        return False
    return True


def _tool_or_fail(name: str) -> str:
    path = tool(name)
    if path is None:
        raise SandboxUnavailable(f"{name} is not installed (bubblewrap, util-linux)")
    return path


class Launch:
    """One program's start: contained (the launcher, bubblewrap, the run's cgroup and rlimits), or uncontained
    (rlimits only, for a development machine that allows it)."""

    def __init__(self, contained: bool, argv: Sequence[str], limits: Limits, uid: int | None,
                 group: cgroups.RunGroup | None, workdir: str, root_args: Sequence[str] = ()) -> None:
        self.contained, self.argv, self.limits, self.uid, self.group = contained, list(argv), limits, uid, group
        self.workdir, self.root_args = workdir, list(root_args)
        self.status = bytearray()  # bubblewrap's documents read so far
        self.child: int | None = None  # bubblewrap's namespace child: the init of the run's PID namespace
        self.proc: subprocess.Popen | None = None  # the launcher, once started

    def start(self, **popen: Any) -> tuple[subprocess.Popen, int | None]:
        """The running program, and the descriptor bubblewrap writes its status to (None uncontained; the
        caller reads it to its end and closes it). `popen`: stdio, env, pass_fds."""
        if not self.contained:
            self.proc = subprocess.Popen(self.argv, cwd=self.workdir, start_new_session=True, close_fds=True,
                                         preexec_fn=self._limit_self, **popen)
            return self.proc, None
        status_read, status_write = os.pipe()
        block_read, block_write = os.pipe()
        argv = [*self._dropping(), _tool_or_fail("bwrap"), "--json-status-fd", str(status_write),
                "--block-fd", str(block_read), *_NAMESPACES, *self.root_args, "--", *self.argv]
        passed = tuple(popen.pop("pass_fds", ()))
        try:
            proc = self.proc = subprocess.Popen(argv, cwd="/", start_new_session=True, close_fds=True,
                                                pass_fds=(status_write, block_read, *passed), **popen)
        except BaseException:
            for fd in (status_read, status_write, block_read, block_write):
                os.close(fd)
            raise
        os.close(status_write)
        os.close(block_read)
        try:
            # bubblewrap's monitor first, while it starts: the first move into a cgroup waits for an RCU grace
            # period (7-8 ms here), which its exec and setup overlap; its namespace child's move, next, is quick
            _admit(self.group, proc.pid)
            child = self.child = self._namespace_child(status_read)
            if child is not None:  # else bubblewrap failed before its clone: the caller finds no exit-code
                # the namespace child too: it may have been cloned before its parent's move took effect
                if _admit(self.group, child):
                    try:
                        os.write(block_write, b"1")
                    except BrokenPipeError:  # bubblewrap failed after its clone: no exit-code, the caller says so
                        pass
        except BaseException:
            proc.kill()
            proc.wait()
            os.close(status_read)
            raise
        finally:
            os.close(block_write)
        return proc, status_read

    def note_status(self, chunk: bytes) -> None:
        """More of what bubblewrap wrote on its status descriptor (kept up to a cap)."""
        self.status += chunk[:max(0, _STATUS_CAP - len(self.status))]

    def failure(self, returncode: int | None, stderr: str) -> str | None:
        """Why bubblewrap never started the program (its status holds no `exit-code` document), once the
        launcher has ended on its own; None when it did start it, or uncontained."""
        if not self.contained or b'"exit-code"' in self.status:
            return None
        return f"the sandbox could not start the program (exit status {returncode}): {stderr.strip()[-300:]}"

    def _namespace_child(self, fd: int) -> int | None:
        """The pid of bubblewrap's namespace child, from its first status document; None if it ended first."""
        deadline = time.monotonic() + _START_S
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.status:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    raise SandboxUnavailable(f"bubblewrap did not start a sandbox within {_START_S:g} s")
                chunk = os.read(fd, 4096)
                if not chunk:
                    return None
                self.note_status(chunk)
        first = self.status[:self.status.index(b"\n")]
        try:
            return int(json.loads(first)["child-pid"])
        except (ValueError, KeyError, TypeError):
            raise SandboxUnavailable(f"bubblewrap reported {bytes(first[:200])!r}, not its child") from None

    def _dropping(self) -> list[str]:
        """What execs bubblewrap with the run's rlimits, as the run's uid and gid with no groups."""
        rlimits = self._rlimits()
        compiled = launcher.path()
        if compiled is not None:
            return [compiled, str(self.uid), str(self.uid),
                    *(f"{name}={soft}:{hard}" for name, (soft, hard) in rlimits), "--"]
        return [_tool_or_fail("prlimit"), *(f"--{name}={soft}:{hard}" for name, (soft, hard) in rlimits), "--",
                _tool_or_fail("setpriv"), f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]

    def _rlimits(self) -> list[tuple[str, tuple[int, int]]]:
        """The run's rlimits, by prlimit's names for them. Not RLIMIT_NPROC where a cgroup caps the run: it
        counts per uid, and what an earlier run of the same uid left in that count (killed, not yet reaped, its
        namespaces not yet freed) stopped a later run from starting."""
        limits = self.limits
        cpu = limits.cpu_seconds()
        found = [("cpu", (cpu, cpu + 1)),  # SIGXCPU, then SIGKILL
                 ("fsize", (limits.file_bytes, limits.file_bytes)),
                 ("nofile", (limits.nofile, limits.nofile)),
                 ("core", (0, 0))]
        if limits.memory_bytes is not None:  # per process: a clean MemoryError before the run's cgroup kills
            found.append(("as", (limits.memory_bytes, limits.memory_bytes)))
        if limits.data_bytes is not None:
            found.append(("data", (limits.data_bytes, limits.data_bytes)))
        return found

    def _limit_self(self) -> None:
        """Uncontained (a development machine): the rlimits, RLIMIT_NPROC too, in the child before exec."""
        for name, value in self._rlimits():
            resource.setrlimit(getattr(resource, f"RLIMIT_{name.upper()}"), value)
        processes = self.limits.nproc + PROCESSES
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
