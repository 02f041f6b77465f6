"""The root a sandboxed program sees, made from an allow-list: nothing of the host exists inside unless named here.

- read-only: `/usr` (interpreters, compilers and their libraries; the CUDA toolkit under /usr/local) and the
  merged-/usr links or directories beside it (/bin, /lib, ...); the interpreter's own tree where it lives
  elsewhere (`FARM_SANDBOX_PYTHON`); trees the operator adds (`FARM_SANDBOX_TREES`, paths joined by `:`);
- a minimal /etc made by the farm, one read-only mount (passwd and group naming the sandbox user, hosts; copies
  of the host's dynamic linker cache and configuration, alternatives links and localtime), never the host's;
- private and size-capped: the working directory (`/work`, the run's tmpfs), /tmp and /dev/shm;
- a minimal /dev (null, zero, full, random, urandom, tty, a private pts) and, for GPU runs, the NVIDIA nodes;
- its own /proc (its PID namespace only).

Inside the allowed trees, every Python package directory (site-packages, dist-packages) and every hidden path
(`isolation.hidden_paths`: where tests and reference answers live) is covered by an empty read-only tmpfs, so
neither a program nor a compiler reads them. No /run, /var, /sys, /home, /root, /opt or socket exists inside.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import os
import shutil
import stat
import time
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


class _Watch:
    """The paths a result was made from, each with its stamp (type, inode, size, modification and change
    times): the result holds while every stamp does. A directory's stamp moves when an entry is added, removed
    or replaced (the only way to change a link), a file's when it is written. Not trusted while a change is
    too recent to tell a second one in the same clock tick apart (by its ctime: the kernel's clock at the
    change, which no one can set ahead)."""

    _SETTLED_NS = 2_000_000_000

    def __init__(self) -> None:
        self.stamps: dict[tuple[str, bool], tuple | None] = {}  # (path, links followed): the first stamp seen
        self.recent = False
        self._settled = time.time_ns() - self._SETTLED_NS

    def stat(self, path: str, follow: bool = True) -> os.stat_result | None:
        st = _stat(path, follow)
        self.stamps.setdefault((path, follow), self._fields(st))
        self.recent = self.recent or (st is not None and st.st_ctime_ns >= self._settled)
        return st

    def listing(self, path: str) -> dict[str, bool]:
        """A directory's entries (name: whether it is a link), empty where there is none."""
        st = self.stat(path)
        if st is None or not stat.S_ISDIR(st.st_mode):
            return {}
        try:
            with os.scandir(path) as it:
                return {e.name: e.is_symlink() for e in sorted(it, key=lambda e: e.name)}
        except OSError:
            return {}

    def holds(self) -> bool:
        return not self.recent and all(self._fields(_stat(path, follow)) == fields
                                       for (path, follow), fields in self.stamps.items())

    @staticmethod
    def _fields(st: os.stat_result | None) -> tuple | None:
        return st and (st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stat(path: str, follow: bool) -> os.stat_result | None:
    try:
        return os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None


_made: dict[tuple, tuple[_Watch, object]] = {}  # what a call made, by its arguments, with what it was made from


def _remembered(key: tuple, make) -> object:
    """`make(watch)`'s result for `key`, made again only when a path it was made from has changed."""
    known = _made.get(key)
    if known is not None and known[0].holds():
        return known[1]
    watch = _Watch()
    result = make(watch)
    if not watch.recent:
        _made[key] = (watch, result)
    return result


def masks(bound: Sequence[str], hidden: Sequence[str]) -> tuple[str, ...]:
    """Directories and files inside the bound trees that must look empty: Python packages and hidden paths.
    (Found again only when a directory on the way changes: the search costs more than a few stats.)"""
    return _remembered(("masks", tuple(bound), tuple(hidden)), lambda watch: _masks(bound, hidden, watch))


def _masks(bound: Sequence[str], hidden: Sequence[str], watch: _Watch) -> tuple[str, ...]:
    found: list[str] = []
    for tree in bound:
        for pattern in _PACKAGE_DIRS:
            for path in _matches(tree, pattern, watch):
                st = watch.stat(path)  # where a link leads (the link itself is in its directory's stamp)
                real = os.path.realpath(path)
                if st and stat.S_ISDIR(st.st_mode) and real not in found and any(_under(real, t) for t in bound):
                    found.append(real)
    for path in hidden:
        if any(_under(path, t) for t in bound) and path not in found and not any(_under(path, f) for f in found):
            found.append(path)
    return tuple(sorted(found))


def _matches(tree: str, pattern: str, watch: _Watch) -> list[str]:
    """The paths under `tree` that the glob `pattern` names, as `glob.glob` finds them."""
    paths = [tree]
    for part in pattern.split("/"):
        if glob.has_magic(part):
            paths = [os.path.join(p, name) for p in paths for name in fnmatch.filter(watch.listing(p), part)]
        else:
            paths = [os.path.join(p, part) for p in paths if part in watch.listing(p)]
    return paths


def etc_dir(state_root: str, host: str = "/etc") -> str:
    """The sandbox's whole /etc, bound as one mount (each mount costs bubblewrap a pass over the mount table):
    the farm's own files beside copies of the host's linker configuration, alternatives links and localtime,
    as the host has them now. Written once per content under `state_root` (root-owned, read-only inside);
    the host's entries are read again only when one changed, so an `ldconfig` or `update-alternatives`
    reaches the next run, as it did when each was bound from the host."""
    path = _remembered(("etc", state_root, host), lambda watch: _etc(state_root, host, watch))
    if not os.path.isdir(path):  # its state directory was cleared under a running worker
        _made.pop(("etc", state_root, host), None)
        path = _remembered(("etc", state_root, host), lambda watch: _etc(state_root, host, watch))
    return path


def _etc(state_root: str, host: str, watch: _Watch) -> str:
    entries = _farm_entries() + _host_entries(host, watch)
    key = hashlib.sha256(repr(entries).encode()).hexdigest()[:12]
    path = os.path.join(state_root, f"etc-{key}")
    if not os.path.isdir(path):
        _write_tree(path, entries)
    return path


def _farm_entries() -> list[tuple]:
    files = {
        "passwd": f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n{USER}:x:{UID}:{UID}:{USER}:/tmp:/bin/sh\n"
                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\n{USER}:x:{UID}:\nnogroup:x:65534:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
        "hostname": "sandbox\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    }
    return [(name, "f", 0o644, None, text.encode()) for name, text in sorted(files.items())]


def _host_entries(host: str, watch: _Watch) -> list[tuple]:
    """The host's entries as a bind mount of each showed them: a top-level link followed, links inside the
    directories kept as links; (relative path, kind, mode, mtime ns, content or link target). (Not the access
    time: every read moves it; the copies take their modification time for it.) Sockets, FIFOs and device
    nodes are left out: inside a bind they were unusable (nodev, nobody's). Each stamp is taken before its
    read, so a change during the read is seen by the next run's check."""
    found: list[tuple] = []

    def add(rel: str, full: str, st: os.stat_result) -> None:
        try:
            if stat.S_ISLNK(st.st_mode):
                found.append((rel, "l", None, st.st_mtime_ns, os.readlink(full)))
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as fh:
                    found.append((rel, "f", stat.S_IMODE(st.st_mode), st.st_mtime_ns, fh.read()))
        except FileNotFoundError:  # removed since its stamp was taken: the next check sees it
            return
        if stat.S_ISDIR(st.st_mode):
            found.append((rel, "d", stat.S_IMODE(st.st_mode), st.st_mtime_ns, None))
            for name, link in watch.listing(full).items():
                inner = os.path.join(full, name)
                # a link is in its directory's stamp; anything else may change in place
                child = _stat(inner, follow=False) if link else watch.stat(inner, follow=False)
                if child is not None:
                    add(f"{rel}/{name}", inner, child)

    for name in _ETC_LINKED:
        st = watch.stat(os.path.join(host, name))
        if st is not None:  # else absent, or a dangling link: not bound before either
            add(name, os.path.realpath(os.path.join(host, name)), st)
    return found


def _write_tree(path: str, entries: list[tuple]) -> None:
    """Writes `entries` as a directory at `path` in one rename (another worker may be writing the same)."""
    staging = f"{path}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging, mode=0o755)
    os.chmod(staging, 0o755)
    dirs = []
    for rel, kind, mode, mtime, data in entries:
        dest = os.path.join(staging, rel)
        if kind == "l":
            os.symlink(data, dest)
        elif kind == "d":
            os.mkdir(dest)
            dirs.append((dest, mode, mtime))
            continue  # its mode and times once its entries are in
        else:
            with open(dest, "wb") as fh:
                fh.write(data)
            os.chmod(dest, mode)
        if mtime is not None:
            os.utime(dest, ns=(mtime, mtime), follow_symlinks=False)
    for dest, mode, mtime in reversed(dirs):
        os.chmod(dest, mode)
        os.utime(dest, ns=(mtime, mtime))
    try:
        os.rename(staging, path)
    except OSError:  # another worker made it first
        shutil.rmtree(staging, ignore_errors=True)


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
    args += ["--ro-bind", etc_dir(state_root), "/etc"]
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
