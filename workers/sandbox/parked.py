"""A sandbox launched ahead of its run (`warm`): prepared and started as a cold run is, its interpreter running the
stub that waits on a socket for the script to run. `park` makes one on the warmer's thread; a run `start`s it with
its files, its script's argv and descriptors; `end` gives it back, after its run or unused.
"""

from __future__ import annotations

import array
import marshal
import os
import socket
import subprocess
import tempfile
from typing import Mapping, Sequence

from workers.sandbox import warm
from workers.sandbox.limits import Limits, SandboxUnavailable
from workers.sandbox.prepared import Prepared, root_of


class Parked:
    """One parked sandbox: its preparation, its launcher, bubblewrap's status descriptor (until a run takes it),
    its stderr file (a spawned run's) and the socket to its stub."""

    def __init__(self, shape: warm.Shape, prepared: Prepared, proc: subprocess.Popen, status: int | None,
                 stderr: "tempfile._TemporaryFileWrapper[bytes] | None", ctrl: socket.socket) -> None:
        self.shape, self.prepared, self.proc, self.status = shape, prepared, proc, status
        self.stderr, self.ctrl = stderr, ctrl

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fits(self, limits: Limits) -> bool:
        """Whether a run of its shape with these limits can use it: no more CPU than it was launched with."""
        return limits.cpu_seconds() <= self.shape.cpu

    def start(self, argv: Sequence[str], files: Mapping[str, bytes | str], fds: Sequence[int],
              limits: Limits) -> tuple[subprocess.Popen, int | None]:
        """Writes the run's files and hands the stub its script's argv, the descriptors it finds at the same numbers
        and its CPU limit; the running program and bubblewrap's status descriptor, the caller's from here on."""
        self.prepared.workdir.write(files, self.prepared.lease.uid)
        payload = marshal.dumps((list(argv), list(fds), limits.cpu_seconds()))
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        try:
            self.ctrl.settimeout(warm.SETTLE_S)
            self.ctrl.sendmsg([payload], rights)
            acknowledged = self.ctrl.recv(1) == b"1"
        except OSError as exc:  # its stub was gone: the machine's failure, never the response's verdict
            raise SandboxUnavailable(f"a warm sandbox ended before its run ({exc})") from None
        finally:
            self.ctrl.close()
        if not acknowledged:
            raise SandboxUnavailable("a warm sandbox could not set up its run")
        status, self.status = self.status, None
        return self.proc, status

    def end(self, failed: bool = False) -> None:
        """Ends it, unused or after its run: its programs killed, what it still holds closed, the rest given back
        (behind the worker, or inline after a failure)."""
        self.ctrl.close()
        self.prepared.kill(self.proc)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr, self.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        if self.status is not None:
            os.close(self.status)
            self.status = None
        self.prepared.close(failed)


def park(shape: warm.Shape) -> Parked | None:
    """Launches a sandbox of `shape` whose interpreter waits for its run (on the warmer's thread); None when the
    root's settings changed since the shape was taken (the next run of the shape starts cold). A piped shape's
    stdin, stdout and stderr are pipes, as a supervised run's are; a spawned one's /dev/null and a file."""
    if tuple(root_of(shape.limits)) != shape.root:
        return None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    argv = [shape.python, *warm.FLAGS, "-c", warm.STUB, str(theirs.fileno())]
    prepared = stderr = None
    try:
        prepared = Prepared.open(argv, {}, shape.launched(), shape.mode)
        if shape.piped:
            stdio = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        else:
            stderr = tempfile.TemporaryFile()
            stdio = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": stderr}
        proc, status = prepared.launch.start(env=dict(shape.env), pass_fds=(theirs.fileno(),), **stdio)
    except BaseException:
        ours.close()
        if stderr is not None:
            stderr.close()
        if prepared is not None:
            prepared.close(failed=True)
        raise
    finally:
        theirs.close()
    return Parked(shape, prepared, proc, status, stderr, ours)
