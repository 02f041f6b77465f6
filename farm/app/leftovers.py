"""What an embedded farm killed hard left running, found and ended by the next farm of the same data dir.

The farm's children end with it where Linux can tie them to it (farm.processes.die_with_parent);
this is for the rest: where it cannot, or a child that did not heed its signal. As it starts, the farm
writes `processes.json` in its data dir: its own pid and start time, then each child's, with a word its
command line must hold. The next farm there finds the previous one dead (its pid gone, or another process's
now) and ends each child still running, and each local worker recorded under its namespace: only processes
whose start time is the recorded one and whose command line holds the word, never a pid reused since.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

from farm.processes import cmdline, process_start
from farm.worker_records import Records

log = logging.getLogger(__name__)

PROCESSES_FILE = "processes.json"
END_WAIT_S = 5.0  # a leftover that ignores SIGTERM this long is killed
WORKER_MARKERS = ("farm", "launcher_process")  # `farm worker`, or a worker the launcher forked (its command line)


class FarmRunning(RuntimeError):
    """Another farm runs (or is starting) from this data dir."""


class Ledger:
    """The processes of the farm running from one data dir, kept in `<data_dir>/processes.json`."""

    def __init__(self, data_dir: str | os.PathLike) -> None:
        self.data_dir = Path(os.path.expanduser(data_dir))
        self.path = self.data_dir / PROCESSES_FILE
        self._entry: dict | None = None

    def begin(self, namespace: str) -> list[int]:
        """End what a dead previous farm left here, then record this one; the pids ended."""
        ended = end_leftovers(self.data_dir)
        self._entry = {"pid": os.getpid(), "start": process_start(os.getpid()), "namespace": namespace,
                       "children": []}
        self._write()
        return ended

    def add(self, role: str, pid: int, marker: str) -> None:
        """A child of this farm, whose command line holds `marker`."""
        if self._entry is None:
            return
        self._entry["children"].append({"role": role, "pid": pid, "start": process_start(pid), "marker": marker})
        self._write()

    def close(self) -> None:
        """The farm stopped cleanly: nothing is left to end."""
        if self._entry is not None:
            self.path.unlink(missing_ok=True)
            self._entry = None

    def _write(self) -> None:
        tmp = self.path.with_name(PROCESSES_FILE + ".tmp")
        tmp.write_text(json.dumps(self._entry))
        tmp.replace(self.path)


def _is(pid: int, start: str | None, markers: tuple[str, ...]) -> bool:
    """`pid` is still the process recorded: the same start time and a command line holding a marker."""
    if not isinstance(pid, int) or pid <= 1 or start is None or process_start(pid) != start:
        return False
    if not Path("/proc").is_dir():
        return True  # no command lines to read here (macOS): the start time alone
    line = cmdline(pid)
    return any(m.encode() in line for m in markers)


def end_leftovers(data_dir: str | os.PathLike) -> list[int]:
    """End the processes a dead farm of `data_dir` left running (SIGTERM, SIGKILL after END_WAIT_S); their
    pids. Raises FarmRunning when that farm is alive."""
    data_dir = Path(os.path.expanduser(data_dir))
    try:
        entry = json.loads((data_dir / PROCESSES_FILE).read_text())
        farm_pid, farm_start = int(entry["pid"]), entry.get("start")
        namespace = str(entry["namespace"])
        children = list(entry.get("children") or [])
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable %s: %s", data_dir / PROCESSES_FILE, exc)
        return []
    if farm_start is not None and process_start(farm_pid) == farm_start:
        raise FarmRunning(f"a farm runs from {data_dir} (pid {farm_pid}); stop it or use another data dir")
    found: list[tuple[str, int, str | None, tuple[str, ...]]] = []
    for child in children:
        try:
            found.append((str(child["role"]), int(child["pid"]), child.get("start"), (str(child["marker"]),)))
        except (KeyError, TypeError, ValueError):
            continue
    if "/" not in namespace and namespace not in ("", ".", ".."):
        for record in Records(data_dir / "workers" / namespace).all():
            if isinstance(record.get("pid"), int):
                found.append((f"worker {record.get('name')}", record["pid"], record.get("start"), WORKER_MARKERS))
    alive = [(role, pid, start, markers) for role, pid, start, markers in found if _is(pid, start, markers)]
    for role, pid, _, _ in alive:
        log.warning("the farm that ran from %s (pid %d) was killed; ending its %s (pid %d)", data_dir, farm_pid,
                    role, pid)
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + END_WAIT_S
    while time.monotonic() < deadline and any(_is(pid, start, markers) for _, pid, start, markers in alive):
        time.sleep(0.1)
    for role, pid, start, markers in alive:
        if _is(pid, start, markers):
            log.warning("its %s (pid %d) ignored SIGTERM for %g s; killing it", role, pid, END_WAIT_S)
            _signal(pid, signal.SIGKILL, group=True)
    (data_dir / PROCESSES_FILE).unlink(missing_ok=True)
    return [pid for _, pid, _, _ in alive]


def _signal(pid: int, signum: int, group: bool = False) -> None:
    """Signal a process; with `group`, its whole process group when it leads one (a worker and its pool)."""
    try:
        if group and os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
