"""The process records of local workers: one JSON file per worker, `<dir>/<name>.json`, beside the worker's
log (`<name>.log`) and, for a worker the launcher forked, the pid it wrote itself (`<name>.pid`).

A record is written before its process starts and replaced atomically after every change, so a daemon
that dies at any moment leaves a record a restarted one can act on (planner.backends.local), and the next
farm of a data dir finds the workers a killed one left (farm.app.leftovers).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


class Records:
    """The records of one farm namespace's local workers."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.json"

    def log_path(self, name: str) -> Path:
        return self.dir / f"{name}.log"

    def pid_path(self, name: str) -> Path:
        return self.dir / f"{name}.pid"

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    def load(self, name: str) -> dict | None:
        return self._read(self.path(name))

    def all(self) -> Iterator[dict]:
        """Every readable record, by file name."""
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("*.json")):
            record = self._read(path)
            if record is not None:
                yield record

    def save(self, record: dict) -> None:
        path = self.path(record["name"])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)

    def remove(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def written_pid(self, name: str) -> int | None:
        """The pid a launched worker wrote for itself, if that process still leads its own session."""
        try:
            pid = int(self.pid_path(name).read_text().strip())
            return pid if os.getsid(pid) == pid else None
        except (OSError, ValueError):
            return None

    @staticmethod
    def _read(path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:  # a torn write cannot happen (atomic replace); anything else is not ours
            log.warning("ignoring unreadable worker record %s", path)
            return None
