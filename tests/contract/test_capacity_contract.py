"""The capacity contract, over every backend: what each reports it can place, in workers of the knobs'
resource kinds, within the operator's limit, and not shrunk by the farm's own workers."""

from __future__ import annotations

import pytest

from farm.pipeline import RESOURCES
from planner.policy.capacity import Capacity
from tests.contract.test_backends import COMPILE, running


def test_capacity_is_counted_in_workers_of_the_knobs_resource_kinds(harness):
    capacity = harness.make().capacity()

    assert isinstance(capacity, Capacity)
    assert set(capacity.placeable) <= set(RESOURCES) and set(capacity.most) <= set(RESOURCES)


def test_capacity_keeps_within_the_configured_cpus(harness):
    capacity = harness.make(max_resources={"CPU": 2}).capacity()

    assert capacity.limit("cpu") == 2
    assert capacity.placeable["cpu"] <= 2


def test_the_farms_own_running_workers_leave_what_is_placeable_unchanged(harness):
    # 8 cores: above the test cluster's 4, so on Ray what is placeable is the cluster's own count
    backend = harness.make(max_resources={"CPU": 8})
    before = backend.capacity()
    backend.spawn(COMPILE, 1)
    running(backend, COMPILE, 1)

    after = backend.capacity()

    assert after.placeable["cpu"] == before.placeable["cpu"]
    assert after.most["cpu"] == 8


@pytest.mark.ray
def test_a_ray_cluster_with_two_gpus_reports_two_gpu_workers(settings, ray_cluster):
    from planner.backends.ray import RayBackend

    backend = RayBackend(settings, address=ray_cluster.address, max_resources={})
    try:
        capacity = backend.capacity()
    finally:
        backend.close()

    assert capacity.placeable["gpu"] == 2 and capacity.most["gpu"] == 2
    assert capacity.placeable["cpu"] == 4  # the CPU node's 4 cores; the GPU node declares none
    assert capacity.node_startup_s == 0.0


@pytest.mark.ray
def test_farm_max_gpus_tells_ray_how_far_an_unseen_autoscaler_grows(settings, ray_cluster):
    from planner.backends.ray import RayBackend

    backend = RayBackend(settings, address=ray_cluster.address,
                         environ={"FARM_MAX_GPUS": "6", "FARM_NODE_STARTUP_S": "90"})
    try:
        capacity = backend.capacity()
    finally:
        backend.close()

    assert capacity.placeable["gpu"] == 2 and capacity.most["gpu"] == 6
    assert capacity.node_startup_s == 90.0
