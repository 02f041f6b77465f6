"""The compiled launcher (`launcher.c`): one static exec that sets a run's rlimits and uid before bubblewrap, in
place of util-linux's `prlimit` then `setpriv` (two execs of dynamically linked programs, about 2 ms of CPU a run
on this project's machines; bench/sandbox.py's cpu figures).

Built once per content of its source, with the machine's C compiler, into the sandbox's root-owned state
directory (`isolation.state_root`), which no run can see or write; a worker that finds it there uses it. Without
a compiler, or where the build fails, or with `FARM_SANDBOX_LAUNCHER=util-linux`, runs go through prlimit and
setpriv as before: the same limits, the same uid, one exec more.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("launcher.c")
CHOICE = "FARM_SANDBOX_LAUNCHER"  # "compiled" (the default: built if it can be) or "util-linux"
_COMPILERS = ("cc", "gcc", "clang")
_TOOLS = "/usr/bin:/bin:/usr/local/bin"  # not the PATH, as for the other launch tools
_BUILD_S = 60.0


def path() -> str | None:
    """The compiled launcher to exec, or None: runs then go through prlimit and setpriv."""
    choice = os.environ.get(CHOICE, "compiled")
    if choice == "util-linux":
        return None
    if choice != "compiled":
        raise ValueError(f"{CHOICE} must be 'compiled' or 'util-linux', not {choice!r}")
    from workers.sandbox.isolation import state_root

    found = built(state_root())
    if found is not None and not os.path.isfile(found):  # removed under a running worker: build it again
        built.cache_clear()
        found = built(state_root())
    return found


@functools.lru_cache(maxsize=4)
def built(state_root: str) -> str | None:
    """The launcher under `state_root` for this source, built now if it is not there yet; None if it cannot be."""
    try:
        source = SOURCE.read_bytes()
    except OSError as exc:  # an installation without its package data
        log.warning("sandbox: the launcher's source is missing (%s): runs start through prlimit and setpriv", exc)
        return None
    target = os.path.join(state_root, f"launcher-{hashlib.sha256(source).hexdigest()[:16]}")
    if not _root_only(state_root):
        log.error("sandbox: %s is not root's alone (owned by root, written by no one else): the launcher is not "
                  "built or run from there; runs start through prlimit and setpriv", state_root)
        return None
    if os.path.isfile(target) and os.access(target, os.X_OK):
        if _root_only(target):
            return target
        log.error("sandbox: %s is not root's alone: runs start through prlimit and setpriv", target)
        return None
    compiler = next((found for name in _COMPILERS if (found := shutil.which(name, path=_TOOLS))), None)
    if compiler is None:
        log.warning("sandbox: no C compiler (cc, gcc, clang): runs start through prlimit and setpriv, one exec more")
        return None
    fd, staging = tempfile.mkstemp(prefix=".launcher-", dir=state_root)
    os.close(fd)
    try:
        why = ""
        for static in (["-static"], []):  # static where the C library's archive is installed: no dynamic linking
            try:  # the bytes hashed above, from stdin: the name always says what was built
                done = subprocess.run([compiler, "-x", "c", "-O2", "-Wall", *static, "-o", staging, "-"],
                                      input=source, capture_output=True, timeout=_BUILD_S)
            except (OSError, subprocess.SubprocessError) as exc:
                why = str(exc)
                continue
            if done.returncode == 0:
                break
            why = done.stderr.decode(errors="replace").strip()[-300:]
        else:
            log.warning("sandbox: the launcher did not build (%s): runs start through prlimit and setpriv", why)
            return None
        os.chmod(staging, 0o755)
        os.replace(staging, target)  # atomic: a worker beside this one sees the whole file or none
        return target
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def _root_only(path: str) -> bool:
    """Owned by root and writable by no one else: the worker execs it as root (and the run's limits come from it)."""
    st = os.stat(path)
    return st.st_uid == 0 and not st.st_mode & 0o022
