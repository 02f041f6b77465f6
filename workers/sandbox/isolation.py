"""The isolation this machine gives a run (`mode()`, said once at a worker's start by `describe()`), and what a
contained program may reach: its PATH, its interpreter, an environment built from nothing, the hidden paths.

A contained run (`root` mode: the worker runs as root, as in our images) runs under bubblewrap, the tool Flatpak
relies on, as the run's unprivileged uid, in the run's cgroup with its rlimits (`launch`). bubblewrap makes new
user, mount, PID, network, IPC, UTS and cgroup namespaces, builds the allow-list root (`root`), forbids further
user namespaces and runs the program as the `sandbox` user with no capabilities and no new privileges.

Without root, bubblewrap and a writable cgroup hierarchy the sandbox fails closed (`SandboxUnavailable`),
unless the operator sets `FARM_SANDBOX_ALLOW_UNCONTAINED=1`: rlimits only, no namespaces (a loud warning;
for a development machine, never for a farm).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import site
import subprocess
import sysconfig
from typing import Mapping

from workers.sandbox import cgroups, launch, launcher, warm
from workers.sandbox.limits import SandboxUnavailable

log = logging.getLogger(__name__)

SANDBOX_PATH = "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin"
_PASS_THROUGH = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")  # a GPU worker owns its device

_libc = ctypes.CDLL(None, use_errno=True)


def python_executable() -> str:
    """The interpreter for model-written Python: the system's, whose tree the sandbox's root holds."""
    configured = os.environ.get("FARM_SANDBOX_PYTHON")
    if configured:
        return configured
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3") or "python3"


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
    needed = ("bwrap",) if launcher.path() is not None else ("bwrap", "setpriv", "prlimit")  # built on first use
    missing = [name for name in needed if launch.tool(name) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (bubblewrap, util-linux)"
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
    bwrap = launch.tool("bwrap") or "bwrap"
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    hierarchy = cgroups.probe()
    first = "the farm's launcher" if launcher.path() is not None else "prlimit and setpriv (no launcher built)"
    return (f"sandbox: {version}, allow-list root, namespaces user/mount/pid/net/ipc/uts/cgroup; per-run "
            f"memory and process limits by {hierarchy.describe()}; rlimits and uid by {first}; "
            f"{'Python scripts sandboxed ahead of their runs' if warm.enabled() else 'every sandbox cold'} "
            f"({warm.ENV})")


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
