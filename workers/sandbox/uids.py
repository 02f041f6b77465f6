"""The pool of dedicated sandbox uids (`FARM_SANDBOX_UIDS`, default 61000-61999): each run leases one
through an flock on its lock file, so no two runs share a uid outside their namespaces (nor a user keyring,
nor RLIMIT_NPROC's count).

The leases also tell which working directories a killed worker left behind: those of a free uid.
"""

from __future__ import annotations

import fcntl
import functools
import os
import random
import shutil

from workers.sandbox import cgroups, remains, warm
from workers.sandbox.isolation import _libc
from workers.sandbox.limits import SandboxUnavailable
from workers.sandbox.workdir import _MNT_DETACH, sandbox_root


_CHOICE = random.SystemRandom()


def uid_range() -> range:
    raw = os.environ.get("FARM_SANDBOX_UIDS", "61000-61999")
    try:
        low, _, high = raw.partition("-")
        r = range(int(low), int(high or low) + 1)
    except ValueError:
        raise SandboxUnavailable(f"FARM_SANDBOX_UIDS must look like 61000-61999, not {raw!r}") from None
    if not r or r.start <= 0:
        raise SandboxUnavailable(f"FARM_SANDBOX_UIDS {raw!r} is empty or includes root")
    return r


class _Lease:
    """One uid of the pool, held through an flock on its lock file for as long as a run uses it."""

    def __init__(self, uid: int | None, fd: int | None) -> None:
        self.uid, self._fd = uid, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _try_lock(uid: int) -> int | None:
    locks = os.path.join(sandbox_root(), ".uids")
    os.makedirs(locks, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(locks, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def lease_uid(m: str) -> _Lease:
    if m != "root":
        return _Lease(None, None)
    sweep_stale()
    uids = uid_range()
    lease = _free(uids)
    if lease is None:  # this process's parked sandbox and its runs' remains hold uids: have them back, look again
        warm.drop()
        remains.settle(remains.SETTLE_S)
        lease = _free(uids)
    if lease is None:
        raise SandboxUnavailable(f"all {len(uids)} sandbox uids are busy (FARM_SANDBOX_UIDS)")
    return lease


def _free(uids: range) -> _Lease | None:
    start = _CHOICE.randrange(len(uids))  # not the global random: a test or a library may seed that
    for i in range(len(uids)):
        uid = uids[(start + i) % len(uids)]
        fd = _try_lock(uid)
        if fd is not None:
            return _Lease(uid, fd)
    return None


@functools.lru_cache(maxsize=1)
def sweep_stale() -> None:
    """Once per process: what a worker killed mid-run left (working directories, run cgroups and their
    processes). Each is named after its run's uid, whose lock is held for the whole run: a free lock means stale."""
    root = sandbox_root()
    names = os.listdir(root) if os.path.isdir(root) else []
    hierarchy = cgroups.probe() if os.geteuid() == 0 else None
    groups = hierarchy.stale() if isinstance(hierarchy, cgroups.Hierarchy) else []
    pool = uid_range()
    for name in sorted(set(names) | set(groups)):
        parts = name.split("-")
        # only this pool's: the run groups are the machine's, the locks this root's (a pool is one farm's alone)
        if len(parts) != 3 or parts[0] != "run" or not parts[1].isdigit() or int(parts[1]) not in pool:
            continue
        fd = _try_lock(int(parts[1]))
        if fd is None:
            continue  # a run is using that uid right now
        try:
            if name in groups:
                hierarchy.adopt(name).remove()  # kills what is left in it first
            path = os.path.join(root, name)
            if name in names:
                _libc.umount2(path.encode(), _MNT_DETACH)  # fails harmlessly where it is a plain directory
                shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
