"""The local backend's process records: what a restarted daemon may and may not take for its workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from farm import events
from planner.backends import BackendError, WorkerState
from planner.backends.local import LocalBackend
from farm.processes import cmdline, group_members, process_start, worker_nice
from tests.support.waiting import eventually

STAGE = "synthetic.compile"


def write_record(backend, name, **fields):
    backend.dir.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "stage": STAGE, "spawned_at": time.time(), "pid": None, "start": None,
              "stopping_since": None, "kill_at": None, **fields}
    (backend.dir / f"{name}.json").write_text(json.dumps(record))


def lives(settings, kind):
    import redis

    r = redis.Redis.from_url(settings.redis_url)
    found = [events.decode(f) for _, f in r.xrange(events.stream_key(settings.namespace))]
    r.close()
    return [e for e in found if e["kind"] == kind]


@pytest.fixture
def sleeper():
    """A long-running process that is not a farm worker."""
    procs = []

    def start(*args):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args], start_new_session=True)
        procs.append(p)
        # Popen returns once the exec is under way; /proc shows the new command line a moment later (an empty
        # one was read on a loaded machine), and these tests find processes by it
        eventually(lambda: cmdline(p.pid), 10, interval=0.01, what="the sleeper's command line in /proc")
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_a_recycled_pid_is_not_taken_for_a_worker_nor_signalled(settings, sleeper):
    backend = LocalBackend(settings)
    stranger = sleeper()
    name = f"{settings.namespace}.{STAGE}.old"
    write_record(backend, name, pid=stranger.pid, start="1")  # same pid, another start time

    assert backend.list() == []
    assert backend.retire([name]) == []
    assert stranger.poll() is None  # alive: never signalled
    assert [e["worker"] for e in lives(settings, "worker_retired")] == [name]
    assert not (backend.dir / f"{name}.json").exists()


def test_a_worker_whose_pid_never_reached_its_record_is_found_by_its_command_line(settings, sleeper):
    backend = LocalBackend(settings)
    name = f"{settings.namespace}.{STAGE}.orphan"
    proc = sleeper("--stage", STAGE, "--name", name)
    write_record(backend, name, spawned_at=time.time() - 60)  # the daemon died between fork and record

    (adopted,) = backend.reconcile()

    assert adopted.name == name and adopted.ref == str(proc.pid) and adopted.state is WorkerState.STARTING
    backend.retire([name])
    proc.wait(timeout=10)
    assert backend.list() == []


def test_a_record_of_a_spawn_that_never_started_is_dropped_silently(settings):
    backend = LocalBackend(settings)
    write_record(backend, f"{settings.namespace}.{STAGE}.never", spawned_at=time.time() - 60)

    assert backend.reconcile() == []
    assert list(backend.dir.glob("*.json")) == []
    assert lives(settings, "worker_retired") == []


def test_a_command_that_cannot_start_is_a_clear_error_and_leaves_no_record(settings):
    backend = LocalBackend(settings, command=["/nonexistent/farm", "worker"])

    with pytest.raises(BackendError, match="/nonexistent/farm"):
        backend.spawn(STAGE, 1)
    assert backend.list() == [] and list(backend.dir.glob("*.json")) == []
    assert lives(settings, "worker_spawned") == []


def test_workers_inherit_the_farms_settings(settings):
    script = "import os, sys, time; print(os.environ['FARM_NAMESPACE'], os.environ['FARM_REDIS_URL'], os.environ['FARM_LEASE_S'], sys.argv[1:], flush=True); time.sleep(60)"
    backend = LocalBackend(settings, command=[sys.executable, "-c", script])
    (worker,) = backend.spawn(STAGE, 1)
    log = backend.dir / f"{worker.name}.log"
    try:
        deadline = time.time() + 20
        # the whole line: an unbuffered child writes print's pieces one by one
        while not log.read_text().endswith("\n") and time.time() < deadline:
            time.sleep(0.05)
        assert log.read_text().split(" ", 3)[:3] == [settings.namespace, settings.redis_url, repr(float(settings.lease_s))]
        assert f"'--stage', '{STAGE}', '--name', '{worker.name}'" in log.read_text()
    finally:
        os.killpg(int(worker.ref), 9)


def test_what_is_left_of_a_dead_workers_process_group_goes_with_it(settings):

    backend = LocalBackend(settings)
    leader = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & wait"], start_new_session=True)
    name = f"{settings.namespace}.{STAGE}.leader"
    write_record(backend, name, pid=leader.pid, start=process_start(leader.pid))
    deadline = time.time() + 10
    while len(group_members(leader.pid)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(group_members(leader.pid)) == 2

    leader.kill()  # the leader dies; its child (a pool process in a real worker) would linger
    leader.wait()

    assert backend.list() == []
    deadline = time.time() + 10
    while group_members(leader.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert group_members(leader.pid) == []


# ------------------------------------------------------------------------- retiring a starting worker

DEAF = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('started', flush=True); time.sleep(60)")


def wait_started(backend, worker):
    log = backend.dir / f"{worker.name}.log"
    deadline = time.time() + 20
    while "started" not in log.read_text() and time.time() < deadline:
        time.sleep(0.05)
    return log


def gone(backend, timeout_s=10.0):
    deadline = time.time() + timeout_s
    while backend.list() and time.time() < deadline:
        time.sleep(0.05)
    return backend.list() == []


def test_a_worker_retired_before_it_is_ready_that_ignores_sigterm_is_killed_soon(settings, monkeypatch):
    import planner.backends.local as local

    monkeypatch.setattr(local, "STARTING_KILL_S", 0.5)
    backend = LocalBackend(settings, command=[sys.executable, "-c", DEAF], grace_s=60.0)
    (worker,) = backend.spawn(STAGE, 1)
    log = wait_started(backend, worker)

    started = time.time()
    (stopping,) = backend.retire([worker.name])

    assert stopping.state is WorkerState.STOPPING
    assert gone(backend)
    assert time.time() - started < 10.0  # long before its stage timeout plus the 60 s grace
    (retired,) = lives(settings, "worker_retired")
    assert retired["worker"] == worker.name
    assert log.exists()  # a worker that had to be killed keeps its log


def test_a_starting_worker_is_sent_sigterm_again_until_it_goes(settings, monkeypatch):
    import planner.backends.local as local

    monkeypatch.setattr(local, "TERM_REPEAT_S", 0.1)
    # ignores the first SIGTERM (as a worker may, early in its start-up), obeys the next ones
    script = ("import signal, sys, time\n"
              "seen = []\n"
              "def on_term(*_):\n"
              "    seen.append(1)\n"
              "    if len(seen) > 1: sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, on_term)\n"
              "print('started', flush=True)\n"
              "time.sleep(60)\n")
    backend = LocalBackend(settings, command=[sys.executable, "-c", script], grace_s=60.0)
    (worker,) = backend.spawn(STAGE, 1)
    log = wait_started(backend, worker)

    backend.retire([worker.name])

    assert gone(backend, timeout_s=local.STARTING_KILL_S - 1.0)  # by the repeated SIGTERM, not a kill
    assert not log.exists()  # retired and gone on its own: its log is not kept


def test_a_ready_worker_is_not_killed_before_its_stage_timeout_and_grace(settings, monkeypatch):
    import planner.backends.local as local

    monkeypatch.setattr(local, "STARTING_KILL_S", 0.2)
    backend = LocalBackend(settings, command=[sys.executable, "-c", DEAF], grace_s=60.0,
                           timeout_for=lambda stage: 60.0)
    (worker,) = backend.spawn(STAGE, 1)
    wait_started(backend, worker)
    backend._readiness._seen[worker.name] = time.time()  # it announced itself ready: it may hold a request
    backend.retire([worker.name])
    time.sleep(0.6)

    assert [w.state for w in backend.list()] == [WorkerState.STOPPING]
    os.killpg(int(worker.ref), 9)
    assert gone(backend)


# ------------------------------------------------------------------------------- priority, launcher


def test_the_workers_niceness_is_checked_and_applied(settings, monkeypatch):

    assert worker_nice(None, {}) == 0
    assert worker_nice(None, {"FARM_WORKER_NICE": " 7 "}) == 7
    assert worker_nice(3, {"FARM_WORKER_NICE": "9"}) == 3
    with pytest.raises(ValueError, match="FARM_WORKER_NICE='high'.*0-19"):
        worker_nice(None, {"FARM_WORKER_NICE": "high"})
    with pytest.raises(ValueError, match="0-19"):
        worker_nice(20)

    backend = LocalBackend(settings, command=[sys.executable, "-c", "import time; time.sleep(60)"], nice=5)
    (worker,) = backend.spawn(STAGE, 1)
    def niceness():
        stat = open(f"/proc/{worker.ref}/stat").read()
        return int(stat[stat.rindex(")") + 2:].split()[16])  # field 19 of proc(5): nice

    expected = min(19, os.nice(0) + 5)  # niceness adds to the daemon's own (a CI run may itself be niced)
    try:
        deadline = time.time() + 10  # `nice` sets it, then execs the worker: a moment after the spawn
        while niceness() != expected and time.time() < deadline:
            time.sleep(0.02)
        assert niceness() == expected
    finally:
        os.killpg(int(worker.ref), 9)


def test_launched_workers_lead_their_sessions_and_their_exit_time_is_exact(settings):
    backend = LocalBackend(settings)  # the default: `farm worker` forked by the launcher
    try:
        (worker,) = backend.spawn(STAGE, 1)
        pid = int(worker.ref)
        assert os.getsid(pid) == pid  # its own session: a signal to the daemon's group does not reach it
        assert (backend.dir / f"{worker.name}.pid").read_text() == str(pid)

        os.kill(pid, 9)
        killed_at = time.time()
        time.sleep(1.0)  # the next observation comes a second later; the exit was recorded when it happened
        assert backend.list() == []
        (retired,) = lives(settings, "worker_retired")
        assert abs(float(retired["at"]) - killed_at) < 0.5
        assert not (backend.dir / f"{worker.name}.pid").exists()
    finally:
        backend.close()


def test_a_launched_worker_whose_pid_never_reached_its_record_is_found_by_its_pid_file(settings):
    first = LocalBackend(settings)
    (worker,) = first.spawn(STAGE, 1)
    first.close()  # the daemon dies; the launcher goes with it, the worker stays
    write_record(first, worker.name, spawned_at=time.time() - 60)  # as if the pid never reached the record

    backend = LocalBackend(settings)
    try:
        (adopted,) = backend.reconcile()
        assert adopted.name == worker.name and adopted.ref == worker.ref
        backend.retire([worker.name])
        assert gone(backend)
    finally:
        backend.close()


def test_the_launcher_says_why_it_cannot_start_a_worker(settings, tmp_path):
    from planner.backends.local.launcher import Launcher, LauncherError

    launcher = Launcher(tmp_path / "launcher.log", on_exit=lambda pid, at: None)
    try:
        with pytest.raises(LauncherError, match="UnknownPipeline|nope"):
            launcher.spawn("w0", "nope.compile", log=tmp_path / "w0.log", pidfile=tmp_path / "w0.pid", env={})
        with pytest.raises(LauncherError, match="w1.*(No such file|FileNotFoundError)"):
            launcher.spawn("w1", STAGE, log=tmp_path / "missing" / "w1.log", pidfile=tmp_path / "w1.pid", env={})
    finally:
        launcher.close()
    assert launcher._proc is None


def test_workers_without_task_events_are_told_so(settings):
    script = "import os, time; print('events', os.environ['FARM_WORKER_EVENTS'], flush=True); time.sleep(60)"
    backend = LocalBackend(settings, command=[sys.executable, "-c", script], events=False)
    (worker,) = backend.spawn(STAGE, 1)
    log = backend.dir / f"{worker.name}.log"
    try:
        deadline = time.time() + 20
        # the whole line: an unbuffered child writes print's pieces one by one
        while not log.read_text().endswith("\n") and time.time() < deadline:
            time.sleep(0.05)
        assert log.read_text().split() == ["events", "0"]  # `farm worker` reads it as --no-events
    finally:
        os.killpg(int(worker.ref), 9)


def test_an_artificial_start_up_delays_a_workers_readiness_by_that_long(settings):
    backend = LocalBackend(settings, startup_delay_s=2.0)
    try:
        (worker,) = backend.spawn(STAGE, 1)
        deadline = time.time() + 30
        while time.time() < deadline and not any(w.state == WorkerState.RUNNING for w in backend.list()):
            time.sleep(0.1)
        (spawned,), (ready,) = lives(settings, "worker_spawned"), lives(settings, "worker_ready")
        assert float(ready["at"]) - float(spawned["at"]) >= 2.0
    finally:
        backend.retire([w.name for w in backend.list()])
        backend.close()


def test_an_artificial_start_up_that_is_not_seconds_is_refused(settings):
    with pytest.raises(ValueError, match="startup_delay_s"):
        LocalBackend(settings, startup_delay_s=-1.0)
