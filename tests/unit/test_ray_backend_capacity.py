"""A Ray cluster's room in workers of each kind, from the driver's answer (no cluster, no ray)."""

from __future__ import annotations

from planner.backends.ray.capacity import (ClusterResources, NodeGroup, NodeStartups, cluster_capacity, holds_one,
                                           size_of)
from planner.backends.ray.spec import DEFAULT_RESOURCES, Resources

SIZES = {kind: size_of(r) for kind, r in DEFAULT_RESOURCES.items()}
# the test cluster's shape (tests.support.ray_cluster): a head with nothing, 2 GPUs, 4 cores
TOTAL = {"head": {"memory": 1e9}, "gpu": {"GPU": 2.0}, "cpu": {"CPU": 4.0}}


def cluster(available=None, **more) -> ClusterResources:
    return ClusterResources(total=TOTAL, available=TOTAL if available is None else available, **more)


def test_a_fixed_cluster_reports_its_resources_in_workers_of_each_kind():
    capacity = cluster_capacity(cluster(), SIZES, {}, {}, 300.0)

    assert dict(capacity.placeable) == {"cpu": 4, "gpu": 2, "io": 16}
    assert dict(capacity.most) == {"cpu": 4, "gpu": 2, "io": 16}
    assert capacity.node_startup_s == 0.0  # no node is expected to join


def test_the_farms_own_placed_workers_count_as_placeable():
    busy = {"head": {}, "gpu": {"GPU": 0.0}, "cpu": {"CPU": 1.0}}

    capacity = cluster_capacity(cluster(busy), SIZES, {"gpu": 2, "cpu": 3}, {}, 0.0)

    assert capacity.placeable["gpu"] == 2 and capacity.placeable["cpu"] == 4


def test_what_others_hold_is_not_placeable_but_still_at_most():
    others = {"head": {}, "gpu": {"GPU": 1.0}, "cpu": {"CPU": 4.0}}

    capacity = cluster_capacity(cluster(others), SIZES, {}, {}, 0.0)

    assert capacity.placeable["gpu"] == 1 and capacity.most["gpu"] == 2


def test_a_gpu_worker_asking_for_half_a_gpu_is_two_per_gpu():
    sizes = {**SIZES, "gpu": size_of(Resources(num_gpus=0.5))}

    assert cluster_capacity(cluster(), sizes, {}, {}, 0.0).placeable["gpu"] == 4


def test_a_kind_whose_workers_hold_nothing_is_unbounded():
    sizes = {**SIZES, "io": size_of(Resources())}

    assert cluster_capacity(cluster(), sizes, {}, {}, 0.0).limit("io") is None


def test_a_visible_autoscaler_raises_the_most_to_its_node_groups_maximum():
    groups = (NodeGroup({"GPU": 2.0, "CPU": 8.0}, max_count=3), NodeGroup({"CPU": 4.0}, max_count=1))

    capacity = cluster_capacity(cluster(groups=groups), SIZES, {}, {}, 120.0)

    assert capacity.most["gpu"] == 6 and capacity.placeable["gpu"] == 2
    assert capacity.most["cpu"] == 28
    assert capacity.node_startup_s == 120.0


def test_the_autoscalers_cluster_wide_maximum_caps_its_node_groups():
    groups = (NodeGroup({"GPU": 2.0}, max_count=10),)

    capacity = cluster_capacity(cluster(groups=groups, max_resources={"GPU": 5.0}), SIZES, {}, {}, 60.0)

    assert capacity.most["gpu"] == 5


def test_a_node_group_without_a_maximum_leaves_its_kind_unbounded():
    groups = (NodeGroup({"GPU": 1.0}, max_count=-1),)

    assert cluster_capacity(cluster(groups=groups), SIZES, {}, {}, 60.0).limit("gpu") is None


def test_farm_max_gpus_stands_in_for_an_autoscaler_the_backend_cannot_see():
    capacity = cluster_capacity(cluster(), SIZES, {}, {"GPU": 8.0}, 200.0)

    assert capacity.most["gpu"] == 8 and capacity.placeable["gpu"] == 2
    assert capacity.most["cpu"] == 4  # CPUs are not named: what is there
    assert capacity.node_startup_s == 200.0


def test_farm_max_cpus_below_the_cluster_bounds_what_is_placeable():
    capacity = cluster_capacity(cluster(), SIZES, {}, {"CPU": 2.0}, 0.0)

    assert capacity.placeable["cpu"] == 2 and capacity.most["cpu"] == 2
    assert capacity.placeable["io"] == 8


def test_the_drivers_answer_keeps_live_nodes_only():
    raw = {"total": {"a": {"GPU": 1.0}}, "available": {"a": {"GPU": 1.0}, "gone": {"GPU": 4.0}},
           "groups": [{"resources": {"GPU": 1.0}, "max_count": 2}], "max_resources": {}}

    parsed = ClusterResources.parse(raw)

    assert set(parsed.available) == {"a"}
    assert parsed.groups == (NodeGroup({"GPU": 1.0}, 2),)


def test_node_start_up_is_measured_from_workers_that_waited_for_a_new_node():
    startups = NodeStartups(default=300.0)
    assert startups.seconds == 300.0

    startups.placed(asked_at=100.0, placed_at=160.0, node_joined_at=150.0)
    startups.placed(asked_at=200.0, placed_at=280.0, node_joined_at=270.0)
    startups.placed(asked_at=300.0, placed_at=301.0, node_joined_at=None)  # a node that was there
    startups.placed(asked_at=400.0, placed_at=401.0, node_joined_at=10.0)  # joined long before

    assert startups.seconds == 70.0


def test_a_worker_that_fits_a_busy_node_can_be_held_though_no_room_is_free_now():
    assert holds_one(cluster(available={"head": {}, "gpu": {"GPU": 0.0}, "cpu": {"CPU": 0.0}}), SIZES["gpu"])


def test_a_worker_asking_for_a_resource_no_node_has_can_never_be_held():
    assert not holds_one(cluster(), {"CPU": 1.0, "no-such-node": 1.0})


def test_a_worker_too_big_for_every_node_there_fits_a_node_type_the_autoscaler_may_add():
    big = {"GPU": 8.0}

    assert not holds_one(cluster(), big)
    assert holds_one(cluster(groups=(NodeGroup({"GPU": 8.0}, 2),)), big)
    assert not holds_one(cluster(groups=(NodeGroup({"GPU": 8.0}, 0),)), big)  # a group that may run no node
