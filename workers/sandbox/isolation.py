"""The isolation mode of this machine (`mode()`: root, userns or uncontained) and the command chain
that contains a program in it (`_wrap`: unshare, a tmpfs-mounting /bin/sh init, setpriv, prlimit).

Also what a contained program may reach: its PATH, its interpreter, an environment built from nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import subprocess
from typing import Mapping, Sequence

from workers.sandbox.limits import Limits, SandboxUnavailable

log = logging.getLogger(__name__)

SANDBOX_PATH = "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin"
_PASS_THROUGH = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")  # a GPU worker owns its device
_MOUNT_FAILED = "farm-sandbox: cannot mount the private tmpfs"

_libc = ctypes.CDLL(None, use_errno=True)


def python_executable() -> str:
    """The interpreter for model-written Python: one the sandbox uid can run (pyenv under /root cannot)."""
    configured = os.environ.get("FARM_SANDBOX_PYTHON")
    if configured:
        return configured
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3") or "python3"


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


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    """Built from nothing: no FARM_*, broker, database or cloud variables can leak in."""
    env = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.update({k: os.environ[k] for k in _PASS_THROUGH if k in os.environ})
    env.update(extra)
    return env
