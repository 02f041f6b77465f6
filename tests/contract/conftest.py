"""One harness per backend for the contract suite: how to build one (again, as a restarted daemon would),
read the worker lives it recorded, crash a worker behind its back, and clean up.

The docker backend needs an engine (`docker/ci-engine.sh`); without one its tests are skipped, unless
FARM_REQUIRE_DOCKER=1 (CI) makes that a failure. The ray backend runs on a 3-node cluster on this machine,
inside a loopback-only network namespace (`-m ray` under tests.support.loopback_ns; FARM_REQUIRE_RAY=1 in CI)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from farm import events
from planner.backends import Backend, Worker
from tests.support.waiting import eventually

REAL = ("local", "docker", "ray")


class Harness:
    def __init__(self, kind: str, settings, request) -> None:
        self.kind = kind
        self.settings = settings
        self.real = kind in REAL
        self.backends: list[Backend] = []
        self.options: dict[str, Any] = {}
        self.world = None
        self._docker = None
        if kind == "fake":
            from planner.backends.fake import FakeWorld

            self.world = FakeWorld()
        elif kind == "docker":
            self._docker = docker_client()
            from tests.support.docker_image import backend_options

            self.options = backend_options(self._docker)
        elif kind == "ray":
            self.options = {"address": request.getfixturevalue("ray_cluster").address}
        request.addfinalizer(self.cleanup)

    def make(self, **options: Any) -> Backend:
        """A new backend on the same farm: a second one is what a restarted daemon sees."""
        if self.kind == "fake":
            from planner.backends.fake import FakeBackend

            backend = FakeBackend(self.settings, world=self.world, **options)
        elif self.kind == "local":
            from planner.backends.local import LocalBackend

            backend = LocalBackend(self.settings, **options)
        elif self.kind == "ray":
            from planner.backends.ray import RayBackend

            backend = RayBackend(self.settings, **{**self.options, **options})
        else:
            from planner.backends.docker import DockerBackend, Limits

            limits = {"cpu": Limits(cpus=1.0, memory="512m"), "gpu": Limits(cpus=1.0, memory="512m")}
            backend = DockerBackend(self.settings, **{"limits": limits, **self.options, **options})
        self.backends.append(backend)
        return backend

    def lives(self, kind: str) -> list[dict]:
        """The `kind` worker-life events recorded so far (decoded)."""
        if self.world is not None:
            return self.world.lives(kind)
        import redis

        client = redis.Redis.from_url(self.settings.redis_url)
        try:
            found = [events.decode(fields) for _, fields in client.xrange(events.stream_key(self.settings.namespace))]
        finally:
            client.close()
        return [e for e in found if e["kind"] == kind]

    def crash(self, worker: Worker) -> None:
        """The worker dies on its own, as under `kill -9` or the OOM killer."""
        if self.kind == "fake":
            self.world.crash(worker.name)
        elif self.kind == "local":
            os.kill(int(worker.ref), signal.SIGKILL)
        elif self.kind == "ray":
            ray_kill(self.settings.namespace, worker.name)
        else:
            self._docker.api.kill(worker.ref)

    def cleanup(self) -> None:
        """Whatever a test left running is killed outright (warm shutdown is what tests check, not this)."""
        if self.kind == "local":
            from planner.backends.local import LocalBackend

            backend = LocalBackend(self.settings)
            for w in backend.list():
                try:
                    os.killpg(int(w.ref), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            eventually(lambda: not backend.list(), 10.0, what="killed local workers to be gone")
        elif self.kind == "ray":
            backend = self.backends[0] if self.backends else None
            for w in backend.list() if backend is not None else []:
                ray_kill(self.settings.namespace, w.name)
            if backend is not None:
                eventually(lambda: not backend.list(), 30.0, what="killed ray workers to be gone")
        elif self.kind == "docker":
            label = f"farm.namespace={self.settings.namespace}"
            for c in self._docker.api.containers(all=True, filters={"label": label}):
                self._docker.api.remove_container(c["Id"], force=True)
        for backend in self.backends:
            backend.close()


def ray_kill(namespace: str, name: str) -> None:
    """The worker's actor dies (its worker with it), as when Ray or a node loses it."""
    import ray

    from planner.backends.ray.spec import ray_namespace
    from tests.support.ray_cluster import connected

    connected()
    try:
        ray.kill(ray.get_actor(name, namespace=ray_namespace(namespace)), no_restart=True)
    except ValueError:
        pass  # gone already


def docker_client():
    try:
        import docker

        client = docker.from_env()
        client.ping()
        return client
    except Exception as exc:
        if os.environ.get("FARM_REQUIRE_DOCKER") == "1":
            pytest.fail(f"FARM_REQUIRE_DOCKER=1 but no Docker engine answers: {exc}")
        pytest.skip(f"no Docker engine answers ({exc}); docker/ci-engine.sh starts one")


@pytest.fixture(params=["fake", "local", pytest.param("docker", marks=pytest.mark.docker),
                        pytest.param("ray", marks=pytest.mark.ray)])
def harness(request, settings) -> Harness:
    return Harness(request.param, settings, request)


@pytest.fixture
def real(harness) -> Harness:
    """The harness, for tests that need workers that really consume their queue."""
    if not harness.real:
        pytest.skip("the fake backend runs no Celery workers")
    return harness


@pytest.fixture
def client(settings):
    from farm.client.sync import RewardClient

    c = RewardClient(settings)
    yield c
    c.close()
