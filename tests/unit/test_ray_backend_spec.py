"""The ray backend's resources per stage and options from the environment, as data (no cluster, no ray)."""

from __future__ import annotations

import json

import pytest

from planner.backends.ray.spec import DEFAULT_RESOURCES, Resources, options_from_env, ray_namespace, resources_for


def test_a_stage_asks_for_its_resource_kinds_default():
    assert resources_for("cuda.execute", "gpu", {}) == Resources(num_gpus=1.0)
    assert resources_for("math.verify", "cpu", {}).options() == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert resources_for("synthetic.fetch", "io", {}) == DEFAULT_RESOURCES["io"]


def test_the_stages_own_entry_wins_over_its_pipelines_and_its_kinds():
    own, pipeline, kind = Resources(num_cpus=2), Resources(num_cpus=3), Resources(num_cpus=4)
    overrides = {"cuda.compile": own, "cuda": pipeline, "cpu": kind}

    assert resources_for("cuda.compile", "cpu", overrides) is own
    assert resources_for("cuda.other", "cpu", overrides) is pipeline
    assert resources_for("math.verify", "cpu", overrides) is kind


def test_custom_resources_and_node_labels_become_actor_options():
    spec = Resources(num_cpus=1, custom={"nvcc": 1}, label_selector={"farm/pool": "gpu"}, memory=2_000_000_000)

    assert spec.options() == {"num_cpus": 1.0, "num_gpus": 0.0, "memory": 2_000_000_000,
                              "resources": {"nvcc": 1}, "label_selector": {"farm/pool": "gpu"}}


def test_options_are_read_from_the_environment():
    environ = {
        "FARM_RAY_ADDRESS": " head:6379 ",
        "FARM_RAY_RESOURCES": json.dumps({"cuda.compile": {"num_cpus": 1, "resources": {"nvcc": 1}},
                                          "gpu": {"num_gpus": 1, "memory": 4e9}}),
        "FARM_RAY_RUNTIME_ENV": json.dumps({"env_vars": {"A": "1"}}),
    }

    options = options_from_env(environ)

    assert options["address"] == "head:6379"
    assert options["resources"]["cuda.compile"] == Resources(num_cpus=1, custom={"nvcc": 1})
    assert options["resources"]["gpu"].memory == 4_000_000_000
    assert options["runtime_env"] == {"env_vars": {"A": "1"}}
    assert options_from_env({}) == {}


@pytest.mark.parametrize("raw, message", [
    ("[]", "JSON object"),
    ('{"gpu": {"num_gpu": 1}}', "unknown keys"),
    ('{"gpu": {"num_gpus": 2}}', "at most one GPU"),
    ('{"cpu": {"num_cpus": -1}}', "num_cpus must be a number >= 0"),
    ('{"cpu": {"resources": {"nvcc": "one"}}}', "custom resource 'nvcc'"),
    ('{"cpu": {"memory": 0}}', "memory"),
    ("not json", "FARM_RAY_RESOURCES"),
])
def test_bad_resources_in_the_environment_are_refused_naming_the_variable_and_the_fault(raw, message):
    with pytest.raises(ValueError, match=message) as caught:
        options_from_env({"FARM_RAY_RESOURCES": raw})
    assert "FARM_RAY_RESOURCES" in str(caught.value)


def test_a_runtime_env_that_is_not_an_object_is_refused():
    with pytest.raises(ValueError, match="FARM_RAY_RUNTIME_ENV must be a JSON object"):
        options_from_env({"FARM_RAY_RUNTIME_ENV": "[1]"})


def test_each_farm_has_a_ray_namespace_of_its_own():
    assert ray_namespace("farm") == "reward-farm.farm" != ray_namespace("other")


def test_an_address_that_is_not_host_and_port_or_does_not_answer_is_refused_at_once():
    from planner.backends.ray.driver import reachable

    assert "is not HOST:PORT" in reachable("nonsense")
    assert "no Ray cluster answers at 127.0.0.1:9" in reachable("127.0.0.1:9", timeout_s=2)
    assert reachable("auto") is None and reachable("ray://head:10001") is None


def test_the_drivers_answers_are_not_mixed_with_what_ray_prints_to_its_stdout():
    import subprocess
    import sys

    script = ("import os; from planner.backends.ray import driver as d; d._keep_stdout_for_answers(); "
              "print('(raylet) WARNING: 4 PYTHON worker processes'); os.write(1, b'more noise\\n'); d._say({'id': 1, 'ok': 2})")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)

    assert done.stdout == '{"id": 1, "ok": 2}\n'
    assert "WARNING" in done.stderr and "more noise" in done.stderr
