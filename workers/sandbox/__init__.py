"""The sandbox every piece of model-produced code runs in (and the verifiers that parse model output).

Two ways in, one set of limits (`Limits`):

- `run(argv, ...)` executes a program. The chain is made of util-linux tools, not a hand-written jail:
  `unshare --net --pid --fork --kill-child --mount --mount-proc` (no network: only a downed loopback;
  its own PID namespace, so every process it starts dies with it, even one that left the process group),
  a `/bin/sh` init that mounts size-capped tmpfs over /tmp, /var/tmp and /dev/shm, then
  `setpriv` to a dedicated unprivileged uid (no groups, no capabilities, no-new-privs) and `prlimit`
  (CPU seconds, address space or data size, process count, file size, open files, no core dumps).
  The working directory is a fresh tmpfs (its size is the disk quota), removed afterwards; the
  environment is rebuilt from nothing (PATH, HOME, LANG, TMPDIR and what the caller passes); stdout
  and stderr are capped (the group is killed at the cap); the wall limit kills the whole group.
- `call(fn, arg, ...)` runs trusted verifier code on untrusted input (math-verify parses model
  output with sympy, which evaluates strings) in a forked child: its own session, a new network
  namespace, rlimits, the dedicated uid, every inherited descriptor closed, the result back as JSON.

Each run holds one uid from a pool (`FARM_SANDBOX_UIDS`, default 61000-61999) through a lock file,
so RLIMIT_NPROC (counted per real uid) caps that run alone and a fork bomb cannot starve the worker
or a neighbouring sandbox. Modes, probed once per process (`mode()`):

- `root` (the worker runs as root, as in our images): everything above.
- `userns` (not root, unprivileged user namespaces allowed): the same namespaces via
  `unshare --user --map-root-user`, but no uid change: the process count is shared with the
  worker's own uid and the working directory is a plain directory (no disk quota beyond the
  per-file cap). A warning is logged.
- neither: the sandbox fails closed (`SandboxUnavailable`, which stages report as `infra_error`),
  unless the operator sets `FARM_SANDBOX_ALLOW_UNCONTAINED=1`, which runs with rlimits and a process
  group only, no namespaces (a loud warning; for development machines, never for a farm).
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import json
import logging
import os
import random
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

log = logging.getLogger(__name__)

MiB = 1 << 20
GiB = 1 << 30
SANDBOX_PATH = "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin"
_PASS_THROUGH = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")  # a GPU worker owns its device
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2
_MOUNT_FAILED = "farm-sandbox: cannot mount the private tmpfs"


class SandboxUnavailable(RuntimeError):
    """This machine cannot contain untrusted code (no namespaces, tools missing); fail closed."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    cpu_s: float | None = None  # None: the wall limit, rounded up
    memory_bytes: int | None = 1 * GiB  # RLIMIT_AS; None leaves address space free (CUDA maps huge ranges)
    data_bytes: int | None = None  # RLIMIT_DATA: the memory cap to use where RLIMIT_AS cannot be (GPU programs)
    nproc: int = 64
    file_bytes: int = 64 * MiB  # largest file the program may write
    disk_bytes: int = 256 * MiB  # the working directory's tmpfs (and each of /tmp, /var/tmp, /dev/shm)
    output_bytes: int = 4 * MiB  # per stream; past it the run is killed and marked output_exceeded
    nofile: int = 256

    def cpu_seconds(self) -> int:
        return max(1, int(-(-(self.cpu_s if self.cpu_s is not None else self.wall_s) // 1)))


@dataclass(frozen=True)
class RunResult:
    returncode: int | None  # exit status; None when killed by a signal
    signal: int | None  # the signal that ended the program, if one did
    stdout: bytes
    stderr: bytes
    wall_s: float
    timed_out: bool = False  # the wall limit, or the CPU limit (SIGXCPU)
    output_exceeded: bool = False
    files: Mapping[str, bytes] = field(default_factory=dict)  # the requested files the program left

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.output_exceeded

    def describe(self) -> str:
        """One line saying how the program ended, for result messages."""
        if self.timed_out:
            return f"time limit exceeded after {self.wall_s:.2f} s"
        if self.output_exceeded:
            return "output limit exceeded (killed)"
        if self.signal is not None:
            name = signal.Signals(self.signal).name if self.signal in signal.valid_signals() else str(self.signal)
            hint = {signal.SIGXFSZ: " (file size limit)", signal.SIGSEGV: " (segmentation fault)"}.get(self.signal, "")
            return f"killed by {name}{hint}"
        return f"exit status {self.returncode}"


@dataclass(frozen=True)
class CallResult:
    value: Any = None  # what fn returned (JSON round-tripped)
    error: str = ""  # fn raised: its traceback's last lines
    timed_out: bool = False
    wall_s: float = 0.0


# ---------------------------------------------------------------- configuration and mode


def sandbox_root() -> str:
    """Where working directories live; not under /tmp, which the sandbox covers with its own tmpfs."""
    default = "/var/lib/farm-sandbox" if os.geteuid() == 0 else os.path.join(tempfile.gettempdir(), "farm-sandbox")
    return os.environ.get("FARM_SANDBOX_ROOT") or default


def python_executable() -> str:
    """The interpreter for model-written Python: one the sandbox uid can run (pyenv under /root cannot)."""
    configured = os.environ.get("FARM_SANDBOX_PYTHON")
    if configured:
        return configured
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3") or "python3"


def _uid_range() -> range:
    raw = os.environ.get("FARM_SANDBOX_UIDS", "61000-61999")
    try:
        low, _, high = raw.partition("-")
        r = range(int(low), int(high or low) + 1)
    except ValueError:
        raise SandboxUnavailable(f"FARM_SANDBOX_UIDS must look like 61000-61999, not {raw!r}") from None
    if not r or r.start <= 0:
        raise SandboxUnavailable(f"FARM_SANDBOX_UIDS {raw!r} is empty or includes root")
    return r


_libc = ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def mode() -> str:
    """'root', 'userns' or 'uncontained' (only when allowed); raises SandboxUnavailable otherwise."""
    missing = [t for t in ("unshare", "setpriv", "prlimit") if shutil.which(t) is None]
    tried: list[str] = []
    if not missing:
        candidates = ["root"] if os.geteuid() == 0 else []
        candidates.append("userns")
        for m in candidates:
            try:
                probe = subprocess.run(_wrap(m, ["/bin/true"], Limits(), 65534 if m == "root" else None),
                                       capture_output=True, timeout=10, env={"PATH": SANDBOX_PATH})
            except (OSError, subprocess.TimeoutExpired) as exc:
                tried.append(f"{m}: {exc}")
                continue
            if probe.returncode == 0:
                if m == "userns":
                    log.warning("sandbox: not root; running in user namespaces without a dedicated uid "
                                "(process count shared with the worker's uid, no disk quota)")
                return m
            tried.append(f"{m}: {probe.stderr.decode(errors='replace').strip()[:200]}")
    reason = f"missing tools {missing}" if missing else "; ".join(tried)
    if os.environ.get("FARM_SANDBOX_ALLOW_UNCONTAINED") == "1":
        log.warning("sandbox: NO CONTAINMENT (%s): untrusted code runs with rlimits only, with network "
                    "access, as this user. FARM_SANDBOX_ALLOW_UNCONTAINED=1 is for development only.", reason)
        return "uncontained"
    raise SandboxUnavailable(f"cannot contain untrusted code on this machine ({reason}); "
                             "set FARM_SANDBOX_ALLOW_UNCONTAINED=1 only on a development machine")


def _wrap(m: str, argv: Sequence[str], limits: Limits, uid: int | None) -> list[str]:
    """The launcher chain around argv for a mode."""
    cpu = limits.cpu_seconds()
    rl = [f"--cpu={cpu}:{cpu + 1}", f"--nproc={limits.nproc}", f"--fsize={limits.file_bytes}",  # SIGXCPU, then SIGKILL
          f"--nofile={limits.nofile}", "--core=0"]
    if limits.memory_bytes is not None:
        rl.append(f"--as={limits.memory_bytes}")
    if limits.data_bytes is not None:
        rl.append(f"--data={limits.data_bytes}")
    prlimit = ["prlimit", *rl, "--"]
    if m == "uncontained":
        return [*prlimit, *argv]
    tmpfs = f"size={limits.disk_bytes},mode=1777,nosuid,nodev"
    mounts = " && ".join(f"{{ [ ! -d {d} ] || mount -t tmpfs -o {tmpfs} tmpfs {d}; }}" for d in ("/tmp", "/var/tmp", "/dev/shm"))
    drop = (["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--nnp",
             "--inh-caps=-all", "--bounding-set=-all", "--"] if uid is not None else [])
    # sh stays PID 1 of the namespace (it reaps orphans); when it exits every process left is killed.
    script = f'{mounts} || {{ echo "{_MOUNT_FAILED}" >&2; exit 125; }}; "$@"; exit $?'
    ns = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]
    if m == "userns":
        ns[1:1] = ["--user", "--map-root-user"]
    return [*ns, "--", "/bin/sh", "-c", script, "sandbox", *drop, *prlimit, *argv]


# ---------------------------------------------------------------- uid pool and working directory


class _Lease:
    """One uid of the pool, held through an flock on its lock file for as long as a run uses it."""

    def __init__(self, uid: int | None, fd: int | None) -> None:
        self.uid, self._fd = uid, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _try_lock(uid: int) -> int | None:
    locks = os.path.join(sandbox_root(), ".uids")
    os.makedirs(locks, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(locks, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _lease_uid(m: str) -> _Lease:
    if m != "root":
        return _Lease(None, None)
    _sweep_stale()
    uids = _uid_range()
    start = random.randrange(len(uids))
    for i in range(len(uids)):
        uid = uids[(start + i) % len(uids)]
        fd = _try_lock(uid)
        if fd is not None:
            return _Lease(uid, fd)
    raise SandboxUnavailable(f"all {len(uids)} sandbox uids are busy (FARM_SANDBOX_UIDS)")


@functools.lru_cache(maxsize=1)
def _sweep_stale() -> None:
    """Once per process: unmount and remove working directories left by a worker killed mid-run.
    A directory is named after its run's uid, whose lock is held for the whole run: a free lock means stale."""
    root = sandbox_root()
    if not os.path.isdir(root):
        return
    for name in os.listdir(root):
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "run" or not parts[1].isdigit():
            continue
        fd = _try_lock(int(parts[1]))
        if fd is None:
            continue  # a run is using that uid right now
        try:
            path = os.path.join(root, name)
            _libc.umount2(path.encode(), _MNT_DETACH)  # fails harmlessly where it is a plain directory
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)


class _Workdir:
    """A fresh private directory: a tmpfs of `disk_bytes` where we may mount, else a plain directory."""

    def __init__(self, m: str, uid: int | None, disk_bytes: int) -> None:
        root = sandbox_root()
        os.makedirs(root, mode=0o711, exist_ok=True)
        self.path = tempfile.mkdtemp(prefix=f"run-{uid}-" if uid is not None else "run-", dir=root)
        self.mounted = False
        if m == "root":
            opts = f"size={disk_bytes},mode=0700,uid={uid},gid={uid}".encode()
            if _libc.mount(b"tmpfs", self.path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) == 0:
                self.mounted = True
            else:
                _warn_once(f"sandbox: cannot mount a tmpfs working directory ({os.strerror(ctypes.get_errno())}); "
                           "no disk quota beyond the per-file cap")
                os.chown(self.path, uid, uid)
        elif uid is not None:
            os.chown(self.path, uid, uid)

    def write(self, files: Mapping[str, bytes | str], uid: int | None) -> None:
        for name, content in files.items():
            target = self._inside(name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(content.encode() if isinstance(content, str) else content)
            if uid is not None:
                os.chown(target, uid, uid)
            if name.endswith((".sh",)) or not os.path.splitext(name)[1]:
                os.chmod(target, 0o755)

    def read(self, names: Sequence[str], cap: int) -> dict[str, bytes]:
        found = {}
        for name in names:
            target = self._inside(name)
            if os.path.isfile(target) and not os.path.islink(target) and os.path.getsize(target) <= cap:
                with open(target, "rb") as fh:
                    found[name] = fh.read()
        return found

    def _inside(self, name: str) -> str:
        target = os.path.normpath(os.path.join(self.path, name))
        if not target.startswith(self.path + os.sep):
            raise ValueError(f"sandbox file name {name!r} leaves the working directory")
        return target

    def remove(self) -> None:
        if self.mounted and _libc.umount2(self.path.encode(), _MNT_DETACH) != 0:
            log.error("sandbox: cannot unmount %s: %s", self.path, os.strerror(ctypes.get_errno()))
        shutil.rmtree(self.path, ignore_errors=True)


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    """Built from nothing: no FARM_*, broker, database or cloud variables can leak in."""
    env = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.update({k: os.environ[k] for k in _PASS_THROUGH if k in os.environ})
    env.update(extra)
    return env


# ---------------------------------------------------------------- run a program


def run(argv: Sequence[str], *, files: Mapping[str, bytes | str] = {}, stdin: bytes = b"",
        limits: Limits = Limits(), collect: Sequence[str] = (), collect_bytes: int = 64 * MiB,
        env: Mapping[str, str] = {}) -> RunResult:
    """Run argv (relative paths resolve in the fresh working directory holding `files`) under the limits.

    Returns how it ended; raises SandboxUnavailable only when the machine cannot contain it.
    """
    m = mode()
    lease = _lease_uid(m)
    workdir = None
    try:
        workdir = _Workdir(m, lease.uid, limits.disk_bytes)
        workdir.write(files, lease.uid)
        cmd = _wrap(m, argv, limits, lease.uid)
        result = _supervise(cmd, workdir.path, _environment(env), stdin, limits)
        if result.returncode == 125 and _MOUNT_FAILED.encode() in result.stderr[-500:]:
            raise SandboxUnavailable(f"{_MOUNT_FAILED}: {result.stderr.decode(errors='replace').strip()[-300:]}")
        if collect:
            result = _with_files(result, workdir.read(collect, collect_bytes))
        return result
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


# ---------------------------------------------------------------- call trusted code on untrusted input


def call(fn: Callable[[Any], Any], arg: Any, *, limits: Limits = Limits()) -> CallResult:
    """fn(arg) in a forked, contained child; fn and its result must be picklable-free: the result
    travels as JSON. Use for verifiers that parse model output (not for model-written programs: `run`)."""
    m = mode()
    lease = _lease_uid(m)
    started = time.monotonic()
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # the child: contain first, then compute; never returns
            _child(fn, arg, limits, m, lease.uid, read_fd, write_fd)
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


def _child(fn, arg, limits: Limits, m: str, uid: int | None, read_fd: int, write_fd: int) -> None:
    code = 70
    try:
        os.close(read_fd)
        os.setsid()
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, 65536)  # the worker's broker and database sockets stay out of reach
        if m != "uncontained":
            flags = _CLONE_NEWNET | (_CLONE_NEWUSER if m == "userns" else 0)
            if _libc.unshare(flags) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
        cpu = limits.cpu_seconds()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        if limits.memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        if limits.data_bytes is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (limits.data_bytes, limits.data_bytes))
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
