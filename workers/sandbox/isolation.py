"""The isolation this machine gives a run (`mode()`, said once at a worker's start by `describe()`), and the
launch that puts one program in it (`Launch`).

A contained run (`root` mode: the worker runs as root, as in our images) is one exec of bubblewrap, the tool
Flatpak relies on, from a child of the worker that has first joined the run's cgroup (`cgroups`), set its
rlimits and dropped to the run's unprivileged uid. bubblewrap then, unprivileged, makes new user, mount, PID,
network, IPC, UTS and cgroup namespaces, builds the allow-list root (`root`), forbids further user namespaces
and runs the program as the `sandbox` user with no capabilities and no new privileges.

Without root, bubblewrap and a writable cgroup hierarchy the sandbox fails closed (`SandboxUnavailable`),
unless the operator sets `FARM_SANDBOX_ALLOW_UNCONTAINED=1`: rlimits only, no namespaces (a loud warning;
for a development machine, never for a farm).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import resource
import shutil
import site
import subprocess
import sysconfig
from typing import Mapping, Sequence

from workers.sandbox import cgroups, root
from workers.sandbox.limits import Limits, SandboxUnavailable

log = logging.getLogger(__name__)

SANDBOX_PATH = "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin"
_PASS_THROUGH = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")  # a GPU worker owns its device
_LAUNCHER_PROCESSES = 2  # bubblewrap's monitor and its PID namespace's init, besides the program's own
_NAMESPACES = ["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
               "--unshare-cgroup-try", "--disable-userns", "--uid", str(root.UID), "--gid", str(root.UID),
               "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]

_libc = ctypes.CDLL(None, use_errno=True)


def python_executable() -> str:
    """The interpreter for model-written Python: the system's, whose tree the sandbox's root holds."""
    configured = os.environ.get("FARM_SANDBOX_PYTHON")
    if configured:
        return configured
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3") or "python3"


def bwrap() -> str | None:
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")  # not the PATH: no stand-in launcher


class Launch:
    """How one contained program starts: the command line (bubblewrap and the program) and what the child
    does between fork and exec (`setup`: join the run's cgroup, set rlimits, become the run's uid)."""

    def __init__(self, m: str, argv: Sequence[str], limits: Limits, uid: int | None,
                 group: cgroups.RunGroup | None, workdir: str) -> None:
        self.limits, self.uid, self.group = limits, uid, group
        self.contained = m != "uncontained"
        if not self.contained:
            self.argv, self.cwd = list(argv), workdir
        else:
            args = root.bwrap_args(python=python_executable(), hidden=hidden_paths(), workdir=workdir, limits=limits,
                                   state_root=state_root())
            self.argv, self.cwd = [_bwrap_or_fail(), *_NAMESPACES, *args, "--", *argv], "/"

    def setup(self) -> None:
        """In the child, before exec; only async-signal-safe work in spirit: a few writes and system calls."""
        if self.group is not None:
            self.group.join()
        limits = self.limits
        cpu = limits.cpu_seconds()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL
        if self.group is None:  # uncontained; a contained run's cap is its cgroup's pids.max
            processes = limits.nproc + _LAUNCHER_PROCESSES
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        # not RLIMIT_NPROC where a cgroup caps the run: it counts per uid, and a previous run's processes, killed but
        # not yet reaped by the host's init, would count against a later run given the same uid
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.nofile, limits.nofile))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if limits.memory_bytes is not None:  # per process: a clean MemoryError before the run's cgroup kills
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        if limits.data_bytes is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (limits.data_bytes, limits.data_bytes))
        if self.uid is not None:
            os.setgroups([])
            os.setresgid(self.uid, self.uid, self.uid)
            os.setresuid(self.uid, self.uid, self.uid)

    def processes(self) -> int:
        """The run cgroup's pids.max: the program's processes plus the launcher's own."""
        return self.limits.nproc + _LAUNCHER_PROCESSES


def _bwrap_or_fail() -> str:
    path = bwrap()
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
    return path


def state_root() -> str:
    """Where the sandbox keeps what it makes once (its /etc): beside the working directories, root-owned."""
    from workers.sandbox.workdir import sandbox_root

    path = os.path.join(sandbox_root(), ".state")
    os.makedirs(path, mode=0o755, exist_ok=True)
    return path


@functools.lru_cache(maxsize=1)
def mode() -> str:
    """'root' or 'uncontained' (only when allowed); raises SandboxUnavailable otherwise."""
    reason = _why_not_contained()
    if reason is None:
        return "root"
    if os.environ.get("FARM_SANDBOX_ALLOW_UNCONTAINED") == "1":
        log.warning("sandbox: NO CONTAINMENT (%s): untrusted code runs with rlimits only, with network "
                    "access, as this user. FARM_SANDBOX_ALLOW_UNCONTAINED=1 is for development only.", reason)
        return "uncontained"
    raise SandboxUnavailable(f"cannot contain untrusted code on this machine ({reason}); "
                             "set FARM_SANDBOX_ALLOW_UNCONTAINED=1 only on a development machine")


def _why_not_contained() -> str | None:
    if os.geteuid() != 0:
        return "the worker is not root: the sandbox needs root to give each run a uid and a cgroup of its own"
    if bwrap() is None:
        return "bubblewrap (bwrap) is not installed"
    hierarchy = cgroups.probe()
    if isinstance(hierarchy, str):
        return f"no cgroup hierarchy for per-run limits: {hierarchy}"
    from workers.sandbox.program import probe_run  # the probe is a real run, through the code every run takes

    return probe_run()


def describe() -> str:
    """One line for a worker's start: what contains the code it runs (raises SandboxUnavailable if nothing)."""
    m = mode()
    if m == "uncontained":
        return "sandbox: NONE (FARM_SANDBOX_ALLOW_UNCONTAINED=1): rlimits only, for development"
    version = subprocess.run([_bwrap_or_fail(), "--version"], capture_output=True, text=True).stdout.strip()
    hierarchy = cgroups.probe()
    return (f"sandbox: {version}, allow-list root, namespaces user/mount/pid/net/ipc/uts/cgroup; per-run "
            f"memory and process limits by {hierarchy.describe()}")


def hidden_paths() -> tuple[str, ...]:
    """Where tests and reference answers live on a worker: covered inside the allowed trees, if they are there.

    The worker's site-packages (the bundled HumanEval data, any dataset a package ships), the operator's
    test-case store (`FARM_TESTCASES=dir:PATH`) and `FARM_SANDBOX_HIDE` (paths joined by `:`). Outside the
    allow-list they do not exist for a run at all. Read on every run: the operator's settings may change.
    """
    paths = list(_site_directories())
    store = os.environ.get("FARM_TESTCASES", "")
    if store.startswith(("dir:", "/")):
        paths.append(store.removeprefix("dir:"))
    paths += os.environ.get("FARM_SANDBOX_HIDE", "").split(":")
    found = []
    for path in paths:
        real = os.path.realpath(path) if path else ""
        if real and real != "/" and os.path.exists(real) and real not in found:
            found.append(real)
    return tuple(found)


@functools.lru_cache(maxsize=1)
def _site_directories() -> tuple[str, ...]:
    dirs = [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"]]
    return tuple(dict.fromkeys(d for d in dirs if d))


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    """Built from nothing: no FARM_*, broker, database or cloud variables can leak in."""
    env = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.update({k: os.environ[k] for k in _PASS_THROUGH if k in os.environ})
    env.update(extra)
    return env
