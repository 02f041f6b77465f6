"""The live half of the metrics (farm.app.metrics.live) read from a real Redis: what waits and runs, the
active batches, each tenant's fair share and busy workers, lease recoveries, the planner's decisions and
heartbeat, a Redis that is gone, and each tenant's recent extra delay from the history store."""

from __future__ import annotations

import time

import pytest
import redis as redis_lib
from prometheus_client import CollectorRegistry

from farm.app import fair_shares
from farm.app.metrics.live import LiveCollector
from farm.protocol import counters
from farm.protocol.dispatch import Dispatch
from farm.protocol.shares import FairShare

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

COMPILE = "synthetic.compile"


@pytest.fixture
def scrape(settings):
    client = redis_lib.Redis.from_url(settings.redis_url, decode_responses=True)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(settings, None, client))
    yield registry.get_sample_value
    client.close()


def test_requests_waiting_and_running_are_counted_per_stage(settings, reward_client, scrape):
    batch = reward_client.open_batch("t", "synthetic", 3)
    for i in range(3):
        batch.submit(f"r{i}", {"times": [1, 0]})
    Dispatch(settings).pick(COMPILE, "w", "ebf", "tok")
    labels = {"pipeline": "synthetic", "stage": "compile"}
    assert scrape("farm_stage_queued_requests", labels) == 2
    assert scrape("farm_stage_running_requests", labels) == 1


def test_an_active_batch_shows_under_its_task_with_its_outstanding_requests_and_estimate(settings, reward_client,
                                                                                          scrape):
    batch = reward_client.open_batch("task-x", "synthetic", 4)
    batch.submit("r0", {"times": [0, 0]})  # visits no stage: done at once
    Dispatch(settings).set_estimate(batch.id, 2e9)
    labels = {"task": "task-x", "pipeline": "synthetic"}
    assert scrape("farm_task_active_batches", labels) == 1
    assert scrape("farm_task_outstanding_requests", labels) == 3
    assert scrape("farm_task_estimated_completion_timestamp_seconds", labels) == 2e9


def test_a_lease_given_back_after_its_worker_went_quiet_is_counted(settings, reward_client, scrape):
    quick = settings.with_(lease_s=0.2)
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", {"times": [1, 0]})
    Dispatch(quick).pick(COMPILE, "w", "ebf", "tok")
    time.sleep(0.3)
    assert reward_client.sweep() == 1
    assert scrape("farm_lease_recoveries_total", {"pipeline": "synthetic", "stage": "compile"}) == 1


def test_a_request_stopped_for_a_reserving_tenant_is_counted(settings, reward_client, scrape):
    from farm.app import fair_shares
    from farm.protocol.shares import FairShare
    d = Dispatch(settings)
    fair_shares.put(d.redis, settings.namespace, {"t1": FairShare(reserve=True)})
    flood = reward_client.open_batch("t2.t", "synthetic", 2, "t2:flood")
    flood.submit_many([("r0", {"times": [9, 0]}), ("r1", {"times": [9, 0]})])
    d.pick(COMPILE, "w0", "ebf", "tok0", "cpu", (COMPILE,))
    d.pick(COMPILE, "w1", "ebf", "tok1", "cpu", (COMPILE,))
    reward_client.open_batch("t1.t", "synthetic", 1, "t1:b").submit("r0", {"times": [1, 0]})
    assert d.preempt(COMPILE, "cpu", (COMPILE,)).stopped == ["w1"]
    assert scrape("farm_preemptions_total", {"pipeline": "synthetic", "stage": "compile"}) == 1


def test_the_planners_decisions_make_a_histogram_of_their_runtime(settings, scrape):
    client = redis_lib.Redis.from_url(settings.redis_url)
    counters.observe_decisions(client, settings.namespace, [0.0004, 0.003, 0.003, 7.0])
    client.close()
    assert scrape("farm_planner_decision_seconds_count") == 4
    assert scrape("farm_planner_decision_seconds_bucket", {"le": "0.001"}) == 1
    assert scrape("farm_planner_decision_seconds_bucket", {"le": "0.005"}) == 3
    assert scrape("farm_planner_decision_seconds_bucket", {"le": "5.0"}) == 3
    assert scrape("farm_planner_decision_seconds_bucket", {"le": "+Inf"}) == 4
    assert scrape("farm_planner_decision_seconds_sum") == pytest.approx(7.0064)


def test_the_planners_pools_and_targets_come_from_its_heartbeat(settings, scrape):
    from farm.protocol import heartbeat

    assert scrape("farm_planner_up") == 0
    client = redis_lib.Redis.from_url(settings.redis_url)
    beat = heartbeat.Heartbeat(pid=1, at=time.time(), backend="local", startup_s=1.5, targets={COMPILE: 3},
                               pools={COMPILE: heartbeat.Pool(pending=1, starting=1, running=2)})
    heartbeat.beat(client, settings.namespace, beat, ttl_s=10.0)
    client.close()
    labels = {"pipeline": "synthetic", "stage": "compile"}
    assert scrape("farm_planner_up") == 1
    assert scrape("farm_stage_workers", {**labels, "state": "target"}) == 3
    assert scrape("farm_stage_workers", {**labels, "state": "running"}) == 2
    assert scrape("farm_stage_workers", {**labels, "state": "pending"}) == 1
    assert scrape("farm_planner_startup_seconds") == 1.5


def test_the_capacity_and_the_stage_it_binds_come_from_the_planners_heartbeat(settings, scrape):
    from farm.protocol import heartbeat

    execute = "synthetic.execute"
    client = redis_lib.Redis.from_url(settings.redis_url)
    beat = heartbeat.Heartbeat(pid=1, at=time.time(), backend="ray", targets={COMPILE: 3, execute: 2},
                               capacity={"gpu": heartbeat.KindCapacity(placeable=2, most=4)}, node_startup_s=90.0,
                               bound={execute: heartbeat.Bound("gpu", wanted=12, held=4, delay_mean_s=20.0,
                                                               delay_max_s=45.0, delay_s=30.0)})
    heartbeat.beat(client, settings.namespace, beat, ttl_s=10.0)
    client.close()

    assert scrape("farm_capacity_workers", {"resource": "gpu", "scope": "placeable"}) == 2
    assert scrape("farm_capacity_workers", {"resource": "gpu", "scope": "most"}) == 4
    assert scrape("farm_capacity_node_startup_seconds") == 90.0
    gpu = {"pipeline": "synthetic", "stage": "execute", "resource": "gpu"}
    assert scrape("farm_stage_capacity_short_workers", gpu) == 8
    assert scrape("farm_stage_capacity_wanted_workers", gpu) == 12
    assert scrape("farm_stage_capacity_expected_delay_seconds", {"pipeline": "synthetic", "stage": "execute"}) == 45.0
    assert scrape("farm_stage_capacity_short_workers", {"pipeline": "synthetic", "stage": "compile",
                                                        "resource": "cpu"}) == 0


def test_a_redis_that_is_gone_is_reported_down_and_the_scrape_still_answers(settings):
    from tests.support.redis_server import free_port

    gone = settings.with_(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    client = redis_lib.Redis.from_url(gone.redis_url, decode_responses=True, socket_connect_timeout=1)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(gone, None, client))
    assert registry.get_sample_value("farm_redis_up") == 0
    assert registry.get_sample_value("farm_stage_queued_requests", {"pipeline": "synthetic", "stage": "compile"}) is None


def test_the_redis_memory_and_its_bound_are_read_as_redis_reports_them(settings, scrape):
    client = redis_lib.Redis.from_url(settings.redis_url, decode_responses=True)
    info = client.info("memory")
    client.close()
    assert scrape("farm_redis_memory_used_bytes") > 0
    assert scrape("farm_redis_memory_max_bytes") == info["maxmemory"]
    assert scrape("farm_redis_maxmemory_policy", {"policy": info["maxmemory_policy"]}) == 1


def test_each_tenant_shows_its_share_its_caps_and_its_busy_workers_per_kind(settings, reward_client, scrape):
    client = redis_lib.Redis.from_url(settings.redis_url, decode_responses=True)
    fair_shares.publish(client, settings.namespace, [_Tenant(3, FairShare(2.0, {"cpu": 4}))])
    client.close()
    batch = reward_client.open_batch("t3.task", "synthetic", 2, "t3:b")
    batch.submit("r0", {"times": [1, 0]})
    Dispatch(settings).pick(COMPILE, "w", "ebf", "tok")
    assert scrape("farm_tenant_share", {"tenant": "t3"}) == 2.0
    assert scrape("farm_tenant_max_workers", {"tenant": "t3", "resource": "cpu"}) == 4
    assert scrape("farm_tenant_max_workers", {"tenant": "t3", "resource": "gpu"}) is None
    assert scrape("farm_tenant_busy_workers", {"tenant": "t3", "resource": "cpu"}) == 1
    assert scrape("farm_tenant_busy_workers", {"tenant": "t3", "resource": "gpu"}) == 0


def test_a_busy_tenant_without_a_published_share_shows_the_default(settings, reward_client, scrape):
    reward_client.open_batch("task", "synthetic", 1, "direct").submit("r0", {"times": [1, 0]})
    Dispatch(settings).pick(COMPILE, "w", "ebf", "tok")
    assert scrape("farm_tenant_share", {"tenant": "-"}) == 1.0
    assert scrape("farm_tenant_busy_workers", {"tenant": "-", "resource": "cpu"}) == 1


def test_each_tenants_extra_delay_is_the_mean_over_its_recently_completed_batches(settings, engine):
    from sqlalchemy import insert

    from farm.app.metrics.live import DELAY_WINDOW_S
    from farm.store.models import Batch, Task

    now = time.time()
    with engine.begin() as conn:
        conn.execute(insert(Task), [{"name": "t1.x", "pipeline": "synthetic", "created_at": 0.0}])
        conn.execute(insert(Batch), [
            {"id": "t1:a", "task": "t1.x", "completed_at": now - 10, "extra_delay_s": 1.0},
            {"id": "t1:b", "task": "t1.x", "completed_at": now - 20, "extra_delay_s": 3.0},
            {"id": "t1:old", "task": "t1.x", "completed_at": now - DELAY_WINDOW_S - 60, "extra_delay_s": 100.0},
        ])
    client = redis_lib.Redis.from_url(settings.redis_url, decode_responses=True)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(settings, engine, client, clock=lambda: now))
    try:
        assert registry.get_sample_value("farm_tenant_extra_delay_seconds", {"tenant": "t1"}) == 2.0
        assert registry.get_sample_value("farm_tenant_completed_batches", {"tenant": "t1"}) == 2
    finally:
        client.close()


class _Tenant:
    """What publishing reads of a tenant (farm.store.tenants.Tenant), without a store."""

    def __init__(self, tenant_id: int, fair_share: FairShare) -> None:
        self.id, self.fair_share, self.active = tenant_id, fair_share, True
