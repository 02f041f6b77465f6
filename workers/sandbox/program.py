"""`run`: execute a model-written program in the sandbox and supervise it from outside; `spawn`: start
one that another party talks to (the response's function, called by the tests over pipes).

The supervisor feeds stdin, caps stdout and stderr (the group is killed at the cap) and kills the
launcher's whole group at the wall limit; the PID namespace takes every process inside down with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import subprocess
import tempfile
import time
from typing import Iterator, Mapping, Sequence

from workers.sandbox import isolation
from workers.sandbox.isolation import _MOUNT_FAILED, _environment, _wrap
from workers.sandbox.limits import Limits, MiB, RunResult, SandboxUnavailable
from workers.sandbox.uids import lease_uid
from workers.sandbox.workdir import _Workdir

log = logging.getLogger(__name__)


def run(argv: Sequence[str], *, files: Mapping[str, bytes | str] = {}, stdin: bytes = b"",
        limits: Limits = Limits(), collect: Sequence[str] = (), collect_bytes: int = 64 * MiB,
        env: Mapping[str, str] = {}) -> RunResult:
    """Run argv (relative paths resolve in the fresh working directory holding `files`) under the limits.

    Returns how it ended; raises SandboxUnavailable only when the machine cannot contain it.
    """
    with _prepared(argv, files, limits) as (cmd, workdir):
        result = _supervise(cmd, workdir.path, _environment(env), stdin, limits)
        if result.returncode == 125 and _MOUNT_FAILED.encode() in result.stderr[-500:]:
            raise SandboxUnavailable(f"{_MOUNT_FAILED}: {result.stderr.decode(errors='replace').strip()[-300:]}")
        if collect:
            result = _with_files(result, workdir.read(collect, collect_bytes))
        return result


class Spawned:
    """A contained program running on its own; its stdin and stdout are /dev/null, its stderr a capped file."""

    def __init__(self, proc: subprocess.Popen, stderr: "tempfile._TemporaryFileWrapper[bytes]") -> None:
        self._proc, self._stderr = proc, stderr

    def wait(self, timeout_s: float) -> int | None:
        """The exit status (a signal as 128+n, as the launcher's sh reports it), None if still running."""
        try:
            return self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stderr_head(self, limit: int = 4096) -> bytes:
        self._stderr.seek(0)
        return self._stderr.read(limit)

    def _end(self) -> None:
        if self._proc.poll() is None:
            _kill_group(self._proc)
        self._stderr.close()


@contextlib.contextmanager
def spawn(argv: Sequence[str], *, files: Mapping[str, bytes | str] = {}, limits: Limits = Limits(),
          pass_fds: Sequence[int] = (), env: Mapping[str, str] = {}) -> Iterator[Spawned]:
    """Start argv contained as `run` would, keeping `pass_fds` open in it; killed (with everything it
    started) and cleaned up when the block ends. The caller bounds its time: nothing here waits."""
    with _prepared(argv, files, limits) as (cmd, workdir):
        stderr = tempfile.TemporaryFile()  # only the launcher's own complaints: the program may redirect it
        proc = subprocess.Popen(cmd, cwd=workdir.path, env=_environment(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                                close_fds=True, pass_fds=tuple(pass_fds))
        spawned = Spawned(proc, stderr)
        try:
            yield spawned
        finally:
            spawned._end()


@contextlib.contextmanager
def _prepared(argv: Sequence[str], files: Mapping[str, bytes | str], limits: Limits) -> Iterator[tuple[list[str], _Workdir]]:
    """A uid of the pool, a fresh working directory holding `files`, the launcher chain; released afterwards."""
    m = isolation.mode()  # read on the module: one stand-in for the machine (a test's) reaches run and call
    lease = lease_uid(m)
    workdir = None
    try:
        workdir = _Workdir(m, lease.uid, limits.disk_bytes)
        workdir.write(files, lease.uid)
        yield _wrap(m, argv, limits, lease.uid), workdir
    finally:
        if workdir is not None:
            workdir.remove()
        lease.release()


def _with_files(r: RunResult, files: dict[str, bytes]) -> RunResult:
    return RunResult(r.returncode, r.signal, r.stdout, r.stderr, r.wall_s, r.timed_out, r.output_exceeded, files)


def _supervise(cmd: list[str], cwd: str, env: dict[str, str], stdin: bytes, limits: Limits) -> RunResult:
    started = time.monotonic()
    deadline = started + limits.wall_s
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    stdout, stderr = bytearray(), bytearray()
    out = {proc.stdout.fileno(): stdout, proc.stderr.fileno(): stderr}
    timed_out = exceeded = False
    pending = memoryview(stdin)
    sel = selectors.DefaultSelector()
    for fh in (proc.stdout, proc.stderr):
        os.set_blocking(fh.fileno(), False)
        sel.register(fh.fileno(), selectors.EVENT_READ)
    if pending:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                fd = key.fd
                if fd in out:
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    room = limits.output_bytes - len(out[fd])
                    out[fd] += chunk[:max(0, room)]
                    if len(chunk) > room:
                        exceeded = True
                else:
                    try:
                        pending = pending[os.write(fd, pending[: 1 << 16]):]
                    except (BrokenPipeError, BlockingIOError) as exc:
                        if isinstance(exc, BrokenPipeError):
                            pending = pending[:0]
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()
            if exceeded:
                break
        if not timed_out and not exceeded:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        sel.close()
        if proc.poll() is None or timed_out or exceeded:
            _kill_group(proc)
        for fh in (proc.stdin, proc.stdout, proc.stderr):
            if fh and not fh.closed:
                fh.close()
    wall = time.monotonic() - started
    rc = proc.returncode
    sig = -rc if rc < 0 else (rc - 128 if 128 < rc < 128 + 65 else None)  # sh reports a signal as 128+n
    if sig == signal.SIGXCPU:
        timed_out = True
    return RunResult(None if sig else rc, sig, bytes(stdout), bytes(stderr), wall, timed_out, exceeded)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher's group; --kill-child then takes the PID namespace (and any escapee) down."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.error("sandbox: launcher %d survived SIGKILL for 10 s", proc.pid)
