"""cgroup v2: one unified hierarchy with the `memory` and `pids` controllers (containers, current distributions).

Its rule of no internal processes shapes the setup: a group that hands controllers to its children may hold no
processes itself, so the worker first moves its own group's processes into a leaf (`farm-worker/`), as a
container's init does for nested containers, unless the operator delegates a group (`FARM_SANDBOX_CGROUP`).
"""

from __future__ import annotations

import errno
import os

from workers.sandbox.cgroups.base import CgroupsUnavailable, Hierarchy, counted, kill_freezing, log, read, write
from workers.sandbox.cgroups.mounts import Mount, inside, writable, writable_parent

REQUIRED = ("memory", "pids")
PARENT = "farm-sandbox"


class V2(Hierarchy):
    """cgroup v2: one unified hierarchy; the parent has `memory` and `pids` in its subtree_control."""

    version = 2

    def _limit(self, paths, memory_bytes, pids):
        (path,) = paths
        if memory_bytes is not None:
            write(os.path.join(path, "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(path, "memory.swap.max")):
                write(os.path.join(path, "memory.swap.max"), "0")
        write(os.path.join(path, "pids.max"), str(pids))

    def kill(self, group):
        (path,) = group.paths
        if os.path.exists(os.path.join(path, "cgroup.kill")):  # Linux 5.14: the kernel kills the group atomically
            try:
                write(os.path.join(path, "cgroup.kill"), "1")
            except FileNotFoundError:
                return
            return
        # frozen once cgroup.events says so
        kill_freezing(group, lambda on: write(os.path.join(path, "cgroup.freeze"), "1" if on else "0"),
                      lambda: counted(read(os.path.join(path, "cgroup.events")) or "", "frozen") == 1)

    def oom_killed(self, group):
        (path,) = group.paths
        return counted(read(os.path.join(path, "memory.events")) or "", "oom_kill") > 0


def make(mounts: list[Mount], own: dict[str, str], relative: str | None) -> V2:
    """This machine's v2 hierarchy, with the runs' parent group made; CgroupsUnavailable if it has none."""
    unified = [m for m in mounts if m.kind == "cgroup2"]
    if not unified:
        raise CgroupsUnavailable("no cgroup v2 hierarchy is mounted")
    mount = writable(unified[0])
    if relative is None:  # under the worker's own group, which must first hand the controllers down
        home = inside(mount, own.get("", "/"))
        _require(home)
        if os.path.exists(os.path.join(home, "cgroup.type")):  # not the true root (a container's namespace root is not)
            _vacate(home)  # a group with controllers for its children may hold no processes itself
        _enable(home)
        parent = os.path.join(home, PARENT)
    else:  # a group the operator delegated
        parent = inside(mount, relative)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    _require(parent)
    _enable(parent)
    return V2((writable_parent(parent),))


def _require(directory: str) -> None:
    available = set((read(os.path.join(directory, "cgroup.controllers")) or "").split())
    missing = [c for c in REQUIRED if c not in available]
    if missing:
        raise CgroupsUnavailable(f"cgroup v2 group {directory} lacks the {' and '.join(missing)} controller")


def _enable(directory: str) -> None:
    enabled = set((read(os.path.join(directory, "cgroup.subtree_control")) or "").split())
    wanted = [c for c in REQUIRED if c not in enabled]
    if wanted:
        write(os.path.join(directory, "cgroup.subtree_control"), " ".join(f"+{c}" for c in wanted))


def _vacate(home: str) -> None:
    """cgroup v2's rule of no internal processes: the worker's own group can hand controllers to children only
    once its processes sit in a leaf of their own (what a container's init does for nested containers)."""
    enabled = set((read(os.path.join(home, "cgroup.subtree_control")) or "").split())
    if all(c in enabled for c in REQUIRED):
        return
    procs = (read(os.path.join(home, "cgroup.procs")) or "").split()
    if not procs:
        return
    leaf = os.path.join(home, "farm-worker")
    os.makedirs(leaf, mode=0o755, exist_ok=True)
    for pid in procs:
        try:
            write(os.path.join(leaf, "cgroup.procs"), pid)
        except OSError as exc:  # a process that exited meanwhile; a kernel thread cannot move
            if exc.errno not in (errno.ESRCH, errno.EINVAL):
                raise
    log.warning("sandbox: moved the %d processes of cgroup %s into %s, so that its runs get their own groups",
                len(procs), home, leaf)
