"""The root a sandboxed program sees, made from an allow-list: nothing of the host exists inside unless named here.

- read-only: `/usr` (interpreters, compilers and their libraries; the CUDA toolkit under /usr/local) and the
  merged-/usr links or directories beside it (/bin, /lib, ...); the interpreter's own tree where it lives
  elsewhere (`FARM_SANDBOX_PYTHON`); trees the operator adds (`FARM_SANDBOX_TREES`, paths joined by `:`);
- a minimal /etc made by the farm (passwd and group naming the sandbox user, hosts, the dynamic linker's
  cache and configuration, the alternatives links), never the host's;
- private and size-capped: the working directory (`/work`, the run's tmpfs), /tmp and /dev/shm;
- a minimal /dev (null, zero, full, random, urandom, tty, a private pts) and, for GPU runs, the NVIDIA nodes;
- its own /proc (its PID namespace only).

Inside the allowed trees, every Python package directory (site-packages, dist-packages) and every hidden path
(`isolation.hidden_paths`: where tests and reference answers live) is covered by an empty read-only tmpfs, so
neither a program nor a compiler reads them. No /run, /var, /sys, /home, /root, /opt or socket exists inside.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import shutil
from typing import Sequence

from workers.sandbox.limits import Limits

WORKDIR = "/work"  # the working directory's path inside every run
USER, UID = "sandbox", 1000  # who a program is inside (outside it is its run's uid from the pool)
_TOP = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_LINKED = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
_PACKAGE_DIRS = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages",
                 "local/lib/python3*/site-packages", "local/lib/python3*/dist-packages",
                 "lib64/python3*/site-packages")
_GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


def trees(python: str) -> tuple[str, ...]:
    """The host directories bound read-only, besides /usr and the top-level merged-/usr entries."""
    found: list[str] = []
    prefix = _prefix_of(python)
    if prefix and not _under(prefix, "/usr"):
        found.append(prefix)
    for tree in os.environ.get("FARM_SANDBOX_TREES", "").split(":"):
        real = os.path.realpath(tree) if tree else ""
        if real and real != "/" and os.path.isdir(real) and not any(_under(real, t) for t in ("/usr", *found)):
            found.append(real)
    return tuple(found)


def _prefix_of(python: str) -> str | None:
    """The installation an interpreter belongs to (/usr for /usr/bin/python3), from where its binary lives."""
    path = shutil.which(python) if not os.path.isabs(python) else python
    if not path:
        return None
    real = os.path.realpath(path)
    return os.path.dirname(os.path.dirname(real)) if os.path.basename(os.path.dirname(real)) == "bin" else None


def _under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def masks(bound: Sequence[str], hidden: Sequence[str]) -> tuple[str, ...]:
    """Directories and files inside the bound trees that must look empty: Python packages and hidden paths."""
    found: list[str] = []
    for tree in bound:
        for pattern in _PACKAGE_DIRS:
            for path in glob.glob(os.path.join(tree, pattern)):
                real = os.path.realpath(path)
                if os.path.isdir(real) and real not in found and any(_under(real, t) for t in bound):
                    found.append(real)
    for path in hidden:
        if any(_under(path, t) for t in bound) and path not in found and not any(_under(path, f) for f in found):
            found.append(path)
    return tuple(sorted(found))


@functools.lru_cache(maxsize=4)
def etc_dir(state_root: str) -> str:
    """The farm's /etc for sandboxes, written once per content under `state_root` (root-owned, read-only)."""
    files = {
        "passwd": f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n{USER}:x:{UID}:{UID}:{USER}:/tmp:/bin/sh\n"
                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\n{USER}:x:{UID}:\nnogroup:x:65534:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
        "hostname": "sandbox\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    }
    key = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:12]
    path = os.path.join(state_root, f"etc-{key}")
    if not os.path.isdir(path):
        staging = f"{path}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging, mode=0o755)
        for name, text in files.items():
            with open(os.path.join(staging, name), "w") as fh:
                fh.write(text)
            os.chmod(os.path.join(staging, name), 0o644)
        try:
            os.rename(staging, path)
        except OSError:  # another worker made it first
            shutil.rmtree(staging, ignore_errors=True)
    return path


def bwrap_args(*, python: str, hidden: Sequence[str], workdir: str, limits: Limits, state_root: str) -> list[str]:
    """bubblewrap's arguments for the root of one run (everything but the namespaces and the command)."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for name in _TOP:
        host = f"/{name}"
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    extra = trees(python)
    for tree in extra:
        args += ["--ro-bind", tree, tree]
    etc = etc_dir(state_root)
    args += ["--dir", "/etc"]
    for name in sorted(os.listdir(etc)):
        args += ["--ro-bind", os.path.join(etc, name), f"/etc/{name}"]
    for name in _ETC_LINKED:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for path in masks(("/usr", *extra), hidden):
        if os.path.isdir(path):
            args += ["--perms", "0555", "--size", "4096", "--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if limits.gpu:
        for node in [*_GPU_NODES, *sorted(glob.glob("/dev/nvidia[0-9]*"))]:
            if os.path.exists(node):
                args += ["--dev-bind", node, node]
    size = str(limits.disk_bytes)
    args += ["--perms", "1777", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
             "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
             "--bind", workdir, WORKDIR, "--remount-ro", "/", "--chdir", WORKDIR]
    return args
