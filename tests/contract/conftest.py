"""One harness per backend for the contract suite: how to build one (again, as a restarted daemon would),
read the worker lives it recorded, crash a worker behind its back, and clean up.

The docker backend needs an engine (`docker/ci-engine.sh`); without one its tests are skipped, unless
FARM_REQUIRE_DOCKER=1 (CI) makes that a failure."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from farm import events
from planner.backends import Backend, Worker
from tests.support.waiting import eventually

REAL = ("local", "docker")


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
        request.addfinalizer(self.cleanup)

    def make(self, **options: Any) -> Backend:
        """A new backend on the same farm: a second one is what a restarted daemon sees."""
        if self.kind == "fake":
            from planner.backends.fake import FakeBackend

            backend = FakeBackend(self.settings, world=self.world, **options)
        elif self.kind == "local":
            from planner.backends.local import LocalBackend

            backend = LocalBackend(self.settings, **options)
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
        elif self.kind == "docker":
            label = f"farm.namespace={self.settings.namespace}"
            for c in self._docker.api.containers(all=True, filters={"label": label}):
                self._docker.api.remove_container(c["Id"], force=True)
        for backend in self.backends:
            backend.close()


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


@pytest.fixture(params=["fake", "local", pytest.param("docker", marks=pytest.mark.docker)])
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
