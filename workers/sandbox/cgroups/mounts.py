"""Where this process's cgroups are: the cgroup mounts (/proc/self/mountinfo), its own groups (/proc/self/cgroup),
and a read-only mount made writable where this process may."""

from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass, replace

from workers.sandbox.cgroups.base import CgroupsUnavailable, log

_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND = 2, 4, 8, 32, 4096
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Mount:
    point: str
    root: str  # the directory of the hierarchy this mount shows (not "/" where a container bind-mounts its own)
    kind: str  # "cgroup" or "cgroup2"
    options: frozenset[str]  # the hierarchy's: its controllers
    readonly: bool  # this mount's own flag: a container's engine mounts its cgroups read-only


def mounts() -> list[Mount]:
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append(Mount(_unescape(fields[4]), _unescape(fields[3]), tail[0], frozenset(tail[2].split(",")),
                                    "ro" in fields[5].split(",")))
    return found


def writable(mount: Mount) -> Mount:
    """A read-only cgroup mount made writable where this process may (root with CAP_SYS_ADMIN in a worker
    container: the mount shows only the container's own subtree, so its runs' groups nest inside its limits)."""
    if not mount.readonly:
        return mount
    flags = _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    if _libc.mount(None, mount.point.encode(), None, flags, None) != 0:
        raise CgroupsUnavailable(f"{mount.point} is mounted read-only and cannot be made writable here "
                                 f"({os.strerror(ctypes.get_errno())})")
    log.warning("sandbox: remounted %s read-write, for the runs' cgroups", mount.point)
    return replace(mount, readonly=False)


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def own_groups() -> dict[str, str]:
    """This process's group per v1 controller, and under "" its v2 group."""
    groups = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                groups[controller.removeprefix("name=")] = path
    return groups


def inside(mount: Mount, path: str) -> str:
    """The directory of a group (a path from the hierarchy's root, as /proc/self/cgroup writes it) in this mount."""
    root = mount.root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    return os.path.join(mount.point, path.lstrip("/"))


def writable_parent(path: str) -> str:
    os.makedirs(path, mode=0o755, exist_ok=True)
    if not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, "not writable", path)
    return path


