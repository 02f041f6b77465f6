"""`call`: run trusted verifier code on untrusted input (math-verify parses model output with sympy,
which evaluates strings) in a forked child: its own session, new network, IPC and UTS namespaces, an empty
read-only root (no file, socket or device of the host), the dedicated uid with fresh keyrings, every inherited
descriptor closed, the result back as JSON.

The child is the whole call: it may not fork (RLIMIT_NPROC of 1 under a uid no other process has), so its
rlimits (CPU, address space) bound the call as a cgroup would a run, and nothing it started can outlive it.
No cgroup: moving a process into one waits for an RCU grace period (7-8 ms here), a verdict's latency twice
over on a function problem.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import resource
import selectors
import signal
import time
import traceback
from typing import Any, Callable, Sequence

from workers.sandbox import isolation, live
from workers.sandbox.isolation import _environment, _libc
from workers.sandbox.limits import CallResult, Limits
from workers.sandbox.uids import lease_uid

_CLONE_NEWNET, _CLONE_NEWIPC, _CLONE_NEWUTS = 0x40000000, 0x08000000, 0x04000000
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
_KEYCTL_JOIN_SESSION_KEYRING, _KEYCTL_CLEAR, _KEY_SPEC_USER_KEYRING = 1, 7, -4


def _mapped_bytes() -> tuple[int, int]:
    """This process's address space and data segment, in bytes (/proc/self/statm: size, and data + stack)."""
    with open("/proc/self/statm") as statm:
        fields = statm.read().split()
    page = os.sysconf("SC_PAGE_SIZE")
    return int(fields[0]) * page, int(fields[5]) * page


def call(fn: Callable[[Any], Any], arg: Any, *, limits: Limits = Limits(), keep_fds: Sequence[int] = ()) -> CallResult:
    """fn(arg) in a forked, contained child; the result travels back as JSON over a pipe only the child
    and this process hold. Use for trusted code on untrusted input (a verifier parsing model output,
    tests calling the response's function), never for model-written programs (`run`). `keep_fds` stay
    open in the child (the pipes to a spawned program); every other inherited descriptor is closed."""
    m = isolation.mode()  # read on the module: one stand-in for the machine (a test's) reaches run and call
    lease = lease_uid(m)
    started = time.monotonic()
    read_fd, write_fd = os.pipe()
    forked: list[int] = []  # the child, once forked: what a scope's end kills (live.tracked)
    try:
        empty = _empty_root() if m == "root" else None
        try:
            with live.tracked(lambda: [_kill_child(child) for child in forked]):
                pid = os.fork()
                if pid == 0:  # the child: contain first, then compute; never returns
                    _child(fn, arg, limits, m, lease.uid, empty, read_fd, write_fd, keep_fds)
                forked.append(pid)
                os.close(write_fd)
                write_fd = -1
                data, timed_out, overflowed = _read_until(read_fd, started + limits.wall_s, limits.output_bytes)
                if timed_out or overflowed:
                    _kill_child(pid)
        except BaseException:
            for child in forked:  # reaped here, never left running (a run ended by its scope is killed already)
                _kill_child(child)
                os.waitpid(child, 0)
            raise
        _, status = os.waitpid(pid, 0)
        wall = time.monotonic() - started
        if timed_out:
            return CallResult(timed_out=True, wall_s=wall)
        if overflowed:
            return CallResult(ended=f"its result was longer than {limits.output_bytes} bytes", wall_s=wall)
        try:
            reply = json.loads(data)
        except ValueError:
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
                return CallResult(timed_out=True, wall_s=wall)
            why = (f"killed by {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
                   else f"exit status {os.WEXITSTATUS(status)}")
            return CallResult(ended=f"it ended without a result ({why})", wall_s=wall)
        return CallResult(value=reply.get("value"), error=reply.get("error", ""), wall_s=wall)
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
        lease.release()


def _read_until(fd: int, deadline: float, cap: int) -> tuple[bytes, bool, bool]:
    """What the child wrote, until it closed the pipe; and whether the deadline passed or the cap was passed
    (then the child is killed: left alone it would block on a full pipe)."""
    data = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(data), True, False
            if sel.select(timeout=left):
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return bytes(data), False, False
                data += chunk
                if len(data) > cap:
                    return b"", False, True


def _kill_child(pid: int) -> None:
    """The child and its session, from any thread: not reaped yet, its pid is still its own (before its setsid,
    it has no group of its own: the kill alone)."""
    for kill in (os.kill, os.killpg):
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _empty_root() -> str:
    """The root a verifier child sees: an empty directory it cannot write to (root-owned, 0555)."""
    return _empty_in(isolation.state_root())


@functools.lru_cache(maxsize=4)
def _empty_in(state: str) -> str:
    path = os.path.join(state, "empty")
    os.makedirs(path, mode=0o555, exist_ok=True)
    os.chmod(path, 0o555)
    return path


def _child(fn, arg, limits: Limits, m: str, uid: int | None, empty: str | None, read_fd: int, write_fd: int,
           keep_fds: Sequence[int] = ()) -> None:
    code = 70
    try:
        os.close(read_fd)
        os.setsid()
        low = 3
        for fd in sorted({write_fd, *keep_fds}):  # the worker's broker and database sockets stay out of reach
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 65536)
        # the caps bound what the call adds to the worker it was forked from: an absolute cap below what the
        # worker already maps (a big library, a CUDA context) would fail the verifier's allocations and turn
        # them into verdicts
        mapped, data = _mapped_bytes()
        if m != "uncontained":
            # no network, no IPC objects or abstract sockets of the host, no filesystem at all: what the
            # child computes with is what the worker had imported before the fork
            if _libc.unshare(_CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS) != 0:
                raise OSError(ctypes.get_errno(), "unshare failed")
            if empty is not None:
                os.chroot(empty)
            os.chdir("/")
        cpu = limits.cpu_seconds()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        if limits.memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (mapped + limits.memory_bytes,) * 2)
        if limits.data_bytes is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (data + limits.data_bytes,) * 2)
        # a contained call is one process: it may not fork (its uid has no other process), so its rlimits are the
        # whole call's and nothing it started can outlive it; uncontained, the limits' process count
        processes = 1 if m != "uncontained" else limits.nproc
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # a verifier writes no files
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.environ.clear()
        os.environ.update(_environment({}))
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        _fresh_keyrings()
        try:
            reply = {"value": fn(arg)}
        except Exception as exc:  # the verifier's own error on this input, reported to the stage
            reply = {"error": "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]}
        payload = json.dumps(reply).encode()
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - the child must never return into the worker's code
        code = 71
    finally:
        os._exit(code)


def _fresh_keyrings() -> None:
    """The kernel's keyrings outlive processes: a new empty session keyring, and this uid's user keyring
    cleared, so nothing an earlier call of the same uid stored there can be read (a pool uid serves many runs)."""
    if _SYS_KEYCTL is None:
        raise OSError(f"keyctl's system call number on {platform.machine()} is not known here")
    _libc.syscall(ctypes.c_long(_SYS_KEYCTL), ctypes.c_long(_KEYCTL_JOIN_SESSION_KEYRING), ctypes.c_long(0))
    if _libc.syscall(ctypes.c_long(_SYS_KEYCTL), ctypes.c_long(_KEYCTL_CLEAR), ctypes.c_long(_KEY_SPEC_USER_KEYRING)):
        raise OSError(ctypes.get_errno(), "cannot clear the user keyring")
