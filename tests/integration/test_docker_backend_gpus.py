"""The docker backend hands each GPU worker its own GPU (a recording stand-in for the engine: this
machine has no GPU and no NVIDIA runtime; the real engine is exercised by tests/contract)."""

from __future__ import annotations

import itertools

import pytest

import docker
from planner.backends import BackendError
from planner.backends.docker import DockerBackend

EXECUTE = "synthetic.execute"  # resource "gpu"


class RecordingEngine:
    """Just enough of the engine API: created containers run until removed."""

    def __init__(self):
        self.api = self
        self.containers_ = []
        self._ids = itertools.count()
        self._host = docker.APIClient(version="1.41")  # builds host configs; never connects

    def create_host_config(self, **kw):
        return self._host.create_host_config(**kw)

    def create_container(self, image, command, name, labels, host_config, **kw):
        cid = f"c{next(self._ids):011d}"
        self.containers_.append({"Id": cid, "Labels": labels, "State": "created", "Image": image, "HostConfig": host_config})
        return {"Id": cid}

    def start(self, cid):
        next(c for c in self.containers_ if c["Id"] == cid)["State"] = "running"

    def containers(self, all=False, filters=None):
        wanted = filters["label"] if isinstance(filters["label"], list) else [filters["label"]]

        def match(c):
            return all_labels(c["Labels"], wanted) and (all or c["State"] == "running")

        return [c for c in self.containers_ if match(c)]

    def close(self):
        pass


def all_labels(labels, wanted):
    for w in wanted:
        key, _, value = w.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


@pytest.fixture
def engine():
    return RecordingEngine()


def test_each_gpu_worker_holds_a_gpu_of_its_own(settings, engine):
    backend = DockerBackend(settings, client=engine, environ={}, gpu_ids=["0", "1"], gpu_image="cuda-worker:1")

    backend.spawn(EXECUTE, 2)

    gpus = [c["Labels"]["farm.gpu"] for c in engine.containers_]
    assert sorted(gpus) == ["0", "1"]
    assert [c["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] for c in engine.containers_] == [[g] for g in gpus]
    assert {c["Image"] for c in engine.containers_} == {"cuda-worker:1"}


def test_a_gpu_worker_beyond_the_gpus_is_refused_clearly(settings, engine):
    backend = DockerBackend(settings, client=engine, environ={}, gpu_ids=["0"])
    backend.spawn(EXECUTE, 1)

    with pytest.raises(BackendError, match="only 0 of the docker backend's GPUs"):
        backend.spawn(EXECUTE, 1)
    assert len(engine.containers_) == 1


def test_a_spawn_that_needs_more_gpus_than_are_free_starts_none(settings, engine):
    backend = DockerBackend(settings, client=engine, environ={}, gpu_ids=["0", "1"])

    with pytest.raises(BackendError, match="3 GPU worker"):
        backend.spawn(EXECUTE, 3)
    assert engine.containers_ == []


def test_cpu_workers_get_no_gpu(settings, engine):
    backend = DockerBackend(settings, client=engine, environ={}, gpu_ids=["0"], image="cpu-worker:1")

    backend.spawn("synthetic.compile", 2)

    assert all("DeviceRequests" not in c["HostConfig"] or not c["HostConfig"]["DeviceRequests"] for c in engine.containers_)
    assert {c["Image"] for c in engine.containers_} == {"cpu-worker:1"}
    assert all(c["HostConfig"]["CapAdd"] == ["SYS_ADMIN"] for c in engine.containers_)
