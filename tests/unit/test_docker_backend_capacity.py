"""The docker backend's capacity: GPU workers bounded by the GPUs it hands out or sees, cores only by
FARM_MAX_CPUS (no engine: nothing here talks to one)."""

from __future__ import annotations

import pytest

from farm.config import Settings
from planner.backends.docker import DockerBackend
from planner.backends.docker.spec import Limits


@pytest.fixture
def make():
    made = []

    def build(**options):
        options = {"environ": {}, "gpus_seen": lambda: 0, **options}
        backend = DockerBackend(Settings(namespace="t", redis_url="redis://127.0.0.1:1/0"), client=object(),
                                **options)
        made.append(backend)
        return backend

    yield build
    for backend in made:
        backend._redis.close()


def test_gpu_workers_are_as_many_as_the_gpus_it_hands_out(make):
    assert make(gpu_ids=["0", "1", "2"], gpus_seen=lambda: 8).capacity().limit("gpu") == 3


def test_without_given_gpus_gpu_workers_are_as_many_as_the_gpus_it_sees(make):
    assert make(gpus_seen=lambda: 4).capacity().limit("gpu") == 4


def test_farm_max_gpus_below_the_gpus_there_bounds_them(make):
    assert make(gpus_seen=lambda: 4, environ={"FARM_MAX_GPUS": "2"}).capacity().limit("gpu") == 2


def test_no_gpu_seen_or_given_leaves_gpu_workers_unbounded(make):
    assert make().capacity().unbounded


def test_gpu_stages_run_without_a_gpu_are_bounded_by_cores_only(make):
    backend = make(limits={"gpu": Limits(cpus=2.0)}, gpus_seen=lambda: 4, environ={"FARM_MAX_CPUS": "8"})

    capacity = backend.capacity()

    assert capacity.limit("gpu") == 4  # 8 cores, 2 each: the host's GPUs are not theirs
    assert capacity.limit("cpu") == 8 and capacity.limit("io") == 16  # a core each, half a core each


def test_cores_bound_nothing_unless_farm_max_cpus_says_so(make):
    assert make(gpus_seen=lambda: 1).capacity().limit("cpu") is None
