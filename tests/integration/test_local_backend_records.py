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
        while not log.read_text().strip() and time.time() < deadline:
            time.sleep(0.05)
        assert log.read_text().split(" ", 3)[:3] == [settings.namespace, settings.redis_url, repr(float(settings.lease_s))]
        assert f"'--stage', '{STAGE}', '--name', '{worker.name}'" in log.read_text()
    finally:
        os.killpg(int(worker.ref), 9)


def test_what_is_left_of_a_dead_workers_process_group_goes_with_it(settings):
    from planner.backends.local import _group_members, process_start

    backend = LocalBackend(settings)
    leader = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & wait"], start_new_session=True)
    name = f"{settings.namespace}.{STAGE}.leader"
    write_record(backend, name, pid=leader.pid, start=process_start(leader.pid))
    deadline = time.time() + 10
    while len(_group_members(leader.pid)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(_group_members(leader.pid)) == 2

    leader.kill()  # the leader dies; its child (a pool process in a real worker) would linger
    leader.wait()

    assert backend.list() == []
    deadline = time.time() + 10
    while _group_members(leader.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert _group_members(leader.pid) == []
