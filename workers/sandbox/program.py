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

import atexit
import contextlib
import os
import selectors
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from typing import Callable, Iterator, Mapping, Sequence

from workers.sandbox import isolation, live, remains, warm
from workers.sandbox.isolation import _environment
from workers.sandbox.limits import Limits, MiB, RunResult, SandboxUnavailable
from workers.sandbox.parked import Parked, park
from workers.sandbox.prepared import Prepared, root_of
from workers.sandbox.prepared import prepared as prepared_for
from workers.sandbox.uids import sweep_stale

# an exiting process ends its parked sandbox, then waits for every run's remains (the modules' own hooks would run
# the other way round: the last registered runs first)
atexit.register(lambda: (warm.close(), remains.settle(remains.SETTLE_S)))


def run(argv: Sequence[str], *, files: Mapping[str, bytes | str] = {}, stdin: bytes = b"",
        limits: Limits = Limits(), collect: Sequence[str] = (), collect_bytes: int = 64 * MiB,
        env: Mapping[str, str] = {}) -> RunResult:
    """Run argv (relative paths resolve in the fresh working directory holding `files`) under the limits.

    Returns how it ended; raises SandboxUnavailable only when the machine cannot contain it. A Python script's
    run takes the sandbox parked for its shape, if there is one (`warm`), and has the next one made.
    """
    environment = _environment(env)
    shape = _shape(argv, limits, environment, piped=True)
    parked = _take(shape, limits)
    if parked is not None:
        warm.want(shape, park)  # made while this run computes: the next run of its shape is likely near
        try:
            result = _supervise(parked.prepared, lambda: parked.start(argv[3:], files, (), limits), stdin, limits)
            if collect:
                result = replace(result, files=parked.prepared.workdir.read(collect, collect_bytes))
        except BaseException:
            parked.end(failed=True)
            raise
        parked.end()
        return result
    with prepared_for(argv, files, limits) as held:
        result = _supervise(held, _cold(held, environment), stdin, limits)
        if collect:
            result = replace(result, files=held.workdir.read(collect, collect_bytes))
    if shape is not None:  # after a cold run that could start: one that could not says why once, not twice
        warm.want(shape, park)
    return result


class Spawned:
    """A contained program running on its own; its stdin and stdout are /dev/null, its stderr a capped file."""

    def __init__(self, proc: subprocess.Popen, stderr: "tempfile._TemporaryFileWrapper[bytes]",
                 prepared: Prepared, status: int | None) -> None:
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
        """Kills the program; contained, the wait for its sandbox to go is left to its remains (`Prepared.close`)."""
        self._prepared.kill(self._proc)
        self._stderr.close()
        if self._status is not None:
            os.close(self._status)
            self._status = None


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
    shape = _shape(argv, limits, environment, pass_fds)
    parked = _take(shape, limits)
    if parked is not None:
        warm.want(shape, park)  # made while this run computes: the next run of its shape is likely near
        with _spawned_warm(parked, argv, files, pass_fds, limits) as spawned:
            yield spawned
        return
    with _spawned_cold(argv, files, limits, pass_fds, environment) as spawned:
        yield spawned
    if shape is not None:  # after a cold run that could start: one that could not says why once, not twice
        warm.want(shape, park)


@contextlib.contextmanager
def _spawned_cold(argv: Sequence[str], files: Mapping[str, bytes | str], limits: Limits, pass_fds: Sequence[int],
                  env: dict[str, str]) -> Iterator[Spawned]:
    with prepared_for(argv, files, limits) as prepared:
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


def _shape(argv: Sequence[str], limits: Limits, env: dict[str, str], fds: Sequence[int] = (),
           piped: bool = False) -> warm.Shape | None:
    """The shape of this run on this machine, as of now (`warm.shape_of`), if a warm sandbox could serve it."""
    return warm.shape_of(argv, limits, env, isolation.mode(), isolation.python_executable(), fds, piped,
                         root=lambda: root_of(limits))


def _take(shape: warm.Shape | None, limits: Limits) -> Parked | None:
    """The sandbox parked for a run of `shape` with these limits, if there is one that fits them."""
    parked = warm.take(shape) if shape is not None else None
    if parked is not None and not parked.fits(limits):
        parked.end()  # launched for less CPU than this run may use: started cold, and the next made for this one
        return None
    return parked


@contextlib.contextmanager
def _spawned_warm(parked: Parked, argv: Sequence[str], files: Mapping[str, bytes | str],
                  pass_fds: Sequence[int], limits: Limits) -> Iterator[Spawned]:
    spawned = None
    try:
        with live.tracked(parked.prepared.end):
            proc, status = parked.start(argv[3:], files, pass_fds, limits)
            spawned = Spawned(proc, parked.stderr, parked.prepared, status)
            yield spawned
    except BaseException:
        if spawned is not None:
            spawned._end()
        parked.end(failed=True)
        raise
    spawned._end()
    parked.end()


Start = Callable[[], "tuple[subprocess.Popen, int | None]"]  # the running program, bubblewrap's status descriptor


def _cold(prepared: Prepared, env: dict[str, str]) -> Start:
    return lambda: prepared.launch.start(env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)


def _supervise(prepared: Prepared, start: Start, stdin: bytes, limits: Limits) -> RunResult:
    with live.tracked(prepared.end):
        return _supervised(prepared, start, stdin, limits)


def _supervised(prepared: Prepared, start: Start, stdin: bytes, limits: Limits) -> RunResult:
    launch = prepared.launch
    started = time.monotonic()
    deadline = started + limits.wall_s
    proc, status_read = start()
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
            prepared.stop(proc)
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
    with prepared_for(["/bin/true"], {}, limits, m="root") as held:  # the probe runs before the mode is known
        return _supervise(held, _cold(held, _environment({})), b"", limits)
