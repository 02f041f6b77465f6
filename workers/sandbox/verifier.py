"""`call`: run trusted verifier code on untrusted input (math-verify parses model output with sympy,
which evaluates strings) in a forked child: its own session, a new network namespace, rlimits, the
dedicated uid, every inherited descriptor closed, the result back as JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import selectors
import signal
import time
import traceback
from typing import Any, Callable, Sequence

from workers.sandbox import isolation
from workers.sandbox.isolation import _environment, _libc
from workers.sandbox.limits import CallResult, Limits
from workers.sandbox.uids import lease_uid

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000


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
    try:
        pid = os.fork()
        if pid == 0:  # the child: contain first, then compute; never returns
            _child(fn, arg, limits, m, lease.uid, read_fd, write_fd, keep_fds)
        os.close(write_fd)
        write_fd = -1
        data, timed_out = _read_until(read_fd, started + limits.wall_s, limits.output_bytes)
        if timed_out:
            _kill_pid_group(pid)
        _, status = os.waitpid(pid, 0)
        wall = time.monotonic() - started
        if timed_out:
            return CallResult(timed_out=True, wall_s=wall)
        try:
            reply = json.loads(data)
        except ValueError:
            why = (f"killed by {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
                   else f"exit status {os.WEXITSTATUS(status)}")
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
                return CallResult(timed_out=True, wall_s=wall)
            return CallResult(error=f"verifier child ended without a result ({why})", wall_s=wall)
        return CallResult(value=reply.get("value"), error=reply.get("error", ""), wall_s=wall)
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
        lease.release()


def _read_until(fd: int, deadline: float, cap: int) -> tuple[bytes, bool]:
    data = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(data), True
            if sel.select(timeout=left):
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return bytes(data), False
                data += chunk
                if len(data) > cap:
                    return b"", False


def _kill_pid_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _child(fn, arg, limits: Limits, m: str, uid: int | None, read_fd: int, write_fd: int,
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
        if m != "uncontained":
            flags = _CLONE_NEWNET | (_CLONE_NEWUSER if m == "userns" else 0)
            if _libc.unshare(flags) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
        cpu = limits.cpu_seconds()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        # the caps bound what the call adds to the worker it was forked from: an absolute cap below what the
        # worker already maps (a big library, a CUDA context) would fail the verifier's allocations and turn
        # them into verdicts
        mapped, data = _mapped_bytes()
        if limits.memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (mapped + limits.memory_bytes,) * 2)
        if limits.data_bytes is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (data + limits.data_bytes,) * 2)
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.nproc, limits.nproc))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # a verifier writes no files
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.environ.clear()
        os.environ.update(_environment({}))
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        os.chdir("/")
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
