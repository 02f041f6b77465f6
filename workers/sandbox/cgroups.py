"""Per-run resource control: every sandboxed run is a cgroup of its own, so memory and the number of processes
are capped for the run as a whole (three forked children cannot each take the limit), and everything the run
started can be found and killed at its end.

Two implementations of one small interface (`Hierarchy`: make a run's group, and read what the machine offers):
cgroup v1 (a `memory` and a `pids` hierarchy, as on this project's test machines) and cgroup v2 (one unified
hierarchy with the `memory` and `pids` controllers, as in containers and current distributions). `probe()`
picks the one the machine has, once per process; `None` with the reason when neither can be used, and the
sandbox then refuses to run untrusted code.

Where the groups live: under `FARM_SANDBOX_CGROUP` (a path inside the hierarchy, from its root) where the
operator delegates one, else in `farm-sandbox` under the worker's own group, so a worker's runs stay inside
whatever limits its own container or service has.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import signal
import time
from dataclasses import dataclass, replace

log = logging.getLogger(__name__)

PARENT = "farm-sandbox"
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND = 2, 4, 8, 32, 4096
_libc = ctypes.CDLL(None, use_errno=True)
_V1_REQUIRED = ("memory", "pids")
_V2_REQUIRED = ("memory", "pids")


class CgroupsUnavailable(RuntimeError):
    """This machine offers no cgroup hierarchy the sandbox can write to."""


@dataclass(frozen=True)
class Usage:
    """What a run used, read just before its group is removed."""

    memory_peak_bytes: int | None
    oom_killed: bool  # the kernel killed a process of the run at its memory limit


class RunGroup:
    """One run's group (one directory per hierarchy); `join_fds` are opened for the launcher to write its pid."""

    def __init__(self, hierarchy: "Hierarchy", paths: tuple[str, ...]) -> None:
        self.hierarchy, self.paths = hierarchy, paths
        self.join_fds: tuple[int, ...] = tuple(
            os.open(os.path.join(p, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC) for p in paths)

    def join(self) -> None:
        """Moves the calling process into the group: runs in the launcher's child, before anything else."""
        pid = str(os.getpid()).encode()
        for fd in self.join_fds:
            os.write(fd, pid)

    def close_fds(self) -> None:
        for fd in self.join_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.join_fds = ()

    def pids(self) -> list[int]:
        found: set[int] = set()
        for p in self.paths:
            try:
                with open(os.path.join(p, "cgroup.procs")) as fh:
                    found.update(int(line) for line in fh if line.strip())
            except FileNotFoundError:
                pass
        return sorted(found)

    def kill(self) -> None:
        """SIGKILL every process of the run, including any that left the launcher's process group."""
        self.hierarchy.kill(self)

    def usage(self) -> Usage:
        return self.hierarchy.usage(self)

    def remove(self, wait_s: float = 2.0) -> bool:
        """Kills what is left and removes the group; False (and a log line) when it stays busy: the sweep
        of the next worker start takes it then."""
        self.close_fds()
        deadline = time.monotonic() + wait_s
        for path in self.paths:
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.error("sandbox: cannot remove cgroup %s: %s", path, exc)
                        return False
                    self.kill()
                    time.sleep(0.01)
        return True


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _counted(text: str, key: str) -> int:
    """A counter from a flat-keyed cgroup file (`oom_kill 2`)."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _kill_listed(group: RunGroup) -> None:
    for _ in range(100):  # a process may fork between the read and the kill: read again until none is left
        pids = group.pids()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Hierarchy:
    """A cgroup version on this machine: where the sandbox's groups go and how a run's group is made."""

    version = 0

    def __init__(self, parents: tuple[str, ...]) -> None:
        self.parents = parents  # the directory that holds the runs' groups, one per hierarchy

    def describe(self) -> str:
        return f"cgroup v{self.version} at {', '.join(self.parents)}"

    def create(self, name: str, memory_bytes: int | None, pids: int) -> RunGroup:
        paths = []
        try:
            for parent in self.parents:
                path = os.path.join(parent, name)
                os.mkdir(path, 0o755)
                paths.append(path)
            self._limit(tuple(paths), memory_bytes, pids)
            return RunGroup(self, tuple(paths))
        except BaseException:
            for path in paths:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            raise

    def stale(self) -> list[str]:
        """Names of run groups under the parent (a killed worker's runs leave theirs)."""
        try:
            return sorted(n for n in os.listdir(self.parents[0]) if n.startswith("run-"))
        except FileNotFoundError:
            return []

    def adopt(self, name: str) -> RunGroup:
        group = RunGroup.__new__(RunGroup)
        group.hierarchy, group.paths, group.join_fds = self, tuple(os.path.join(p, name) for p in self.parents), ()
        return group

    def _limit(self, paths: tuple[str, ...], memory_bytes: int | None, pids: int) -> None:
        raise NotImplementedError

    def kill(self, group: RunGroup) -> None:
        raise NotImplementedError

    def usage(self, group: RunGroup) -> Usage:
        raise NotImplementedError


class V1(Hierarchy):
    """cgroup v1: a `memory` and a `pids` hierarchy (each its own mount), and `freezer` where mounted."""

    version = 1

    def __init__(self, parents: tuple[str, ...], freezer: str | None) -> None:
        super().__init__(parents if freezer is None else (*parents, freezer))
        self.memory_parent, self.pids_parent = parents
        self.freezer = freezer

    def _limit(self, paths, memory_bytes, pids):
        memory, pid_group = paths[0], paths[1]
        if memory_bytes is not None:
            _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
            swap = os.path.join(memory, "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):  # only with swap accounting: memory + swap at the same cap, so no swap
                _write(swap, str(memory_bytes))
        _write(os.path.join(pid_group, "pids.max"), str(pids))

    def kill(self, group):
        freezer = group.paths[2] if len(group.paths) > 2 else None
        if freezer:  # frozen, no process can fork between the read and the kill
            _write(os.path.join(freezer, "freezer.state"), "FROZEN")
        try:
            _kill_listed(group)
        finally:
            if freezer:
                _write(os.path.join(freezer, "freezer.state"), "THAWED")  # killed processes die once thawed

    def usage(self, group):
        memory = group.paths[0]
        peak = _read(os.path.join(memory, "memory.max_usage_in_bytes"))
        oom = _read(os.path.join(memory, "memory.oom_control")) or ""  # its oom_kill count: Linux 4.13
        return Usage(int(peak) if peak else None, _counted(oom, "oom_kill") > 0)


class V2(Hierarchy):
    """cgroup v2: one unified hierarchy; the parent has `memory` and `pids` in its subtree_control."""

    version = 2

    def _limit(self, paths, memory_bytes, pids):
        (path,) = paths
        if memory_bytes is not None:
            _write(os.path.join(path, "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(path, "memory.swap.max")):
                _write(os.path.join(path, "memory.swap.max"), "0")
        _write(os.path.join(path, "pids.max"), str(pids))

    def kill(self, group):
        (path,) = group.paths
        if os.path.exists(os.path.join(path, "cgroup.kill")):  # Linux 5.14: the kernel kills the group atomically
            try:
                _write(os.path.join(path, "cgroup.kill"), "1")
            except FileNotFoundError:
                return
            return
        _write(os.path.join(path, "cgroup.freeze"), "1")
        try:
            _kill_listed(group)
        finally:
            _write(os.path.join(path, "cgroup.freeze"), "0")

    def usage(self, group):
        (path,) = group.paths
        events = _read(os.path.join(path, "memory.events")) or ""
        peak = _read(os.path.join(path, "memory.peak"))  # Linux 5.19
        return Usage(int(peak) if peak else None, _counted(events, "oom_kill") > 0)


@dataclass(frozen=True)
class _Mount:
    point: str
    root: str  # the directory of the hierarchy this mount shows (not "/" where a container bind-mounts its own)
    kind: str  # "cgroup" or "cgroup2"
    options: frozenset[str]  # the hierarchy's: its controllers
    readonly: bool  # this mount's own flag: a container's engine mounts its cgroups read-only


def _mounts() -> list[_Mount]:
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append(_Mount(_unescape(fields[4]), _unescape(fields[3]), tail[0], frozenset(tail[2].split(",")),
                                    "ro" in fields[5].split(",")))
    return found


def _writable(mount: _Mount) -> _Mount:
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


def _own_groups() -> dict[str, str]:
    """This process's group per v1 controller, and under "" its v2 group."""
    groups = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                groups[controller.removeprefix("name=")] = path
    return groups


def _inside(mount: _Mount, path: str) -> str:
    """The directory of a group (a path from the hierarchy's root, as /proc/self/cgroup writes it) in this mount."""
    root = mount.root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    return os.path.join(mount.point, path.lstrip("/"))


def _writable_parent(path: str) -> str:
    os.makedirs(path, mode=0o755, exist_ok=True)
    if not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, "not writable", path)
    return path


def _v1(mounts: list[_Mount], own: dict[str, str], relative: str | None) -> V1:
    by_controller = {c: m for m in mounts if m.kind == "cgroup" for c in m.options}
    missing = [c for c in _V1_REQUIRED if c not in by_controller]
    if missing:
        raise CgroupsUnavailable(f"cgroup v1 lacks a {' and '.join(missing)} hierarchy")
    for controller in _V1_REQUIRED:
        by_controller[controller] = _writable(by_controller[controller])
    def parent(controller: str) -> str:
        return _writable_parent(_inside(by_controller[controller], relative or f"{own.get(controller, '/')}/{PARENT}"))

    freezer = None
    if "freezer" in by_controller:
        try:
            by_controller["freezer"] = _writable(by_controller["freezer"])
            freezer = parent("freezer")
        except (OSError, CgroupsUnavailable):
            freezer = None
    return V1(tuple(parent(c) for c in _V1_REQUIRED), freezer)


def _v2(mounts: list[_Mount], own: dict[str, str], relative: str | None) -> V2:
    unified = [m for m in mounts if m.kind == "cgroup2"]
    if not unified:
        raise CgroupsUnavailable("no cgroup v2 hierarchy is mounted")
    mount = _writable(unified[0])
    if relative is None:  # under the worker's own group, which must first hand the controllers down
        home = _inside(mount, own.get("", "/"))
        _require(home)
        if os.path.exists(os.path.join(home, "cgroup.type")):  # not the true root (a container's namespace root is not)
            _vacate(home)  # a group with controllers for its children may hold no processes itself
        _enable(home)
        parent = os.path.join(home, PARENT)
    else:  # a group the operator delegated
        parent = _inside(mount, relative)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    _require(parent)
    _enable(parent)
    return V2((_writable_parent(parent),))


def _require(directory: str) -> None:
    available = set((_read(os.path.join(directory, "cgroup.controllers")) or "").split())
    missing = [c for c in _V2_REQUIRED if c not in available]
    if missing:
        raise CgroupsUnavailable(f"cgroup v2 group {directory} lacks the {' and '.join(missing)} controller")


def _enable(directory: str) -> None:
    enabled = set((_read(os.path.join(directory, "cgroup.subtree_control")) or "").split())
    wanted = [c for c in _V2_REQUIRED if c not in enabled]
    if wanted:
        _write(os.path.join(directory, "cgroup.subtree_control"), " ".join(f"+{c}" for c in wanted))


def _vacate(home: str) -> None:
    """cgroup v2's rule of no internal processes: the worker's own group can hand controllers to children only
    once its processes sit in a leaf of their own (what a container's init does for nested containers)."""
    enabled = set((_read(os.path.join(home, "cgroup.subtree_control")) or "").split())
    if all(c in enabled for c in _V2_REQUIRED):
        return
    procs = (_read(os.path.join(home, "cgroup.procs")) or "").split()
    if not procs:
        return
    leaf = os.path.join(home, "farm-worker")
    os.makedirs(leaf, mode=0o755, exist_ok=True)
    for pid in procs:
        try:
            _write(os.path.join(leaf, "cgroup.procs"), pid)
        except OSError as exc:  # a process that exited meanwhile; a kernel thread cannot move
            if exc.errno not in (errno.ESRCH, errno.EINVAL):
                raise
    log.warning("sandbox: moved the %d processes of cgroup %s into %s, so that its runs get their own groups",
                len(procs), home, leaf)


@functools.lru_cache(maxsize=1)
def probe() -> Hierarchy | str:
    """The hierarchy this process's runs use, or why there is none (read once per process)."""
    relative = os.environ.get("FARM_SANDBOX_CGROUP") or None
    try:
        mounts, own = _mounts(), _own_groups()
    except OSError as exc:
        return f"cannot read this process's cgroups ({exc})"
    reasons = []
    order = (_v2, _v1) if _has_v2_memory(mounts) else (_v1, _v2)
    for make in order:
        try:
            return make(mounts, own, relative)
        except (CgroupsUnavailable, OSError) as exc:
            reasons.append(str(exc))
    return "; ".join(reasons)


def _has_v2_memory(mounts: list[_Mount]) -> bool:
    return any(m.kind == "cgroup2" and "memory" in (_read(os.path.join(m.point, "cgroup.controllers")) or "").split()
               for m in mounts)
