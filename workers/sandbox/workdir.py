"""The private working directory of one run: a fresh tmpfs of `disk_bytes` (its size is the disk
quota) owned by the run's uid, under `sandbox_root()`, unmounted and removed afterwards. Inside the run it is
`/work`; its host path is never visible there.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import stat
import tempfile
from typing import Mapping, Sequence

from workers.sandbox.isolation import _libc
from workers.sandbox.limits import SandboxUnavailable

log = logging.getLogger(__name__)

_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2


def sandbox_root() -> str:
    """Where working directories live; not under /tmp, which the sandbox covers with its own tmpfs."""
    default = "/var/lib/farm-sandbox" if os.geteuid() == 0 else os.path.join(tempfile.gettempdir(), "farm-sandbox")
    return os.environ.get("FARM_SANDBOX_ROOT") or default


class _Workdir:
    """A fresh private directory: a tmpfs of `disk_bytes` for a contained run, a plain directory uncontained."""

    def __init__(self, m: str, uid: int | None, disk_bytes: int) -> None:
        root = sandbox_root()
        os.makedirs(root, mode=0o711, exist_ok=True)
        self.path = tempfile.mkdtemp(prefix=f"run-{uid}-" if uid is not None else "run-", dir=root)
        self.mounted = False
        if m == "root":
            opts = f"size={disk_bytes},mode=0700,uid={uid},gid={uid}".encode()
            if _libc.mount(b"tmpfs", self.path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
                why = os.strerror(ctypes.get_errno())
                os.rmdir(self.path)
                raise SandboxUnavailable(f"cannot mount the private tmpfs of a run's working directory ({why})")
            self.mounted = True
        elif uid is not None:
            os.chown(self.path, uid, uid)

    def write(self, files: Mapping[str, bytes | str], uid: int | None) -> None:
        for name, content in files.items():
            target = self._inside(name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(content.encode() if isinstance(content, str) else content)
            if uid is not None:
                os.chown(target, uid, uid)
            if name.endswith((".sh",)) or not os.path.splitext(name)[1]:
                os.chmod(target, 0o755)

    def read(self, names: Sequence[str], cap: int) -> dict[str, bytes]:
        """The named regular files the run left, each up to `cap` bytes. The worker reads them outside the
        sandbox, so a name that leads out through a symlink (a directory the program linked to /etc, say) is
        not followed: the resolved path must still be inside, and the file itself no link."""
        found = {}
        for name in names:
            target = self._inside(name)
            if not os.path.realpath(target).startswith(os.path.realpath(self.path) + os.sep):
                continue
            try:
                fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as fh:
                info = os.fstat(fh.fileno())
                if stat.S_ISREG(info.st_mode) and info.st_size <= cap:
                    found[name] = fh.read(cap + 1)[:cap]
        return found

    def _inside(self, name: str) -> str:
        target = os.path.normpath(os.path.join(self.path, name))
        if not target.startswith(self.path + os.sep):
            raise ValueError(f"sandbox file name {name!r} leaves the working directory")
        return target

    def remove(self) -> None:
        if self.mounted and _libc.umount2(self.path.encode(), _MNT_DETACH) != 0:
            log.error("sandbox: cannot unmount %s: %s", self.path, os.strerror(ctypes.get_errno()))
        shutil.rmtree(self.path, ignore_errors=True)
