"""The documented deployment (docker/compose.yaml) brought up on this machine's engine, for the stack's
tests and bench/stack.py: the images docker/build-local.sh builds, a compose project, farm namespace and
network of its own, its ports published on 127.0.0.1 at free ports, and docker/compose.test.yaml beside
it (PostgreSQL on loopback, so the host reads the history). `down()` takes it down as docker/README.md
says: the planner stopped, its workers retired, then `down --volumes`; `leftovers()` names anything left.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from farm.protocol import heartbeat

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


class StackError(RuntimeError):
    pass


class StaleNetworkEndpoint(StackError):
    """The engine refuses to remove the stack's network for "active endpoints" while no container is
    attached to it or left at all: Docker 20.10's inconsistent endpoint count (moby/moby#17217, #23302),
    which only an engine restart clears ("Fixing inconsistent endpoint_cnt" in its log)."""


def compose_commands() -> dict[str, list[str]]:
    """The compose implementations on this machine: "v2" (`docker compose`, the plugin) and "v1"
    (docker-compose 1.29, Debian bookworm's package); docker/ci-engine.sh installs both."""
    found = {}
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        found["v2"] = ["docker", "compose"]
    if shutil.which("docker-compose"):
        found["v1"] = ["docker-compose"]
    return found


def build_images(timeout_s: float = 1200.0) -> dict[str, str]:
    """docker/build-local.sh (cached: seconds when nothing changed); the variables of docker/local.env."""
    done = subprocess.run(["bash", str(DOCKER / "build-local.sh")], capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0:
        raise StackError(f"docker/build-local.sh failed ({done.returncode}):\n{done.stderr[-4000:]}")
    env = {}
    for line in (DOCKER / "local.env").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    images: dict[str, str]
    compose_cmd: list[str] = field(default_factory=lambda: next(iter(compose_commands().values()), []))
    project: str = field(default_factory=lambda: f"rfstack{uuid.uuid4().hex[:8]}")
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.namespace = self.project
        self.network = f"{self.project}-net"
        self.ports = {name: free_port() for name in ("redis", "postgres", "gateway", "flower", "metrics",
                                                      "prometheus")}
        self.env = {
            **os.environ, **self.images,
            "COMPOSE_PROJECT_NAME": self.project,
            "FARM_NAMESPACE": self.namespace,
            "FARM_DOCKER_NETWORK": self.network,
            "FARM_PUBLISH_ADDRESS": "127.0.0.1",
            "FARM_REDIS_PORT": str(self.ports["redis"]),
            "FARM_POSTGRES_PORT": str(self.ports["postgres"]),
            "FARM_GATEWAY_PORT": str(self.ports["gateway"]),
            "FARM_FLOWER_PORT": str(self.ports["flower"]),
            "FARM_METRICS_PORT": str(self.ports["metrics"]),
            "FARM_PROMETHEUS_PORT": str(self.ports["prometheus"]),
            "FARM_DOCKER_LIMITS": json.dumps({"gpu": {"gpus": 0}}),  # synthetic.execute on a machine without GPUs
            **self.extra_env,
        }
        if not self.compose_cmd:
            raise StackError("neither `docker compose` nor `docker-compose` is installed (docker/ci-engine.sh "
                             "installs both)")
        self.command = [*self.compose_cmd, "-p", self.project, "-f", str(DOCKER / "compose.yaml"),
                        "-f", str(DOCKER / "compose.test.yaml")]

    # what the host uses to reach the stack
    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['redis']}/0"

    @property
    def database_url(self) -> str:
        return f"postgresql+psycopg2://farm:farm@127.0.0.1:{self.ports['postgres']}/farm"

    def farm_env(self) -> dict[str, str]:
        """The environment of a host-side `farm` command or client aimed at this stack."""
        return {**os.environ, "FARM_REDIS_URL": self.redis_url, "FARM_DATABASE_URL": self.database_url,
                "FARM_NAMESPACE": self.namespace}

    def compose(self, *args: str, timeout_s: float = 300.0, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([*self.command, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, cwd=ROOT)
        if check and done.returncode != 0:
            raise StackError(f"compose {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return done

    def up(self, timeout_s: float = 240.0) -> None:
        """`up -d` (no build: the images exist), then wait for the planner's first heartbeat."""
        self.compose("up", "-d", "--no-build", timeout_s=timeout_s)
        self.wait_for_planner(timeout_s)

    def wait_for_planner(self, timeout_s: float) -> heartbeat.Heartbeat:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                try:
                    beat = heartbeat.read(client, self.namespace)
                except redis.RedisError:  # Redis itself is still starting
                    beat = None
                if beat is not None:
                    return beat
                time.sleep(0.25)
        finally:
            client.close()
        raise StackError(f"the stack's planner sent no heartbeat within {timeout_s:g} s; its log:\n"
                         + self.compose("logs", "--tail", "40", "planner", check=False).stdout[-4000:])

    def down(self, timeout_s: float = 300.0) -> None:
        """As docker/README.md says: stop the planner, retire its workers, then `down --volumes`."""
        self.compose("stop", "planner", timeout_s=timeout_s)
        self.compose("run", "--rm", "--no-deps", "planner", "farm", "planner", "--backend", "docker",
                     "--retire-all", "--retire-wait-s", "120", timeout_s=timeout_s)
        # the monitoring profile's services too, where a test started them
        done = self.compose("--profile", "monitoring", "down", "--volumes", "--remove-orphans", timeout_s=timeout_s,
                            check=False)
        if done.returncode != 0 and "has active endpoints" in done.stderr and self._attached_go(30.0):
            # a container that was still going away (a retired worker the engine was removing) held the network
            # when compose came to it: once nothing is attached, down again, as an operator would
            done = self.compose("--profile", "monitoring", "down", "--volumes", "--remove-orphans",
                                timeout_s=timeout_s, check=False)
        if done.returncode != 0:
            if "has active endpoints" in done.stderr and not self.network_containers() and not any(
                    self.leftovers()[kind] for kind in ("containers", "volumes")):
                raise StaleNetworkEndpoint(f"the engine keeps network {self.network} for endpoints no container "
                                           f"holds (an inconsistent endpoint count):\n{done.stderr[-1000:]}")
            raise StackError(f"compose down failed ({done.returncode}); attached: {self.network_containers()}, "
                             f"left: {self.leftovers()}:\n{done.stderr[-4000:]}")

    def _attached_go(self, wait_s: float) -> bool:
        """Whether the containers attached to the stack's network, if any, go within `wait_s`."""
        deadline = time.monotonic() + wait_s
        while self.network_containers():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def force_down(self) -> None:
        """After a failure: remove whatever is left, workers included, without asking anyone."""
        self.compose("stop", "--timeout", "1", "planner", check=False)  # it would start workers again
        for label in (f"farm.namespace={self.namespace}", f"com.docker.compose.project={self.project}"):
            ids = _docker("ps", "-aq", "--filter", f"label={label}").split()
            if ids:
                _docker("rm", "-f", "--volumes", *ids, check=False)
        self.compose("--profile", "monitoring", "down", "--volumes", "--remove-orphans", "--timeout", "1", check=False)
        if self.network in _docker("network", "ls", "--format", "{{.Name}}").split():
            _docker("network", "rm", self.network, check=False)
        volumes = _docker("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={self.project}").split()
        if volumes:
            _docker("volume", "rm", "-f", *volumes, check=False)

    def diagnose(self) -> str:
        """What an operator would look at after a failed run: the planner's log, the worker containers and
        their logs' tails, and `farm status` (for an assertion's message)."""
        parts = ["== planner log", self.compose("logs", "--tail", "60", "planner", check=False).stdout[-6000:]]
        parts += ["== worker containers", _docker("ps", "-a", "--filter", f"label=farm.namespace={self.namespace}",
                                                  "--format", "{{.Names}} {{.Status}}", check=False)]
        for name in _docker("ps", "-aq", "--filter", f"label=farm.namespace={self.namespace}", check=False).split()[:6]:
            logs = subprocess.run(["docker", "logs", "--tail", "15", name], capture_output=True, text=True, timeout=60)
            parts += [f"== worker {name}", (logs.stdout + logs.stderr)[-2000:]]
        status = subprocess.run(["farm", "status"], env=self.farm_env(), capture_output=True, text=True, timeout=120)
        parts += ["== farm status", (status.stdout + status.stderr)[-4000:]]
        return "\n".join(parts)

    def network_containers(self) -> list[str]:
        """The containers the engine says are attached to the stack's network (none once it is gone)."""
        attached = _docker("network", "inspect", self.network, "--format", "{{json .Containers}}", check=False)
        return sorted(json.loads(attached or "{}") or {})

    def worker_containers(self) -> list[str]:
        """The planner's worker containers of this stack, running or not."""
        return _docker("ps", "-aq", "--filter", f"label=farm.namespace={self.namespace}").split()

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes of this stack (or its workers) still on the engine."""
        project = f"label=com.docker.compose.project={self.project}"
        return {
            "containers": sorted(set(_docker("ps", "-aq", "--filter", project).split())
                                 | set(self.worker_containers())),
            "networks": [n for n in _docker("network", "ls", "--format", "{{.Name}}").split() if n == self.network],
            "volumes": _docker("volume", "ls", "-q", "--filter", project).split(),
        }


def _docker(*args: str, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise StackError(f"docker {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout
