"""The processes a farm starts: they import the installed package wherever the farm was started, and they
end with the farm, a `kill -9` of `farm up` included (or, what cannot, with the next farm of its data dir)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import farm
from farm.app.embedded import EmbeddedFarm
from farm.app.leftovers import PROCESSES_FILE, FarmRunning, Ledger
from planner.backends import WorkerState
from planner.backends.local import LocalBackend
from farm.processes import cmdline, process_start, python
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

STAGE = "synthetic.compile"
REAL_PACKAGE = str(Path(farm.__file__).resolve().parent)


@pytest.fixture
def farm_named_directory(tmp_path, monkeypatch):
    """The current directory holds a `farm` package of its own (no Lua scripts, nothing of the farm's)."""
    cwd = tmp_path / "cwd"
    (cwd / "farm").mkdir(parents=True)
    (cwd / "farm" / "__init__.py").write_text("")
    monkeypatch.chdir(cwd)
    return cwd


@pytest.fixture
def sleeper():
    """sleeper(*words): a long-running process with these words on its command line."""
    procs = []

    def start(*words):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *words], start_new_session=True)
        procs.append(p)
        eventually(lambda: all(w.encode() in cmdline(p.pid) for w in words), 10, what="the sleeper to start")
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_a_worker_started_from_a_directory_named_farm_imports_the_real_package(settings, farm_named_directory):
    backend = LocalBackend(settings)  # the default: `farm worker` forked by the launcher, which is a `python -m`
    try:
        backend.spawn(STAGE, 1)
        eventually(lambda: any(w.state is WorkerState.RUNNING for w in backend.list()), 60,
                   what="the worker to become ready")
    finally:
        backend.retire([w.name for w in backend.list()])
        backend.close()


@pytest.mark.parametrize("start", [("-c", "import farm; print(farm.__file__)"),
                                   ("-m", "farm.app.cli", "--help")], ids=["python -c", "python -m"])
def test_a_python_child_started_from_a_directory_named_farm_imports_the_real_package(farm_named_directory, start):
    probe = python(*start)
    if start[0] == "-m":  # `farm.app.cli` exists only in the real package: its help is proof enough
        out = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "Usage" in out.stdout, out.stderr
    else:
        out = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=True)
        assert Path(out.stdout.strip()).resolve().parent == Path(REAL_PACKAGE)


def test_killing_farm_up_hard_ends_its_redis_launcher_and_workers(tmp_path):
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    out = open(tmp_path / "up.out", "wb")
    proc = subprocess.Popen(python("-m", "farm.app.cli", "up", "--data-dir", str(data), "--flower-port", "0"),
                            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    try:
        eventually(lambda: b"the farm is up" in (tmp_path / "up.out").read_bytes(), 60,
                   what="farm up to have its workers ready")
        ledger = json.loads((data / PROCESSES_FILE).read_text())
        [redis_server] = [c["pid"] for c in ledger["children"] if c["role"] == "redis-server"]
        workers = [json.loads(p.read_text())["pid"] for p in (data / "workers" / "farm").glob("*.json")]
        launchers = [pid for pid in _children(proc.pid) if b"launcher_process" in cmdline(pid)]
        assert len(workers) == 2 and len(launchers) == 1
        pids = [redis_server, *launchers, *workers]
        assert all(process_start(pid) for pid in pids)

        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        eventually(lambda: not [pid for pid in pids if process_start(pid)], 10,
                   what=f"the farm's redis-server, launcher and workers {pids} to end with it")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_next_farm_ends_what_a_farm_killed_hard_left_running(settings, sleeper):
    data = Path(settings.data_dir)
    redis_server, worker = sleeper("redis-server"), sleeper("farm", "worker")
    _ledger(data, settings.namespace, children=[("redis-server", redis_server, "redis-server")])
    _worker_record(data, settings.namespace, "w0", worker)

    with EmbeddedFarm(settings, workers_per_stage=0):
        assert redis_server.wait(timeout=10) == -signal.SIGTERM
        assert worker.wait(timeout=10) == -signal.SIGTERM


def test_only_the_farms_own_processes_are_ended_never_a_pid_used_again(settings, sleeper):
    data = Path(settings.data_dir)
    recycled, stranger = sleeper("redis-server"), sleeper("something-else")
    _ledger(data, settings.namespace, children=[("redis-server", recycled, "redis-server")])
    ledger = json.loads((data / PROCESSES_FILE).read_text())
    ledger["children"][0]["start"] = "1"  # the same pid, another start time: another process now
    ledger["children"].append({"role": "flower", "pid": stranger.pid, "start": process_start(stranger.pid),
                               "marker": "flower"})  # the same start time, but not what the farm started there
    (data / PROCESSES_FILE).write_text(json.dumps(ledger))

    assert Ledger(data).begin(settings.namespace) == []
    assert recycled.poll() is None and stranger.poll() is None


def test_a_farm_does_not_start_where_a_live_farm_runs(settings):
    data = Path(settings.data_dir)
    (data / PROCESSES_FILE).write_text(json.dumps({"pid": os.getpid(), "start": process_start(os.getpid()),
                                                   "namespace": settings.namespace, "children": []}))
    with pytest.raises(FarmRunning, match="a farm runs from"):
        EmbeddedFarm(settings, workers_per_stage=0).start()
    assert (data / PROCESSES_FILE).exists()  # still that farm's


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        if entry.name.isdigit() and int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _dead_pid() -> tuple[int, str]:
    """A farm that is gone: the pid and start time of a process that exited."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = process_start(p.pid)
    p.kill()
    p.wait()
    return p.pid, start


def _ledger(data: Path, namespace: str, children) -> None:
    pid, start = _dead_pid()
    entry = {"pid": pid, "start": start, "namespace": namespace,
             "children": [{"role": role, "pid": p.pid, "start": process_start(p.pid), "marker": marker}
                          for role, p, marker in children]}
    data.mkdir(parents=True, exist_ok=True)
    (data / PROCESSES_FILE).write_text(json.dumps(entry))


def _worker_record(data: Path, namespace: str, name: str, proc: subprocess.Popen) -> None:
    directory = data / "workers" / namespace
    directory.mkdir(parents=True, exist_ok=True)
    record = {"name": f"{namespace}.{STAGE}.{name}", "stage": STAGE, "spawned_at": time.time(), "pid": proc.pid,
              "start": process_start(proc.pid), "stopping_since": None, "kill_at": None}
    (directory / f"{record['name']}.json").write_text(json.dumps(record))


TETHERING_PARENT = """
import sys, threading, time
from farm.processes import popen_tethered
box = []
t = threading.Thread(target=lambda: box.append(popen_tethered([sys.executable, "-c", "import time; time.sleep(60)"])))
t.start(); t.join()
print(box[0].pid, flush=True)
time.sleep(60)
"""


def test_a_child_tethered_from_a_thread_that_ended_lives_on_and_ends_with_the_process():
    """What a chaos run's restart does: the thread that restarted Redis ends, Redis must not end with it."""
    parent = subprocess.Popen(python("-c", TETHERING_PARENT), stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        time.sleep(1.0)  # the forking thread is long gone by now
        assert process_start(child) is not None, "the child ended with the thread that asked for it"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        eventually(lambda: process_start(child) is None, 10, what="the tethered child to end with its process")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
