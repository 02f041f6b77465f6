"""Per-run resource control: every sandboxed run is a cgroup of its own, so memory and the number of processes
are capped for the run as a whole (three forked children cannot each take the limit), and everything the run
started can be found and killed at its end.

One small interface (`base.Hierarchy`: make a run's group, kill everything in it, read what it used, remove it)
and a module per cgroup version: `v1` (a `memory` and a `pids` hierarchy, as on this project's test machines) and
`v2` (one unified hierarchy with both controllers, as in containers and current distributions). `probe()` picks
the one this machine has, once per process, or says why neither can be used (the sandbox then refuses to run
untrusted code).

Where the groups live: under `FARM_SANDBOX_CGROUP` (a path inside the hierarchy, from its root) where the
operator delegates one, else in `farm-sandbox/` under the worker's own group, so a worker's runs stay inside
whatever limits its own container or service has.
"""

from __future__ import annotations

import functools
import os

from workers.sandbox.cgroups import v1, v2
from workers.sandbox.cgroups.base import CgroupsUnavailable, Hierarchy, RunGroup, read
from workers.sandbox.cgroups.mounts import Mount, mounts, own_groups

__all__ = ["CgroupsUnavailable", "Hierarchy", "RunGroup", "probe"]


@functools.lru_cache(maxsize=1)
def probe() -> Hierarchy | str:
    """The hierarchy this process's runs use, or why there is none (read once per process)."""
    relative = os.environ.get("FARM_SANDBOX_CGROUP") or None
    try:
        found, own = mounts(), own_groups()
    except OSError as exc:
        return f"cannot read this process's cgroups ({exc})"
    reasons = []
    order = (v2, v1) if _has_v2_memory(found) else (v1, v2)
    for version in order:
        try:
            return version.make(found, own, relative)
        except (CgroupsUnavailable, OSError) as exc:
            reasons.append(str(exc))
    return "; ".join(reasons)


def _has_v2_memory(found: list[Mount]) -> bool:
    return any(m.kind == "cgroup2" and "memory" in (read(os.path.join(m.point, "cgroup.controllers")) or "").split()
               for m in found)
