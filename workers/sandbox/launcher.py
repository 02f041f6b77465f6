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
import logging
import os
from pathlib import Path

from farm import native

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("launcher.c")
CHOICE = "FARM_SANDBOX_LAUNCHER"  # "compiled" (the default: built if it can be) or "util-linux"
_COMPILERS = native.COMPILERS
_VARIANTS = (["-O2", "-Wall", "-static"], ["-O2", "-Wall"])  # static where libc.a is installed: no dynamic linking


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
    """The launcher under `state_root` for this source, built now if it is not there yet; None if it cannot be
    (the worker runs as root, so the directory and the file must be root's alone: `farm.native.owned`)."""
    try:
        source = SOURCE.read_bytes()
    except OSError as exc:  # an installation without its package data
        log.warning("sandbox: the launcher's source is missing (%s): runs start through prlimit and setpriv", exc)
        return None
    found = native.build(source, state_root, "launcher", _VARIANTS, _COMPILERS)
    if found is None:
        log.warning("sandbox: no launcher (see above): runs start through prlimit and setpriv, one exec more")
    return found
