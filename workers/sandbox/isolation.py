"""The isolation mode of this machine (`mode()`: root, userns or uncontained) and the command chain
that contains a program in it (`_wrap`: unshare, a tmpfs-mounting /bin/sh init, setpriv, prlimit).

Also what a contained program may reach: its PATH, its interpreter, an environment built from nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shlex
import shutil
import site
import subprocess
import sysconfig
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
    mounts = " && ".join([*(f"{{ [ ! -d {d} ] || mount -t tmpfs -o {tmpfs} tmpfs {d}; }}" for d in ("/tmp", "/var/tmp", "/dev/shm")),
                          *(_hide(path) for path in hidden_paths())])
    drop = (["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--nnp",
             "--inh-caps=-all", "--bounding-set=-all", "--"] if uid is not None else [])
    # sh stays PID 1 of the namespace (it reaps orphans); when it exits every process left is killed.
    script = f'{mounts} || {{ echo "{_MOUNT_FAILED}" >&2; exit 125; }}; "$@"; exit $?'
    ns = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]
    if m == "userns":
        ns[1:1] = ["--user", "--map-root-user"]
    return [*ns, "--", "/bin/sh", "-c", script, "sandbox", *drop, *prlimit, *argv]


def hidden_paths() -> tuple[str, ...]:
    """What a sandboxed program must not read: where tests and reference answers live on a worker.

    The worker's site-packages (the bundled HumanEval data, any dataset a package ships), the
    operator's test-case store (`FARM_TESTCASES=dir:PATH`) and `FARM_SANDBOX_HIDE` (paths joined by
    `:`). Sandboxed programs use the system interpreter with the standard library only (`-I -S`) and
    the compilers, none of which reads these. Read on every run: the operator's settings may change.
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


def _hide(path: str) -> str:
    """A shell step, run as the namespace's root before the uid drop, that covers path with nothing.

    A path this root cannot even read (userns mode under another user's home) is hidden already, so a
    mount refused there is not a failure; any other refusal fails the run closed.
    """
    quoted = shlex.quote(path)
    if os.path.isdir(path):
        cover = f"mount -t tmpfs -o size=4k,mode=0555,ro,nosuid,nodev tmpfs {quoted}"
    else:
        cover = f"mount --bind /dev/null {quoted}"
    return f"{{ {cover} 2>/dev/null || ! [ -r {quoted} ]; }}"


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    """Built from nothing: no FARM_*, broker, database or cloud variables can leak in."""
    env = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.update({k: os.environ[k] for k in _PASS_THROUGH if k in os.environ})
    env.update(extra)
    return env
