"""cgroup v1: a `memory` and a `pids` hierarchy, each its own mount (as on this project's test machines), and
`freezer` where it is mounted, so that a run is frozen while its processes are killed."""

from __future__ import annotations

import os

from workers.sandbox.cgroups.base import CgroupsUnavailable, Hierarchy, counted, kill_freezing, kill_listed, read, write
from workers.sandbox.cgroups.mounts import Mount, inside, writable, writable_parent

REQUIRED = ("memory", "pids")
PARENT = "farm-sandbox"


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
            write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
            swap = os.path.join(memory, "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):  # only with swap accounting: memory + swap at the same cap, so no swap
                write(swap, str(memory_bytes))
        write(os.path.join(pid_group, "pids.max"), str(pids))

    def kill(self, group):
        freezer = group.paths[2] if len(group.paths) > 2 else None
        if freezer is None:
            kill_listed(group)
            return
        state = os.path.join(freezer, "freezer.state")
        # writing FROZEN starts freezing; the state reads FROZEN once every task is
        kill_freezing(group, lambda on: write(state, "FROZEN" if on else "THAWED"),
                      lambda: (read(state) or "").strip() == "FROZEN")

    def oom_killed(self, group):
        oom = read(os.path.join(group.paths[0], "memory.oom_control")) or ""  # its oom_kill count: Linux 4.13
        return counted(oom, "oom_kill") > 0


def make(mounts: list[Mount], own: dict[str, str], relative: str | None) -> V1:
    """This machine's v1 hierarchies, with the runs' parent groups made; CgroupsUnavailable if it has none."""
    by_controller = {c: m for m in mounts if m.kind == "cgroup" for c in m.options}
    missing = [c for c in REQUIRED if c not in by_controller]
    if missing:
        raise CgroupsUnavailable(f"cgroup v1 lacks a {' and '.join(missing)} hierarchy")
    for controller in REQUIRED:
        by_controller[controller] = writable(by_controller[controller])
    def parent(controller: str) -> str:
        return writable_parent(inside(by_controller[controller], relative or f"{own.get(controller, '/')}/{PARENT}"))

    freezer = None
    if "freezer" in by_controller:
        try:
            by_controller["freezer"] = writable(by_controller["freezer"])
            freezer = parent("freezer")
        except (OSError, CgroupsUnavailable):
            freezer = None
    return V1(tuple(parent(c) for c in REQUIRED), freezer)
