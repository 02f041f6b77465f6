"""Backends' capacity arithmetic and settings, as data (no engine, no cluster)."""

from __future__ import annotations

import pytest

from planner.backends.capacity import (CPU, GPU, LOCAL_SIZES, fit, fit_nodes, limited, limits_from_env,
                                       node_startup_from_env, within)
from planner.policy.capacity import Capacity


def test_workers_fit_by_the_scarcest_resource_they_hold():
    assert fit({CPU: 8, GPU: 2}, {CPU: 2, GPU: 1}) == 2
    assert fit({CPU: 3, GPU: 2}, {CPU: 2, GPU: 1}) == 1


def test_fractional_workers_fit_without_float_loss():
    assert fit({CPU: 0.75}, {CPU: 0.25}) == 3


def test_a_worker_that_holds_nothing_is_bounded_by_nothing():
    assert fit({CPU: 4}, {CPU: 0, GPU: 0}) is None
    assert fit_nodes([{CPU: 4}], {}) is None


def test_a_resource_the_pool_lacks_fits_no_worker():
    assert fit({CPU: 4}, {GPU: 1}) == 0


def test_workers_fit_node_by_node_not_in_the_clusters_sum():
    nodes = [{GPU: 0.5}, {GPU: 0.5}, {GPU: 1.0}]

    assert fit_nodes(nodes, {GPU: 1.0}) == 1


def test_limits_count_only_the_resources_they_name():
    assert within({GPU: 2}, {CPU: 2, GPU: 1}) == 2
    assert within({GPU: 2}, {CPU: 1}) is None


def test_a_fixed_backend_reports_its_limits_in_workers_of_each_kind():
    capacity = limited(LOCAL_SIZES, {GPU: 2, CPU: 3})

    assert capacity == Capacity(placeable={"cpu": 3, "gpu": 2, "io": 12}, most={"cpu": 3, "gpu": 2, "io": 12})


def test_without_limits_a_fixed_backend_is_unbounded():
    assert limited(LOCAL_SIZES, {}).unbounded


def test_the_limits_are_read_from_farm_max_gpus_and_cpus():
    assert limits_from_env({"FARM_MAX_GPUS": "2", "FARM_MAX_CPUS": " 16 ", "OTHER": "1"}) == {GPU: 2.0, CPU: 16.0}
    assert limits_from_env({"FARM_MAX_GPUS": ""}) == {}


@pytest.mark.parametrize("value", ["-1", "many", "inf", "nan"])
def test_a_limit_that_is_not_a_number_of_devices_is_refused(value):
    with pytest.raises(ValueError, match="FARM_MAX_GPUS"):
        limits_from_env({"FARM_MAX_GPUS": value})


def test_the_node_start_up_setting_is_seconds_or_absent():
    assert node_startup_from_env({"FARM_NODE_STARTUP_S": "90"}) == 90.0
    assert node_startup_from_env({}) is None
    with pytest.raises(ValueError, match="FARM_NODE_STARTUP_S"):
        node_startup_from_env({"FARM_NODE_STARTUP_S": "-5"})


def local_backend(tmp_path):
    from farm.config import Settings
    from planner.backends.local import LocalBackend

    return LocalBackend(Settings(namespace="t", redis_url="redis://127.0.0.1:1/0", data_dir=str(tmp_path)),
                        launcher=False)


def test_the_local_backend_is_unbounded_unless_the_operator_says_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("FARM_MAX_GPUS", raising=False)
    monkeypatch.delenv("FARM_MAX_CPUS", raising=False)
    backend = local_backend(tmp_path)
    try:
        assert backend.capacity().unbounded
    finally:
        backend.close()


def test_the_local_backend_reads_farm_max_gpus_as_one_gpu_worker_per_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_MAX_GPUS", "2")
    monkeypatch.delenv("FARM_MAX_CPUS", raising=False)
    backend = local_backend(tmp_path)
    try:
        assert dict(backend.capacity().most) == {"gpu": 2}
    finally:
        backend.close()
