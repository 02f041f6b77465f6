"""The backend contract, run over every backend: fake, local processes, Docker containers.

The real backends run real `farm worker` processes (Celery, one request at a time) against the real
Redis; requests go through `farm.client.sync` like a trainer's."""

from __future__ import annotations

import time

import pytest

from farm.pipeline import UnknownPipeline
from farm.results import Status
from planner.backends import WorkerState
from tests.support.waiting import eventually

COMPILE, EXECUTE = "synthetic.compile", "synthetic.execute"


def running(backend, stage=None, n=None):
    """Wait until the stage has `n` workers (all there are, when None) and every one of them is running."""

    def check():
        workers = backend.list(stage)
        if (n is None or len(workers) == n) and workers and all(w.state is WorkerState.RUNNING for w in workers):
            return workers
        return None

    return eventually(check, what=f"{n or 'all'} running worker(s) of {stage or 'every stage'}")


def gone(backend, names):
    names = set(names)
    return eventually(lambda: not names & {w.name for w in backend.list()}, what=f"workers {sorted(names)} to leave")


def busy_with(client, stage, worker, request_id):
    """Wait until `worker` is running `request_id` (any request when None), as the farm's lease says."""

    def check():
        state = client.dispatch.inspect([stage]).stages[stage]
        return any(r.worker == worker and request_id in (None, r.id) for r in state.running)

    eventually(check, what=f"{worker} to start {request_id}")


def test_spawned_workers_are_listed_under_their_stage(harness):
    backend = harness.make()
    spawned = backend.spawn(COMPILE, 2) + backend.spawn(EXECUTE, 1)

    assert [w.stage for w in spawned] == [COMPILE, COMPILE, EXECUTE]
    assert len({w.name for w in spawned}) == 3
    assert all(w.name.startswith(harness.settings.namespace + ".") for w in spawned)
    # a backend on a cluster may not have placed a worker yet: pending is a state of a new worker too
    assert all(w.state in (WorkerState.PENDING, WorkerState.STARTING, WorkerState.RUNNING) and w.alive for w in spawned)
    assert {w.name for w in backend.list(COMPILE)} == {w.name for w in spawned[:2]}
    assert {w.name for w in backend.list()} == {w.name for w in spawned}


def test_spawned_workers_become_running_and_their_lives_are_recorded(harness):
    backend = harness.make()
    spawned = backend.spawn(COMPILE, 2)

    workers = running(backend, COMPILE, 2)

    assert all(w.ready_at is not None and w.ready_at >= w.spawned_at - 1.0 for w in workers)
    lives = {e["worker"]: e for e in harness.lives("worker_spawned")}
    assert set(lives) == {w.name for w in spawned}
    assert all(e["backend"] == harness.kind and e["stage"] == COMPILE for e in lives.values())


def test_spawned_workers_serve_the_requests_of_their_stage(real, client):
    backend = real.make()
    names = {w.name for w in backend.spawn(COMPILE, 2)}
    running(backend, COMPILE, 2)

    batch = client.open_batch("contract", "synthetic", size=4)
    for i in range(4):
        batch.submit(f"r{i}", {"times": [0.3, 0.0]})
    results = batch.gather(timeout=60)

    assert sorted(r.status for r in results) == [Status.OK] * 4
    assert {r.stages[0].worker for r in results} <= names


def test_retired_idle_workers_leave_and_their_lives_close(harness):
    backend = harness.make()
    first, second = backend.spawn(COMPILE, 2)
    running(backend, COMPILE, 2)

    stopping = backend.retire([first.name])

    assert [(w.name, w.state) for w in stopping] == [(first.name, WorkerState.STOPPING)]
    gone(backend, [first.name])
    assert [w.name for w in backend.list()] == [second.name]
    retired = [e for e in harness.lives("worker_retired") if e["worker"] == first.name]
    assert len(retired) == 1 and retired[0]["at"] >= first.spawned_at
    assert not [e for e in harness.lives("worker_retired") if e["worker"] == second.name]


def test_a_retired_busy_worker_finishes_its_request_first(real, client):
    backend = real.make()
    (worker,) = backend.spawn(COMPILE, 1)
    running(backend, COMPILE, 1)
    batch = client.open_batch("contract", "synthetic", size=1)
    batch.submit("long", {"times": [2.0, 0.0]})
    busy_with(client, COMPILE, worker.name, "long")

    (stopping,) = backend.retire([worker.name])
    assert stopping.state is WorkerState.STOPPING
    (result,) = batch.gather(timeout=30)

    assert result.status is Status.OK and result.stages[0].worker == worker.name
    gone(backend, [worker.name])
    (retired,) = [e for e in real.lives("worker_retired") if e["worker"] == worker.name]
    assert retired["at"] >= result.stages[0].finished_at - 0.05


def test_retiring_a_worker_under_load_loses_and_duplicates_nothing(real, client):
    backend = real.make()
    leaving, staying = backend.spawn(COMPILE, 2)
    running(backend, COMPILE, 2)
    batch = client.open_batch("contract", "synthetic", size=6)
    for i in range(6):
        batch.submit(f"r{i}", {"times": [0.5, 0.0]})
    busy_with(client, COMPILE, leaving.name, None)

    backend.retire([leaving.name])
    results = batch.gather(timeout=60)

    assert sorted(r.request_id for r in results) == [f"r{i}" for i in range(6)]
    assert all(r.status is Status.OK for r in results)
    assert leaving.name in {r.stages[0].worker for r in results}
    gone(backend, [leaving.name])
    assert [w.name for w in backend.list()] == [staying.name]


def test_spawn_with_the_same_request_id_starts_nothing_twice(harness):
    backend = harness.make()
    first = backend.spawn(COMPILE, 2, request_id="decision-7")
    again = backend.spawn(COMPILE, 2, request_id="decision-7")

    assert [w.name for w in again] == [w.name for w in first]
    assert len(backend.list(COMPILE)) == 2
    assert len(harness.lives("worker_spawned")) == 2


def test_retiring_twice_or_retiring_unknown_workers_is_harmless(harness):
    backend = harness.make()
    worker, other = backend.spawn(COMPILE, 2)
    running(backend, COMPILE, 2)

    backend.retire([worker.name])
    backend.retire([worker.name, "no-such-worker", f"{harness.settings.namespace}.{COMPILE}.unknown"])
    gone(backend, [worker.name])

    assert backend.retire([worker.name]) == []
    assert [w.name for w in backend.list()] == [other.name]
    assert len([e for e in harness.lives("worker_retired") if e["worker"] == worker.name]) == 1


def test_a_restarted_backend_adopts_the_running_workers(harness):
    before = harness.make()
    spawned = before.spawn(COMPILE, 2) + before.spawn(EXECUTE, 1)
    running(before)

    after = harness.make()  # a new daemon after `kill -9` of the old one: nothing in memory carries over
    adopted = after.reconcile()

    assert sorted(w.name for w in adopted) == sorted(w.name for w in spawned)
    assert all(w.state is WorkerState.RUNNING for w in adopted)
    assert after.spawn(COMPILE, 0) == [] and len(after.list(COMPILE)) == 2
    after.retire([spawned[0].name])
    gone(after, [spawned[0].name])
    assert sorted(w.name for w in before.list()) == sorted(w.name for w in spawned[1:])


def test_a_worker_that_dies_on_its_own_is_reaped_and_its_life_closed(harness):
    backend = harness.make()
    victim, survivor = backend.spawn(COMPILE, 2)
    running(backend, COMPILE, 2)
    died_after = time.time()

    harness.crash(victim)

    gone(backend, [victim.name])
    assert [w.name for w in backend.list()] == [survivor.name]
    (retired,) = [e for e in harness.lives("worker_retired") if e["worker"] == victim.name]
    assert retired["at"] >= died_after - 0.05


def test_a_stopping_worker_is_killed_only_after_its_stage_timeout_and_grace(real, client):
    backend = real.make(timeout_for=lambda stage: 1.0, grace_s=1.0)
    (worker,) = backend.spawn(COMPILE, 1)
    running(backend, COMPILE, 1)
    batch = client.open_batch("contract", "synthetic", size=1)
    batch.submit("endless", {"times": [60.0, 0.0]})
    busy_with(client, COMPILE, worker.name, "endless")

    asked = time.time()
    backend.retire([worker.name])
    time.sleep(1.2)
    assert [w.state for w in backend.list()] == [WorkerState.STOPPING]  # SIGTERM alone does not end a request

    gone(backend, [worker.name])
    (retired,) = [e for e in real.lives("worker_retired") if e["worker"] == worker.name]
    assert retired["at"] >= asked + 2.0 - 0.05


def test_the_fake_kills_a_busy_stopping_worker_after_timeout_and_grace(settings):
    from planner.backends.fake import FakeBackend, FakeWorld

    now = [100.0]
    world = FakeWorld(clock=lambda: now[0])
    backend = FakeBackend(settings, world=world, timeout_for=lambda stage: 10.0, grace_s=5.0)
    (worker,) = backend.spawn(COMPILE, 1)
    world.set_busy(worker.name)
    backend.retire([worker.name])

    now[0] = 114.9
    assert [w.state for w in backend.list()] == [WorkerState.STOPPING]
    now[0] = 115.0
    assert backend.list() == []
    assert world.lives("worker_retired")[-1]["at"] == 115.0


@pytest.mark.parametrize("stage, n, request_id, error", [
    ("nope.compile", 1, None, UnknownPipeline),
    ("synthetic.nope", 1, None, UnknownPipeline),
    ("synthetic", 1, None, ValueError),
    (COMPILE, -1, None, ValueError),
    (COMPILE, 1.5, None, ValueError),
    (COMPILE, 1, "no spaces", ValueError),
])
def test_bad_spawn_requests_are_refused_before_anything_starts(harness, stage, n, request_id, error):
    backend = harness.make()
    with pytest.raises(error, match=r"."):
        backend.spawn(stage, n, request_id=request_id)
    assert backend.list() == []
    assert harness.lives("worker_spawned") == []
