"""The docker backend's container specification and configuration, without an engine."""

from __future__ import annotations

import pytest

from farm.config import Settings
from planner.backends.docker import DockerBackend
from planner.backends.docker.spec import Limits, container_spec, engine_time, options_from_env


def spec(**overrides):
    args = dict(name="farm.cuda.execute.ab12", stage="cuda.execute", namespace="farm", image="img:1",
                command=["farm", "worker"], env={"FARM_NAMESPACE": "farm"}, network="host",
                limits=Limits(cpus=2.0, memory="4g"), spawned_at=1700000000.25, stop_timeout_s=90.2)
    args.update(overrides)
    return container_spec(**args)


def test_a_worker_container_is_labelled_with_its_farm_stage_and_name():
    create, _ = spec()
    assert create["labels"] == {"farm.namespace": "farm", "farm.stage": "cuda.execute", "farm.worker": "farm.cuda.execute.ab12",
                                "farm.spawned_at": "1700000000.25", "farm.backend": "docker"}
    assert create["name"] == "farm.cuda.execute.ab12"
    assert create["command"] == ["farm", "worker", "--stage", "cuda.execute", "--name", "farm.cuda.execute.ab12"]


def test_the_engine_waits_the_whole_stage_timeout_and_grace_before_killing():
    create, host = spec(stop_timeout_s=90.2)
    assert create["stop_signal"] == "SIGTERM" and create["stop_timeout"] == 91
    assert host["init"] is True


def test_cpu_and_memory_limits_become_the_containers_limits():
    _, host = spec(limits=Limits(cpus=1.5, memory="512m"))
    assert host["nano_cpus"] == 1_500_000_000 and host["mem_limit"] == "512m"
    assert "device_requests" not in host


def test_a_gpu_worker_asks_for_exactly_one_gpu():
    _, host = spec(limits=Limits(gpus=1))
    (request,) = host["device_requests"]
    assert request["Count"] == 1 and request["Capabilities"] == [["gpu"]]


def test_a_gpu_worker_given_a_gpu_id_holds_that_gpu_and_says_so_in_a_label():
    create, host = spec(limits=Limits(gpus=1), gpu_id="3")
    (request,) = host["device_requests"]
    assert request["DeviceIDs"] == ["3"] and request["Capabilities"] == [["gpu"]]
    assert create["labels"]["farm.gpu"] == "3"


@pytest.mark.parametrize("network", ["host", "reward-farm"])
def test_the_network_is_the_one_configured(network):
    _, host = spec(network=network)
    assert host["network_mode"] == network


def test_limits_refuse_nonsense():
    with pytest.raises(ValueError, match="cpus"):
        Limits(cpus=0)
    with pytest.raises(ValueError, match="GPU"):
        Limits(gpus=2)


def test_options_come_from_the_environment_for_compose():
    options = options_from_env({
        "FARM_DOCKER_IMAGE": "w:2", "FARM_DOCKER_GPU_IMAGE": "wc:2", "FARM_DOCKER_NETWORK": "reward-farm",
        "FARM_DOCKER_GPUS": "0, 1", "FARM_DOCKER_IMAGES": '{"cuda": "wc:2"}',
        "FARM_DOCKER_LIMITS": '{"cpu": {"cpus": 1, "memory": "1g"}, "cuda.execute": {"cpus": 4, "gpus": 1}}',
    })
    assert options == {"image": "w:2", "gpu_image": "wc:2", "network": "reward-farm", "gpu_ids": ["0", "1"],
                       "images": {"cuda": "wc:2"},
                       "limits": {"cpu": Limits(cpus=1, memory="1g"), "cuda.execute": Limits(cpus=4, gpus=1)}}
    assert options_from_env({}) == {}


@pytest.mark.parametrize("key, value", [
    ("FARM_DOCKER_LIMITS", "not json"), ("FARM_DOCKER_LIMITS", '{"cpu": {"cores": 2}}'),
    ("FARM_DOCKER_IMAGES", '["x"]'),
])
def test_a_malformed_environment_option_says_which_one(key, value):
    with pytest.raises(ValueError, match=key):
        options_from_env({key: value})


class NoEngine:
    """Stands in for the docker client where a test never reaches the engine."""

    def close(self):
        pass


def backend(**options):
    settings = Settings(redis_url="redis://127.0.0.1:1/0", namespace="farm")
    return DockerBackend(settings, client=NoEngine(), environ={}, **options)


def test_a_stage_runs_the_image_of_its_stage_then_pipeline_then_resource_kind():
    b = backend(image="cpu:1", gpu_image="gpu:1", images={"cuda": "cuda:1", "code.compile": "gcc:1"})
    assert b.image_for("cuda.compile", Limits(cpus=1)) == "cuda:1"
    assert b.image_for("code.compile", Limits(cpus=1)) == "gcc:1"
    assert b.image_for("code.run", Limits(cpus=1)) == "cpu:1"
    assert b.image_for("synthetic.execute", Limits(gpus=1)) == "gpu:1"


def test_workers_get_the_farms_settings_as_environment():
    b = backend(env={"EXTRA": "1"})
    assert b.env["FARM_REDIS_URL"] == "redis://127.0.0.1:1/0" and b.env["FARM_NAMESPACE"] == "farm"
    assert b.env["EXTRA"] == "1"


def test_engine_times_are_read_to_the_nanosecond():
    assert engine_time("2026-11-22T20:52:49.266057756Z") == pytest.approx(1795380769.266057756, abs=1e-6)
    assert engine_time("2026-11-22T20:52:49Z") == pytest.approx(1795380769.0)
    assert engine_time("0001-01-01T00:00:00Z") is None and engine_time(None) is None


def test_systempaths_unconfined_becomes_empty_masked_and_read_only_paths_for_the_engine():
    import docker

    from planner.backends.docker.spec import host_config

    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")  # builds configs, calls nothing
    config = host_config(api, {"network_mode": "host", "security_opt": ["apparmor=unconfined", "systempaths=unconfined"]})
    assert config["MaskedPaths"] == [] and config["ReadonlyPaths"] == []
    assert config["SecurityOpt"] == ["apparmor=unconfined"]
    assert "MaskedPaths" not in host_config(api, {"network_mode": "host"})
