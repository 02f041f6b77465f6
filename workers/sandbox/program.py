"""`run`: execute a model-written program in the sandbox and supervise it from outside; `spawn`: start
one that another party talks to (the response's function, called by the tests over pipes).

Each run holds a uid of the pool, a fresh working directory and a cgroup of its own, all given back when it
ends. The supervisor feeds stdin, caps stdout and stderr (the run is killed at the cap), kills the run at the
wall limit, and at the end kills whatever is left in the run's cgroup, so nothing the program started outlives
it. A launch that fails before the program starts (bubblewrap could not build the root) is the machine's
failure, `SandboxUnavailable`; bubblewrap says so on a status descriptor the program cannot silence.
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
from dataclasses import dataclass, replace
from typing import Iterator, Mapping, Sequence

from workers.sandbox import cgroups, isolation
from workers.sandbox.isolation import Launch, _environment
from workers.sandbox.limits import Limits, MiB, RunResult, SandboxUnavailable
from workers.sandbox.uids import lease_uid, sweep_stale
from workers.sandbox.workdir import _Workdir

log = logging.getLogger(__name__)
_STATUS_CAP = 1 << 16  # bytes kept of bubblewrap's status documents (the program can write there too)


def run(argv: Sequence[str], *, files: Mapping[str, bytes | str] = {}, stdin: bytes = b"",
        limits: Limits = Limits(), collect: Sequence[str] = (), collect_bytes: int = 64 * MiB,
        env: Mapping[str, str] = {}) -> RunResult:
    """Run argv (relative paths resolve in the fresh working directory holding `files`) under the limits.

    Returns how it ended; raises SandboxUnavailable only when the machine cannot contain it.
    """
    with _prepared(argv, files, limits) as prepared:
        result = _supervise(prepared, _environment(env), stdin, limits)
        if collect:
            result = replace(result, files=prepared.workdir.read(collect, collect_bytes))
        return result


@dataclass
class _Prepared:
    launch: Launch
    workdir: _Workdir
    group: cgroups.RunGroup | None

    def finish(self) -> bool:
        """Kills what is left of the run; True when the kernel killed a process at the run's memory limit."""
        if self.group is None:
            return False
        self.group.kill()
        return self.group.usage().oom_killed


class Spawned:
    """A contained program running on its own; its stdin and stdout are /dev/null, its stderr a capped file."""

    def __init__(self, proc: subprocess.Popen, stderr: "tempfile._TemporaryFileWrapper[bytes]",
                 prepared: _Prepared) -> None:
        self._proc, self._stderr, self._prepared = proc, stderr, prepared

    @property
    def pid(self) -> int:
        """The launcher's process (bubblewrap's monitor; the program itself runs in a PID namespace below it)."""
        return self._proc.pid

    def wait(self, timeout_s: float) -> int | None:
        """The exit status (a signal as 128+n, as bubblewrap reports it), None if still running."""
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
        self._prepared.finish()
        self._stderr.close()


@contextlib.contextmanager
def spawn(argv: Sequence[str], *, files: Mapping[str, bytes | str] = {}, limits: Limits = Limits(),
          pass_fds: Sequence[int] = (), env: Mapping[str, str] = {}) -> Iterator[Spawned]:
    """Start argv contained as `run` would, keeping `pass_fds` open in it; killed (with everything it
    started) and cleaned up when the block ends. The caller bounds its time: nothing here waits."""
    with _prepared(argv, files, limits) as prepared:
        stderr = tempfile.TemporaryFile()  # the launcher's own complaints, and whatever the program writes there
        launch = prepared.launch
        proc = subprocess.Popen(launch.argv, cwd=launch.cwd, env=_environment(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                                close_fds=True, pass_fds=tuple(pass_fds), preexec_fn=launch.setup)
        spawned = Spawned(proc, stderr, prepared)
        try:
            yield spawned
        finally:
            spawned._end()


@contextlib.contextmanager
def _prepared(argv: Sequence[str], files: Mapping[str, bytes | str], limits: Limits,
              m: str | None = None) -> Iterator[_Prepared]:
    """A uid of the pool, a fresh working directory holding `files`, a cgroup, the launch; released afterwards."""
    m = m or isolation.mode()  # read on the module: one stand-in for the machine (a test's) reaches run and call
    lease = lease_uid(m)
    workdir = group = None
    try:
        workdir = _Workdir(m, lease.uid, limits.disk_bytes)
        workdir.write(files, lease.uid)
        hierarchy = cgroups.probe() if m == "root" else None
        if isinstance(hierarchy, cgroups.Hierarchy):
            group = hierarchy.create(os.path.basename(workdir.path), limits.run_memory_bytes(),
                                     limits.nproc + isolation._LAUNCHER_PROCESSES)
        yield _Prepared(Launch(m, argv, limits, lease.uid, group, workdir.path), workdir, group)
    finally:
        if group is not None:
            group.remove()
        if workdir is not None:
            workdir.remove()
        lease.release()


def _supervise(prepared: _Prepared, env: dict[str, str], stdin: bytes, limits: Limits) -> RunResult:
    launch = prepared.launch
    status_read, status_write = os.pipe()
    contained = launch.contained
    argv = launch.argv
    if contained:  # bubblewrap's own report of the launch, after its namespace options
        argv = [argv[0], "--json-status-fd", str(status_write), *argv[1:]]
    started = time.monotonic()
    deadline = started + limits.wall_s
    try:
        proc = subprocess.Popen(argv, cwd=launch.cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                                pass_fds=(status_write,) if contained else (), preexec_fn=launch.setup)
    finally:
        os.close(status_write)
    stdout, stderr, status = bytearray(), bytearray(), bytearray()
    out = {proc.stdout.fileno(): stdout, proc.stderr.fileno(): stderr}
    timed_out = exceeded = False
    pending = memoryview(stdin)
    sel = selectors.DefaultSelector()
    for fd in (proc.stdout.fileno(), proc.stderr.fileno(), status_read):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
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
                if fd in out or fd == status_read:
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    if fd == status_read:
                        status += chunk[:max(0, _STATUS_CAP - len(status))]
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
        os.close(status_read)
        killed = proc.poll() is None or timed_out or exceeded
        if killed:
            _kill_group(proc)
        for fh in (proc.stdin, proc.stdout, proc.stderr):
            if fh and not fh.closed:
                fh.close()
        memory_exceeded = prepared.finish()
    wall = time.monotonic() - started
    rc = proc.returncode
    if contained and not killed and b'"exit-code"' not in status:
        raise SandboxUnavailable(f"the sandbox could not start the program (exit status {rc}): "
                                 f"{stderr.decode(errors='replace').strip()[-300:]}")
    sig = -rc if rc < 0 else (rc - 128 if 128 < rc < 128 + 65 else None)  # bubblewrap reports a signal as 128+n
    if sig == signal.SIGXCPU:
        timed_out = True
    return RunResult(None if sig else rc, sig, bytes(stdout), bytes(stderr), wall, timed_out, exceeded,
                     memory_exceeded=memory_exceeded)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher's group: bubblewrap's monitor, whose death takes the PID namespace down with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.error("sandbox: launcher %d survived SIGKILL for 10 s", proc.pid)


def probe_run() -> str | None:
    """None when a trivial program runs contained here, else why not (the mode probe, once per process)."""
    sweep_stale()
    try:
        result = _supervise_probe()
    except (OSError, SandboxUnavailable, subprocess.SubprocessError) as exc:
        return f"a contained probe run failed: {exc}"
    if not result.ok:
        return f"a contained probe run failed ({result.describe()}): {result.stderr.decode(errors='replace')[-300:]}"
    return None


def _supervise_probe() -> RunResult:
    limits = Limits(wall_s=10)
    with _prepared(["/bin/true"], {}, limits, m="root") as prepared:  # the probe runs before the mode is known
        return _supervise(prepared, _environment({}), b"", limits)
