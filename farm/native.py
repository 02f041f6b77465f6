"""Small C helpers the farm builds for itself (the sandbox's launcher, the planner's sweeps): compiled once per
content of their source with the machine's C compiler, kept in a directory that only this user can write, and
used from there only while that holds. Where one cannot be built (no compiler, a failed build, a directory others
can write), `build` says why in the log and returns None, and the caller takes its portable path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from typing import Sequence

log = logging.getLogger(__name__)

COMPILERS = ("cc", "gcc", "clang")
TOOLS = "/usr/bin:/bin:/usr/local/bin"  # not the PATH: a compiler found there could be anyone's
BUILD_S = 60.0


def owned(path: str) -> bool:
    """This user's alone: owned by it and writable by no one else (what is exec'd or loaded from there runs as it)."""
    st = os.stat(path)
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def build(source: bytes, directory: str, name: str, variants: Sequence[Sequence[str]],
          compilers: Sequence[str] = COMPILERS) -> str | None:
    """The path of `source` built as `directory/name-<hash of source>` with the first of `variants` (compiler
    flags) that builds; what is there already when it is. None (and a log line) where it cannot be built or used."""
    target = os.path.join(directory, f"{name}-{hashlib.sha256(source).hexdigest()[:16]}")
    if not owned(directory):
        log.error("%s: %s is not this user's alone (owned by it, written by no one else): not built or used from "
                  "there", name, directory)
        return None
    if os.path.isfile(target):
        if owned(target):
            return target
        log.error("%s: %s is not this user's alone: not used", name, target)
        return None
    compiler = next((found for c in compilers if (found := shutil.which(c, path=TOOLS))), None)
    if compiler is None:
        log.warning("%s: no C compiler (%s): not built", name, ", ".join(compilers))
        return None
    fd, staging = tempfile.mkstemp(prefix=f".{name}-", dir=directory)
    os.close(fd)
    try:
        why = ""
        for flags in variants:
            try:  # the bytes hashed above, from stdin: the name always says what was built
                done = subprocess.run([compiler, "-x", "c", *flags, "-o", staging, "-"], input=source,
                                      capture_output=True, timeout=BUILD_S)
            except (OSError, subprocess.SubprocessError) as exc:
                why = str(exc)
                continue
            if done.returncode == 0:
                break
            why = done.stderr.decode(errors="replace").strip()[-300:]
        else:
            log.warning("%s: did not build (%s)", name, why)
            return None
        os.chmod(staging, 0o755)
        os.replace(staging, target)  # atomic: a process beside this one sees the whole file or none
        return target
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
