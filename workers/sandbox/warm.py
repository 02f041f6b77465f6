"""A sandbox started before its run: the next Python program's whole sandbox (working directory, uid, cgroup,
namespaces, root) and its interpreter, built while the worker is between requests, so a request waits for
none of it (issue 34: of a function problem's 34 ms judgement, 2 ms for the working directory, uid and cgroup,
8 for the launch and about 9 for the interpreter's start).

Each warm sandbox serves exactly one run, as a cold one does, and ends with it: nothing of one run meets the
next. What is started early is only what a cold run would start the same way, from nothing the response chose:
`python -I -S -c STUB CTRL` in the run's sandbox, with the run's limits and environment. The stub waits on a
socket for its run: the program's argv and the descriptors it is to find open (sent with SCM_RIGHTS, placed at
the numbers the caller gave), then closes the socket, forgets what it imported, and runs the program's script
as `__main__`, as the interpreter would have. Nothing of the response exists in the sandbox before then.

A warm sandbox is made for a shape (interpreter, limits, environment, pipes or not) as a run of that shape takes one (so it is
made while that run computes) or once a cold one ends, by a thread that lives as long as the process (bubblewrap
dies with the thread that started it). A run of another shape
ends the parked one and starts cold. While parked it holds its uid and about 10 MB; it costs no CPU.
`FARM_SANDBOX_WARM=0` turns it off.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Protocol, Sequence

from workers.sandbox.limits import Limits

log = logging.getLogger(__name__)

ENV = "FARM_SANDBOX_WARM"
FLAGS = ("-I", "-S")  # the interpreter flags a warm sandbox starts with; a run asking for others starts cold
FDS_MAX = 16  # descriptors a run may be handed
SETTLE_S = 10.0  # what closing waits for a sandbox being made
SHAPES_MAX = 64  # shapes whose largest CPU limit is remembered

# The interpreter's first code in a warm sandbox. It imports only `_socket` and `resource` (and forgets them), so the
# program's own imports start as in a cold interpreter; its traceback leaves out the stub's frame. It acknowledges
# its run (b"1") once nothing of its own can fail any more, so a failure of its own is never taken for the program's.
STUB = r"""
def _stub(ctrl):
    import _socket, marshal, posix, resource, sys
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, ctrl)
    msg, anc, _, _ = s.recvmsg(1 << 20, _socket.CMSG_SPACE(4 * %(fds)d))
    if not msg:
        posix._exit(0)
    argv, wanted, cpu = marshal.loads(msg)
    got = [int.from_bytes(d[i:i + 4], sys.byteorder) for level, kind, d in anc
           if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS for i in range(0, len(d) - 3, 4)]
    try:  # what could fail is said to the worker before any of the program runs: the machine's, never a verdict
        if len(got) != len(wanted):
            raise ValueError("descriptors")
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # as a cold launch sets it: SIGXCPU, then SIGKILL
    except (ValueError, OSError):
        s.send(b"0")
        posix._exit(70)
    s.send(b"1")
    s.close()
    for name in ("_socket", "resource"):
        del sys.modules[name]
    above = max([2, *got, *wanted]) + 1
    for i, fd in enumerate(got):
        posix.dup2(fd, above + i)
        posix.close(fd)
    for i, want in enumerate(wanted):
        posix.dup2(above + i, want)
        posix.close(above + i)
    g = sys.modules["__main__"].__dict__
    for name in [n for n in g if n not in ("__name__", "__doc__", "__package__", "__loader__", "__spec__",
                                          "__annotations__", "__builtins__")]:
        del g[name]
    sys.argv = list(argv)
    path = argv[0] if argv[0].startswith("/") else posix.getcwd() + "/" + argv[0]  # as the interpreter makes it
    g["__file__"], g["__cached__"] = path, None
    g["__loader__"] = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec")
        exec(code, g)
    except SystemExit:
        raise
    except BaseException as e:
        e.__traceback__ = e.__traceback__.tb_next  # the stub's frame is not the program's
        sys.excepthook(type(e), e, e.__traceback__)
        if isinstance(e, KeyboardInterrupt):  # the interpreter ends by SIGINT then, as a shell expects
            import _signal
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
            posix.kill(posix.getpid(), _signal.SIGINT)
        raise SystemExit(1)
_stub(int(__import__("sys").argv[1]))
""" % {"fds": FDS_MAX}


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


@dataclass(frozen=True)
class Shape:
    """What a warm sandbox is made for: a run of another shape cannot use it. Its limits leave out the run's wall
    and CPU time, which the stub sets per run (a stage's cases share a budget: the last ones get less); `cpu` is
    the CPU limit it is launched with, the most a run it serves may have."""

    python: str
    limits: Limits
    env: tuple[tuple[str, str], ...]
    mode: str
    piped: bool  # stdin, stdout and stderr are pipes (a supervised run's), or /dev/null and a file (a spawned one's)
    root: tuple[str, ...] = ()  # the root it is built with, as the settings of the moment make it (hidden paths...)
    cpu: int = field(default=1, compare=False)

    def launched(self) -> Limits:
        """The limits its sandbox is launched with."""
        return replace(self.limits, cpu_s=float(self.cpu))


def shape_of(argv: Sequence[str], limits: Limits, env: Mapping[str, str], mode: str, python: str,
             fds: Sequence[int] = (), piped: bool = False,
             root: Callable[[], Sequence[str]] = tuple) -> Shape | None:
    """The shape of a run a warm sandbox could serve: `python -I -S script ...` with the sandbox's interpreter,
    contained, handed at most `FDS_MAX` descriptors, each below its descriptor limit (the stub places them
    there); else None. `root`: the root a run would be built with now (read only for a run that has a shape), so
    that a sandbox parked before the operator's settings changed (a store to hide, a tree to allow) is not used."""
    if mode != "root" or len(argv) < 4 or argv[0] != python or tuple(argv[1:3]) != FLAGS or argv[3].startswith("-"):
        return None
    if len(fds) > FDS_MAX or any(fd < 3 or fd >= limits.nofile - FDS_MAX - 1 for fd in fds):
        return None
    return Shape(argv[0], replace(limits, wall_s=0.0, cpu_s=None), tuple(sorted(env.items())), mode, piped,
                 tuple(root()), limits.cpu_seconds())


class Parked(Protocol):
    """What the warmer parks (`parked.Parked`): a launched sandbox of a shape, waiting for its run."""

    shape: Shape

    def alive(self) -> bool: ...

    def end(self) -> None:
        """Ends it unused: its programs killed, its remains left to the reaper."""


class Warmer:
    """At most one parked sandbox per process, and the thread that makes it (bubblewrap dies with the thread that
    started it, so the same thread starts them all, for the life of the process)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._parked: Parked | None = None
        self._wanted: tuple[Shape, Callable[[Shape], Parked | None]] | None = None
        self._making: Shape | None = None  # the shape of the sandbox being made
        self._cpu: dict[Shape, int] = {}  # per shape, the most CPU a run has asked for
        self._thread: threading.Thread | None = None
        self._closed = False

    def take(self, shape: Shape) -> Parked | None:
        """The parked sandbox if it is of `shape` and alive, else None (a parked one of another shape is ended).
        One of `shape` being made is waited for: it is further along than a cold start would be."""
        with self._cond:
            self._cond.wait_for(lambda: not self._coming(shape), SETTLE_S)
            parked, self._parked = self._parked, None
        if parked is None:
            return None
        if parked.shape == shape and parked.alive():
            return parked
        parked.end()
        return None

    def _coming(self, shape: Shape) -> bool:
        """Whether a sandbox of `shape` is being made or about to be (under the lock)."""
        return self._making == shape or (self._wanted is not None and self._wanted[0] == shape)

    def want(self, shape: Shape, make: Callable[[Shape], Parked | None]) -> None:
        """Asks for a sandbox of `shape` to be parked (after a run of that shape: the next is likely alike)."""
        if not enabled():
            return
        with self._cond:
            if len(self._cpu) > SHAPES_MAX:
                self._cpu.clear()
            # launched for the most CPU a run of its shape has had here: a stage's last cases, given less of a
            # shrinking budget, must not leave the next request's first case cold
            most = self._cpu[shape] = max(shape.cpu, self._cpu.get(shape, 0))
            shape = replace(shape, cpu=most)
            if self._closed or (self._parked is not None and self._parked.shape == shape
                                and self._parked.shape.cpu >= shape.cpu):
                return
            self._wanted = (shape, make)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="farm-sandbox-warmer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def parked(self) -> Shape | None:
        with self._cond:
            return self._parked.shape if self._parked is not None else None

    def settle(self, timeout_s: float | None = None) -> bool:
        """Waits until no sandbox is being made; False if one still is after `timeout_s`."""
        with self._cond:
            return self._cond.wait_for(lambda: self._wanted is None and self._making is None, timeout_s)

    def drop(self) -> None:
        """Ends the parked sandbox, if any (its uid is wanted for a run)."""
        with self._cond:
            parked, self._parked = self._parked, None
        if parked is not None:
            parked.end()

    def close(self) -> None:
        """Ends the parked sandbox and makes no more (an exiting process)."""
        with self._cond:
            self._closed = True
            self._wanted = None
            self._cond.wait_for(lambda: self._making is None, SETTLE_S)
            parked, self._parked = self._parked, None
        if parked is not None:
            parked.end()

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted is not None)
                (shape, make), self._wanted = self._wanted, None
                old, self._parked = self._parked, None
                self._making = shape
            made = None
            try:
                if old is not None:
                    old.end()
                made = make(shape)
            except BaseException:  # the next run starts cold, and says what is wrong as a cold run always did
                log.exception("sandbox: could not start a warm sandbox")
            finally:
                with self._cond:
                    if made is not None and not self._closed and self._parked is None:
                        self._parked, made = made, None
                    self._making = None
                    self._cond.notify_all()
            if made is not None:  # closed meanwhile: this thread must live on whatever ending it raises
                try:
                    made.end()
                except BaseException:
                    log.exception("sandbox: could not end a warm sandbox")

    def _forked(self) -> None:
        """In a fork's child: the parent's parked sandbox is the parent's; the child has none and no thread (and
        leaves its descriptors alone, as `remains` does)."""
        self._cond = threading.Condition()
        self._parked = self._wanted = self._thread = self._making = None
        self._closed = False


_warmer = Warmer()
os.register_at_fork(after_in_child=lambda: _warmer._forked())
atexit.register(lambda: _warmer.close())


def take(shape: Shape) -> Parked | None:
    return _warmer.take(shape)


def want(shape: Shape, make: Callable[[Shape], Parked | None]) -> None:
    _warmer.want(shape, make)


def parked() -> Shape | None:
    """The shape of the sandbox parked in this process, if any."""
    return _warmer.parked()


def settle(timeout_s: float | None = None) -> bool:
    return _warmer.settle(timeout_s)


def drop() -> None:
    _warmer.drop()


def close() -> None:
    _warmer.close()
