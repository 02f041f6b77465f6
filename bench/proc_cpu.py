"""CPU of process trees from /proc, split by role, for bench/cost.py.

A tree's CPU is the sum, over its live processes, of utime + stime + cutime + cstime (/proc/<pid>/stat):
a process that ended and was reaped inside the tree left its whole CPU in its parent's cutime/cstime, so
the difference of two such sums is the tree's CPU in between, short-lived sandbox programs included. A
process's own ticks go to its role, its reaped children's to the role its children have (`Placed`), so
the split holds across a reap too. Only CPU of processes reparented out of the tree is lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Mapping

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    own: int  # utime + stime, clock ticks
    reaped: int  # cutime + cstime: the children it waited for, clock ticks


@dataclass(frozen=True)
class Placed:
    """Where a process's CPU goes: its own ticks to `role`, its reaped children's to `children`."""

    role: str
    children: str
    kind: str  # what it is, for placing its children: see `place`


def read(pid: int, task: int | None = None) -> Proc | None:
    """One process (or one of its threads), or None once it is gone."""
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    close = text.rindex(")")  # comm may hold spaces and parentheses
    fields = text[close + 2:].split()
    return Proc(task or pid, int(fields[1]), text[text.index("(") + 1:close], int(fields[11]) + int(fields[12]),
                int(fields[13]) + int(fields[14]))


def snapshot() -> dict[int, Proc]:
    """Every process on the machine."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            proc = read(int(name))
            if proc is not None:
                found[proc.pid] = proc
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def placed(snap: Mapping[int, Proc], roots: Mapping[int, Placed],
           place: Callable[[int, Placed], Placed]) -> dict[int, Placed]:
    """Every process under `roots`, placed by `place(child_pid, parent's placement)`."""
    children: dict[int, list[int]] = {}
    for proc in snap.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    out = {pid: p for pid, p in roots.items() if pid in snap}
    todo = list(out)
    while todo:
        parent = todo.pop()
        for child in children.get(parent, ()):
            if child not in out:
                out[child] = place(child, out[parent])
                todo.append(child)
    return out


def by_role(snap: Mapping[int, Proc], where: Mapping[int, Placed]) -> dict[str, float]:
    """CPU ms so far per role, over the placed processes."""
    ms: dict[str, float] = {}
    for pid, p in where.items():
        proc = snap[pid]
        ms[p.role] = ms.get(p.role, 0.0) + proc.own * TICK_MS
        ms[p.children] = ms.get(p.children, 0.0) + proc.reaped * TICK_MS
    return ms


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU ms per role between two `by_role` readings (roles with none left out)."""
    out = {role: after.get(role, 0.0) - before.get(role, 0.0) for role in set(before) | set(after)}
    return {role: ms for role, ms in out.items() if ms}


def threads(pid: int) -> dict[int, Proc]:
    """A process's threads, by thread id."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return {}
    found = {tid: read(pid, tid) for tid in tids}
    return {tid: t for tid, t in found.items() if t is not None}
