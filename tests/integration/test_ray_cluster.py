"""The ray backend on a 3-node cluster on this machine (a head with no worker resources, a node with 2
GPUs, a CPU node), inside a loopback-only network namespace, with real Redis, PostgreSQL (its socket), the
recorder, the planner daemon and `farm worker` processes."""

from __future__ import annotations


import pytest
import redis as redis_lib

from farm.results import Status
from planner.backends import WorkerState
from planner.backends.ray.spec import Resources, ray_namespace
from tests.integration.daemon_support import recorded_farm, serving, small_knobs, wait_for
from tests.support.ray_cluster import connected

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

C, E = "synthetic.compile", "synthetic.execute"


def gpu_execute(stage: str) -> str:
    """The synthetic pipeline's resource kinds, stated here so the placement tests do not hang on the registry's."""
    return "gpu" if stage == E else "cpu"


@pytest.fixture
def farm(settings, postgres_url, ray_cluster):
    """A farm on the cluster (daemon_support.recorded_farm) and a maker of ray backends on it; the worker
    actors a test left are killed."""
    backends = []

    def backend(**options):
        from planner.backends.ray import RayBackend

        made = RayBackend(settings, **{"address": ray_cluster.address, **options})
        backends.append(made)
        return made

    with recorded_farm(settings, postgres_url) as (settings, engine):
        yield settings, engine, backend
        if backends:
            import ray

            connected()
            for w in backends[0].list():
                try:
                    ray.kill(ray.get_actor(w.name, namespace=ray_namespace(settings.namespace)), no_restart=True)
                except ValueError:
                    pass
            wait_for(lambda: not backends[0].list(), 30, "the test's worker actors to be gone")
        for made in backends:
            made.close()


def placed(backend, n):
    return wait_for(lambda: (lambda ws: ws if len(ws) == n and all(w.state is WorkerState.RUNNING for w in ws)
                             else None)(backend.list()), 60, f"{n} running workers")


def test_gpu_stage_workers_land_only_on_the_gpu_node_and_cpu_stage_workers_on_cpu_nodes(farm, ray_cluster):
    import ray

    settings, _, make = farm
    backend = make(resource_for=gpu_execute)
    backend.spawn(E, 2)
    backend.spawn(C, 2)

    workers = placed(backend, 4)

    gpu_node, cpu_node = ray_cluster.gpu_node.node_id[:8], ray_cluster.cpu_node.node_id[:8]
    assert {w.node.rsplit("/", 1)[1] for w in workers if w.stage == E} == {gpu_node}
    assert {w.node.rsplit("/", 1)[1] for w in workers if w.stage == C} == {cpu_node}
    connected()
    gpus = [ray.get(ray.get_actor(w.name, namespace=ray_namespace(settings.namespace)).where.remote())["gpus"]
            for w in workers if w.stage == E]
    assert sorted(gpus) == ["0", "1"]  # Ray hands each GPU worker its own device


def test_more_gpu_workers_than_gpus_leave_the_rest_pending_not_allocated_and_shown(farm):
    from farm.app.cli.status import status_report
    from farm.knobs import Knobs
    from farm.protocol.live import inspect
    from farm.store.accounting import allocated_seconds, worker_lives
    from farm.protocol.heartbeat import Heartbeat
    from planner.runtime.service import pool_report

    settings, engine, make = farm
    backend = make(resource_for=gpu_execute)
    backend.spawn(E, 8)

    def split():
        workers = backend.list()
        running = [w for w in workers if w.state is WorkerState.RUNNING]
        pending = [w for w in workers if w.state is WorkerState.PENDING]
        return (running, pending) if len(running) == 2 and len(pending) == 6 else None

    running, pending = wait_for(split, 60, "2 running and 6 pending GPU workers")
    client = redis_lib.Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        live = inspect(client, settings)
    finally:
        client.close()
    report = status_report(live, Knobs(), Heartbeat(pid=1, at=0.0, backend="ray", pools=pool_report(backend.list())))
    assert report["stages"][E]["pending"] == 6
    assert sum(report["stages"][E]["nodes"].values()) == 2
    lives = wait_for(lambda: (lambda ls: ls if len(ls) == 8 and sum(x.placed_at is not None for x in ls) == 2 else None)(
        worker_lives(engine, stage=E)), 30, "8 lives recorded, 2 of them placed")
    assert {x.name for x in lives if x.placed_at is None} == {w.name for w in pending}

    backend.retire([w.name for w in pending])  # a pending worker holds nothing: it goes at once, not warm

    wait_for(lambda: {w.name for w in backend.list()} == {w.name for w in running}, 30, "the pending workers gone")
    ended = wait_for(lambda: (lambda ls: ls if sum(x.retired_at is not None for x in ls) == 6 else None)(
        worker_lives(engine, stage=E)), 30, "the pending lives closed")
    never_placed = [x for x in ended if x.placed_at is None]
    assert len(never_placed) == 6 and all(x.retired_at is not None for x in never_placed)
    allocated = allocated_seconds(engine)[E]
    assert allocated <= 2 * (max(x.retired_at or 0 for x in ended) - min(x.spawned_at for x in ended)) + 5


def test_a_node_lost_mid_replay_loses_and_duplicates_nothing_and_the_pools_come_back(farm, ray_cluster):
    from farm.client.sync import RewardClient
    from planner.runtime import service

    settings, _, make = farm
    # the replay's workers may run only on nodes that declare "replay": the first such node is then lost
    pinned = {"synthetic": Resources(num_cpus=1, custom={"replay": 1})}
    doomed = ray_cluster.add_node(num_cpus=4, resources={"replay": 4})
    with serving(service.build(settings, backend=make(resources=pinned), startup_s=1.0)) as built:
        with RewardClient(settings) as client:
            batch = client.open_batch("replay", "synthetic", 16)
            for i in range(16):
                batch.submit(str(i), {"times": [1.0, 0.2]})
            wait_for(lambda: len([w for w in built.backend.list() if w.state is WorkerState.RUNNING]) >= 2, 60,
                     "the replay's workers running on the first node")
            ray_cluster.remove(doomed)
            wait_for(lambda: built.backend.list() and all(w.state is WorkerState.PENDING for w in built.backend.list()
                                                          if w.alive), 30, "the lost node's workers replaced, pending")
            replacement = ray_cluster.add_node(num_cpus=4, resources={"replay": 4})  # the autoscaler's new node
            results = batch.gather(timeout=180)
    ray_cluster.remove(replacement)  # the session's cluster as it was

    assert sorted(int(r.request_id) for r in results) == list(range(16))
    assert all(r.status is Status.OK for r in results)


def test_on_a_cluster_of_two_gpus_the_planner_asks_for_two_gpu_workers_and_says_the_stage_is_bound(farm):
    """Issue 36: max_workers 12 on a cluster of 2 GPUs. The planner plans within the 2, none of its GPU workers
    waits for room, and its heartbeat (farm status, the metrics) names the GPU stage as capacity-bound."""
    from farm.client.sync import RewardClient
    from farm.protocol import heartbeat
    from farm.store.knob_store import KnobStore
    from farm.store.queries import decisions
    from farm.store.accounting import worker_lives
    from planner.runtime import service

    settings, engine, make = farm
    client = redis_lib.Redis.from_url(settings.redis_url)
    KnobStore(engine, client, settings.namespace).save(small_knobs().with_stage(E, timeout_s=3.0, max_workers=12))
    backend = make(resource_for=gpu_execute)
    # the GCS frees a previous test's actors' GPUs a moment after they are gone
    wait_for(lambda: backend.capacity().placeable.get("gpu") == 2, 30, "both GPUs free")
    try:
        with serving(service.build(settings, backend=backend, startup_s=1.0)), RewardClient(settings) as rc:
            batch = rc.open_batch("bound", "synthetic", 24)
            for i in range(24):
                batch.submit(str(i), {"times": [0.05, 1.0]})
            beat = wait_for(lambda: (lambda b: b if b and E in b.bound else None)(
                heartbeat.read(client, settings.namespace)), 60, "the GPU stage named capacity-bound")
            results = batch.gather(timeout=180)
    finally:
        client.close()

    assert all(r.status is Status.OK for r in results)
    # placeable may read 1 for a moment: an actor being created on its node holds its GPU while the GCS
    # still calls it pending, so it is neither ours nor free (the safe side: the planner asks for less)
    assert beat.capacity["gpu"].most == 2 and beat.capacity["gpu"].placeable <= 2
    assert beat.bound[E].held <= 2 < beat.bound[E].wanted
    assert max(d.workers.get(E, 0) for d in decisions(engine)) == 2
    lives = worker_lives(engine, stage=E)
    assert lives and all(x.placed_at is not None for x in lives), "a GPU worker waited for room"


def _planner(settings, address):
    import os
    import subprocess
    import sys

    env = {**os.environ, "FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace,
           "FARM_DATABASE_URL": settings.database_url, "FARM_DATA_DIR": settings.data_dir}
    return subprocess.Popen([sys.executable, "-m", "farm.app.cli", "planner", "--backend", "ray",
                             "--ray-address", address, "-v"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_daemon_killed_hard_and_restarted_adopts_its_actors_and_orphans_none(farm, ray_cluster):
    from farm.store.accounting import worker_lives
    from farm.store.knob_store import KnobStore
    from farm.protocol import heartbeat

    settings, engine, make = farm
    client = redis_lib.Redis.from_url(settings.redis_url)
    KnobStore(engine, client, settings.namespace).save(small_knobs().with_stage(C, min_workers=2))
    backend = make()
    first = _planner(settings, ray_cluster.address)
    try:
        before = placed(backend, 2)
        first.kill()  # kill -9: no warm shutdown, nothing in memory carries over
        first.wait(10)
        second = _planner(settings, ray_cluster.address)
        try:
            wait_for(lambda: getattr(heartbeat.read(client, settings.namespace), "pid", None) == second.pid, 60,
                     "the restarted daemon's epochs")
            wait_for(lambda: heartbeat.read(client, settings.namespace).pools.get(C), 30,
                     "the restarted daemon's pools")
            after = placed(backend, 2)
        finally:
            second.terminate()
            second.wait(20)
    finally:
        if first.poll() is None:
            first.kill()
        client.close()

    assert sorted(w.name for w in after) == sorted(w.name for w in before)  # adopted, none started twice
    lives = worker_lives(engine, stage=C)
    assert sorted(x.name for x in lives) == sorted(w.name for w in before)


def test_an_unreachable_ray_address_fails_at_start_with_a_clear_message(settings, postgres_url):
    import os
    import subprocess
    import sys

    env = {**os.environ, "FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace,
           "FARM_DATABASE_URL": postgres_url, "FARM_DATA_DIR": settings.data_dir}
    from farm.store.engine import upgrade

    upgrade(postgres_url)
    done = subprocess.run([sys.executable, "-m", "farm.app.cli", "planner", "--backend", "ray",
                           "--ray-address", "127.0.0.1:9"], env=env, capture_output=True, text=True, timeout=60)

    assert done.returncode != 0
    assert "no Ray cluster answers at 127.0.0.1:9" in done.stderr


def test_a_cluster_that_goes_away_fails_the_backends_calls_clearly_and_the_caller_lives_on(settings):
    from planner.backends import BackendError
    from planner.backends.ray import RayBackend
    from tests.support.ray_cluster import require_namespace

    require_namespace()
    from ray.cluster_utils import Cluster

    own = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    backend = RayBackend(settings, address=own.address)
    try:
        assert backend.list() == []
        own.shutdown()
        with pytest.raises(BackendError, match=r"Ray|cluster"):
            backend.list()
        with pytest.raises(BackendError):
            backend.list()  # still away: refused again, the caller (the daemon) logs and carries on
    finally:
        backend.close()


def test_the_embedded_farm_on_the_ray_backend_serves_a_batch_and_leaves_no_actor_behind(tmp_path, ray_cluster):
    import uuid

    from farm.app.embedded import EmbeddedFarm
    from farm.client.sync import RewardClient
    from farm.config import Settings
    from planner.backends.ray import RayBackend

    settings = Settings(data_dir=str(tmp_path), namespace=f"up{uuid.uuid4().hex[:8]}", lease_s=3.0)
    with EmbeddedFarm(settings, backend_kind="ray", backend_options={"address": ray_cluster.address}) as farm:
        farm.wait_ready()
        gpu_node = farm.backend.nodes()[ray_cluster.gpu_node.node_id]
        where = {w.stage: w.node for w in farm.backend.list()}
        assert where[E] == gpu_node and where[C] not in ("", gpu_node)  # synthetic.execute is a GPU stage
        with RewardClient(farm.settings) as client:
            batch = client.open_batch("up", "synthetic", size=3)
            for i in range(3):
                batch.submit(str(i), {"times": [0.1, 0.1]})
            results = batch.gather(timeout=60)
        served = farm.settings

    assert sorted(r.request_id for r in results) == ["0", "1", "2"] and all(r.status is Status.OK for r in results)
    # the farm's own Redis ended with it: ask the cluster, through the test's Redis, what is left of its actors
    leftover = RayBackend(served.with_(redis_url=ray_cluster_redis()), address=ray_cluster.address)
    try:
        assert leftover._actors() == [] or all(a["state"] == "dead" for a in leftover._actors())
    finally:
        leftover.close()


def ray_cluster_redis() -> str:
    from tests.conftest import REDIS_URL

    return REDIS_URL


def test_an_embedded_farm_whose_workers_find_no_room_says_they_are_pending(tmp_path, ray_cluster):
    import uuid

    from farm.app.embedded import EmbeddedFarm
    from farm.config import Settings

    settings = Settings(data_dir=str(tmp_path), namespace=f"up{uuid.uuid4().hex[:8]}", lease_s=3.0)
    nowhere = {E: Resources(num_cpus=1, custom={"no-such-node": 1})}
    with EmbeddedFarm(settings, backend_kind="ray", ready_timeout_s=5.0,
                      backend_options={"address": ray_cluster.address, "resources": nowhere}) as farm:
        with pytest.raises(TimeoutError, match=r"1 worker\(s\) of synthetic.execute are pending: no node") as raised:
            farm.wait_ready()
    # a compile worker a loaded node is slow to start is pending too, but never said to find no node
    assert "compile are pending: no node" not in str(raised.value)
