"""A cpuacct cgroup (v1) per role, for bench/cost.py: every process a role's process starts lands in its group,
so its CPU is counted even where /proc's reaped-children totals lose it (bubblewrap's PID namespace is killed
as a whole at the end of a run, and its processes are not reaped by their parents)."""

from __future__ import annotations

import os
import time
import uuid

CPUACCT = "/sys/fs/cgroup/cpuacct"


def available(base: str = CPUACCT) -> bool:
    """A cpuacct hierarchy this process may make groups in."""
    return os.path.isfile(os.path.join(base, "cpuacct.usage")) and os.access(base, os.W_OK)


class CpuGroups:
    """Groups `<base>/farm-bench-<id>/<role>`; `usage_ms()` is each one's CPU so far, dead processes included."""

    def __init__(self, base: str = CPUACCT) -> None:
        self.base = base
        self.home = os.path.join(base, f"farm-bench-{uuid.uuid4().hex[:8]}")
        os.mkdir(self.home)
        self.roles: dict[str, str] = {}

    def _dir(self, role: str) -> str:
        if role not in self.roles:
            path = os.path.join(self.home, role.replace(" ", "_").replace("/", "_"))
            os.makedirs(path, exist_ok=True)
            self.roles[role] = path
        return self.roles[role]

    def move(self, pid: int, role: str) -> bool:
        """Put a process (all its threads; what it forks from now on follows) in its role's group."""
        try:
            with open(os.path.join(self._dir(role), "cgroup.procs"), "w") as f:
                f.write(str(pid))
            return True
        except ProcessLookupError:
            return False

    def usage_ms(self) -> dict[str, float]:
        out = {}
        for role, path in self.roles.items():
            with open(os.path.join(path, "cpuacct.usage")) as f:
                out[role] = int(f.read()) / 1e6
        return out

    def close(self, wait_s: float = 5.0) -> None:
        """Move what is left to the hierarchy's root and remove the groups."""
        for path in self.roles.values():
            deadline = time.monotonic() + wait_s
            while True:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    left = [int(p) for p in f.read().split()]
                for pid in left:
                    try:
                        with open(os.path.join(self.base, "cgroup.procs"), "w") as f:
                            f.write(str(pid))
                    except ProcessLookupError:
                        pass
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        os.rmdir(self.home)
