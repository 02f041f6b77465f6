"""`run`: execute a model-written program in the sandbox and supervise it from outside; `spawn`: start
one that another party talks to (the response's function, called by the tests over pipes).

Each run holds a uid of the pool, a fresh working directory and a cgroup of its own, all given back when it
ends (once its programs are killed, behind the worker: `remains`). A Python script's spawned run may take a
sandbox started for it while the run before computed (`warm`). The supervisor feeds stdin, caps stdout and stderr
(the run is killed at the cap), kills the run at the wall limit, and at the end kills whatever is left in the
run's cgroup, so nothing the program started outlives it. A launch that fails before the program starts
(bubblewrap could not build the root) is the machine's failure, `SandboxUnavailable`; bubblewrap says so on a
status descriptor the program cannot silence.
"""

from __future__ import annotations

import array
import contextlib
import logging
import marshal
import os
import selectors
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Mapping, Sequence

from workers.sandbox import cgroups, isolation, live, remains, root, warm
from workers.sandbox.isolation import _environment
from workers.sandbox.launch import PROCESSES, Launch
from workers.sandbox.limits import Limits, MiB, RunResult, SandboxUnavailable
from workers.sandbox.uids import _Lease, lease_uid, sweep_stale
from workers.sandbox.workdir import _Workdir

log = logging.getLogger(__name__)


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
    lease: _Lease
    reap: Callable[[], None] | None = None  # what is left to wait for of the run's programs once killed

    @classmethod
    def open(cls, argv: Sequence[str], files: Mapping[str, bytes | str], limits: Limits,
             m: str | None = None) -> "_Prepared":
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
                root_args = root.bwrap_args(python=isolation.python_executable(), hidden=isolation.hidden_paths(),
                                            workdir=workdir.path, limits=limits, state_root=isolation.state_root())
            launch = Launch(contained, argv, limits, lease.uid, group, workdir.path, root_args)
            return cls(launch, workdir, group, lease)
        except BaseException:
            _clear(group, workdir, lease)
            raise

    def close(self, failed: bool = False) -> None:
        """Gives back the uid, working directory and cgroup. Contained, once every program of the run was sent
        SIGKILL (`_supervised`, `Spawned._end`), behind the worker (`remains`); inline after a failure."""
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


class Spawned:
    """A contained program running on its own; its stdin and stdout are /dev/null, its stderr a capped file."""

    def __init__(self, proc: subprocess.Popen, stderr: "tempfile._TemporaryFileWrapper[bytes]",
                 prepared: _Prepared, status: int | None) -> None:
        self._proc, self._stderr, self._prepared, self._status = proc, stderr, prepared, status

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

    def failed_to_start(self) -> str | None:
        """Why the sandbox never started the program, once it has ended (None: it started, or still runs); the
        machine's failure, not the program's, whatever the program printed."""
        if self._status is None or self._proc.poll() is None:
            return None
        launch = self._prepared.launch
        while chunk := _read_ready(self._status):
            launch.note_status(chunk)
        return launch.failure(self._proc.returncode, self.stderr_head().decode(errors="replace"))

    def _end(self) -> None:
        """Kills the program; contained, the wait for its sandbox to go is left to its remains (`_Prepared.close`)."""
        child = self._prepared.launch.child
        if self._prepared.group is not None and child is not None:
            if self._proc.poll() is None:  # its namespace's init: the kernel kills every process of the namespace
                _signal(lambda: os.kill(child, signal.SIGKILL))
            self._prepared.reap = self._reap
        else:
            self._reap()
        self._stderr.close()
        if self._status is not None:
            os.close(self._status)
            self._status = None

    def _reap(self) -> None:
        if self._proc.poll() is None:
            _stop(self._proc, self._prepared.launch)
        self._prepared.finish()


def _read_ready(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


@contextlib.contextmanager
def spawn(argv: Sequence[str], *, files: Mapping[str, bytes | str] = {}, limits: Limits = Limits(),
          pass_fds: Sequence[int] = (), env: Mapping[str, str] = {}) -> Iterator[Spawned]:
    """Start argv contained as `run` would, keeping `pass_fds` open in it; killed (with everything it
    started) and cleaned up when the block ends. The caller bounds its time: nothing here waits. A Python
    script's run takes the sandbox parked for its shape, if there is one (`warm`), and parks the next."""
    environment = _environment(env)
    shape = warm.shape_of(argv, limits, environment, isolation.mode(), pass_fds)
    parked = warm.take(shape) if shape is not None else None
    if parked is not None:
        warm.want(shape, _park)  # made while this run computes: the next run of its shape is likely near
        with _spawned_warm(parked, argv, files, pass_fds) as spawned:
            yield spawned
        return
    with _spawned_cold(argv, files, limits, pass_fds, environment) as spawned:
        yield spawned
    if shape is not None:  # after a cold run that could start: one that could not says why once, not twice
        warm.want(shape, _park)


@contextlib.contextmanager
def _spawned_cold(argv: Sequence[str], files: Mapping[str, bytes | str], limits: Limits, pass_fds: Sequence[int],
                  env: dict[str, str]) -> Iterator[Spawned]:
    with _prepared(argv, files, limits) as prepared:
        stderr = tempfile.TemporaryFile()  # the launcher's own complaints, and whatever the program writes there
        spawned = None
        try:
            with live.tracked(prepared.end):
                proc, status = prepared.launch.start(env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                     stderr=stderr, pass_fds=tuple(pass_fds))
                spawned = Spawned(proc, stderr, prepared, status)
                yield spawned
        finally:
            if spawned is not None:
                spawned._end()
            else:
                stderr.close()


@contextlib.contextmanager
def _spawned_warm(parked: "_Parked", argv: Sequence[str], files: Mapping[str, bytes | str],
                  pass_fds: Sequence[int]) -> Iterator[Spawned]:
    prepared = parked.prepared
    spawned = Spawned(parked.proc, parked.stderr, prepared, parked.status)
    try:
        with live.tracked(prepared.end):
            prepared.workdir.write(files, prepared.lease.uid)
            try:
                parked.hand(argv[3:], pass_fds)
            except OSError as exc:  # its stub was gone: the machine's failure, never the response's verdict
                raise SandboxUnavailable(f"a warm sandbox ended before its run ({exc})") from None
            yield spawned
    except BaseException:
        spawned._end()
        prepared.close(failed=True)
        raise
    spawned._end()
    prepared.close()


class _Parked:
    """A sandbox launched for a shape of run (`warm`), its interpreter waiting on `ctrl` for the run."""

    def __init__(self, shape: warm.Shape, prepared: _Prepared, proc: subprocess.Popen, status: int | None,
                 stderr: "tempfile._TemporaryFileWrapper[bytes]", ctrl: socket.socket) -> None:
        self.shape, self.prepared, self.proc, self.status, self.stderr, self.ctrl = (shape, prepared, proc, status,
                                                                                    stderr, ctrl)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def hand(self, argv: Sequence[str], fds: Sequence[int]) -> None:
        """Starts the run: its script's argv, and the descriptors it finds at the same numbers."""
        payload = marshal.dumps((list(argv), list(fds)))
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        try:
            self.ctrl.sendmsg([payload], rights)
        finally:
            self.ctrl.close()

    def end(self) -> None:
        self.ctrl.close()
        Spawned(self.proc, self.stderr, self.prepared, self.status)._end()
        self.prepared.close()


def _park(shape: warm.Shape) -> _Parked:
    """Launches a sandbox of `shape` whose interpreter waits for its run (on the warmer's thread)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    argv = [shape.python, *warm.FLAGS, "-c", warm.STUB, str(theirs.fileno())]
    prepared = stderr = None
    try:
        prepared = _Prepared.open(argv, {}, shape.limits, shape.mode)
        stderr = tempfile.TemporaryFile()
        proc, status = prepared.launch.start(env=dict(shape.env), stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=stderr, pass_fds=(theirs.fileno(),))
    except BaseException:
        ours.close()
        if stderr is not None:
            stderr.close()
        if prepared is not None:
            prepared.close(failed=True)
        raise
    finally:
        theirs.close()
    return _Parked(shape, prepared, proc, status, stderr, ours)


@contextlib.contextmanager
def _prepared(argv: Sequence[str], files: Mapping[str, bytes | str], limits: Limits,
              m: str | None = None) -> Iterator[_Prepared]:
    """`_Prepared.open` for a block, closed after it."""
    prepared = _Prepared.open(argv, files, limits, m)
    try:
        yield prepared
    except BaseException:
        prepared.close(failed=True)
        raise
    prepared.close()


def _clear(group: cgroups.RunGroup | None, workdir: _Workdir | None, lease) -> None:
    try:
        if group is not None:
            group.remove()
        if workdir is not None:
            workdir.remove()
    finally:
        lease.release()


def _supervise(prepared: _Prepared, env: dict[str, str], stdin: bytes, limits: Limits) -> RunResult:
    with live.tracked(prepared.end):
        return _supervised(prepared, env, stdin, limits)


def _supervised(prepared: _Prepared, env: dict[str, str], stdin: bytes, limits: Limits) -> RunResult:
    launch = prepared.launch
    started = time.monotonic()
    deadline = started + limits.wall_s
    proc, status_read = launch.start(env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = bytearray(), bytearray()
    out = {proc.stdout.fileno(): stdout, proc.stderr.fileno(): stderr}
    timed_out = exceeded = False
    pending = memoryview(stdin)
    sel = selectors.DefaultSelector()
    for fd in (proc.stdout.fileno(), proc.stderr.fileno(), *([status_read] if status_read is not None else [])):
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
                        launch.note_status(chunk)
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
        if status_read is not None:
            os.close(status_read)
        killed = proc.poll() is None or timed_out or exceeded
        if killed:
            _stop(proc, launch)
        for fh in (proc.stdin, proc.stdout, proc.stderr):
            if fh and not fh.closed:
                fh.close()
        memory_exceeded = prepared.finish()
    wall = time.monotonic() - started
    rc = proc.returncode
    if not killed and (why := launch.failure(rc, stderr.decode(errors="replace"))):
        raise SandboxUnavailable(why)
    sig = -rc if rc < 0 else (rc - 128 if 128 < rc < 128 + 65 else None)  # bubblewrap reports a signal as 128+n
    if sig == signal.SIGXCPU:
        timed_out = True
    return RunResult(None if sig else rc, sig, bytes(stdout), bytes(stderr), wall, timed_out, exceeded,
                     memory_exceeded=memory_exceeded)


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
