"""A Docker image for tests on a machine without a registry: an empty root filesystem, imported.

Containers of it run this machine's own Python, site-packages and checkout, bind-mounted read-only at
the same paths, so they run the real `farm worker` of the tree under test. It weighs a few hundred
bytes: with the vfs storage driver every container copies its image, so a small one starts fast.
See docker/README.md.
"""

from __future__ import annotations

import io
import os
import site
import sys
import tarfile
from pathlib import Path
from typing import Any

TAG = "reward-farm-test-worker:1"  # bump when the root filesystem below changes
ROOT = Path(__file__).resolve().parents[2]

_DIRS = ("usr", "etc", "tmp", "proc", "sys", "dev", "root", "run", "var", "var/tmp", "sbin")
# /sbin is a real directory: the engine mounts its init (docker-init) at /sbin/docker-init
_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64"}


def rootfs() -> bytes:
    """The tarball of the image's root filesystem: directories, the /usr links, a passwd for root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in _DIRS:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name in ("tmp", "var/tmp") else 0o755
            tar.addfile(info)
        for name, target in _LINKS.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), ("etc/group", "root:x:0:\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def ensure_image(client, tag: str = TAG) -> str:
    """The test image, imported once per engine (`docker import` of `rootfs()`)."""
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        repository, _, version = tag.partition(":")
        client.api.import_image_from_data(rootfs(), repository=repository, tag=version or "latest")
    return tag


def host_mounts() -> dict[str, dict[str, str]]:
    """This machine's Python, its packages and the checkout, read-only at the same paths."""
    paths = {"/usr", sys.base_prefix, sys.prefix, str(ROOT)}
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and os.path.isdir(user_site):
        paths.add(user_site)
    paths.update(p for p in sys.path if os.path.isabs(p) and os.path.isdir(p) and not p.startswith(("/usr/", *(q + "/" for q in paths))))
    return {p: {"bind": p, "mode": "ro"} for p in sorted(paths) if os.path.isdir(p)}


def backend_options(client) -> dict[str, Any]:
    """Keyword arguments for `DockerBackend` that run the real `farm worker` in the test image."""
    from planner.backends.local import default_command

    image = ensure_image(client)
    bindir = os.path.dirname(sys.executable)
    return {
        "image": image,
        "gpu_image": image,
        "network": "host",  # the test engine runs with --bridge=none: the host's Redis at 127.0.0.1
        "volumes": host_mounts(),
        "command": default_command(),
        # PYTHONPATH: the checkout under test, also where the installed package points at another (a worktree)
        "env": {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONPATH": str(ROOT)},
        "client": client,
    }
