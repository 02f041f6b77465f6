"""What a worker container is made of, as data: its limits, its engine-API arguments, and the docker
backend's options from the environment. Pure, so all of it is tested without an engine."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence

from docker.types import DeviceRequest

LABEL = "farm"


@dataclass(frozen=True)
class Limits:
    """What one worker container may use. `gpus` is 0 or 1: a GPU worker holds exactly one GPU."""

    cpus: float | None = None
    memory: str | None = None  # docker's notation: "512m", "2g"
    gpus: int = 0

    def __post_init__(self) -> None:
        if self.cpus is not None and not (isinstance(self.cpus, (int, float)) and self.cpus > 0
                                          and math.isfinite(self.cpus)):
            raise ValueError(f"cpus must be a positive number, not {self.cpus!r}")
        if self.gpus not in (0, 1):
            raise ValueError(f"a worker holds 0 or 1 GPU, not {self.gpus!r}")


# by resource kind; a stage's own entry (by queue) in `limits` wins
DEFAULT_LIMITS: Mapping[str, Limits] = {
    "cpu": Limits(cpus=1.0, memory="2g"),
    "io": Limits(cpus=0.5, memory="1g"),
    "gpu": Limits(cpus=2.0, memory="16g", gpus=1),
}


def engine_time(stamp: str | None) -> float | None:
    """Docker's RFC 3339 times with nanoseconds ("2026-11-22T20:52:49.266057756Z") as epoch seconds."""
    if not stamp or stamp.startswith("0001-"):
        return None
    head, _, frac = stamp.rstrip("Z").partition(".")
    base = datetime.fromisoformat(head + "+00:00").timestamp()
    return base + (float("0." + frac[:9]) if frac else 0.0)


def container_spec(
    *,
    name: str,
    stage: str,
    namespace: str,
    image: str,
    command: Sequence[str],
    env: Mapping[str, str],
    network: str,
    limits: Limits,
    spawned_at: float,
    stop_timeout_s: float,
    volumes: Mapping[str, Any] | None = None,
    gpu_id: str | None = None,
    init: bool = True,
    cap_add: Sequence[str] = (),
    security_opt: Sequence[str] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One worker's container: the arguments of the engine API's `create_container` and of its
    `create_host_config` (pure, so it is tested without an engine)."""
    labels = {
        f"{LABEL}.namespace": namespace,
        f"{LABEL}.stage": stage,
        f"{LABEL}.worker": name,
        f"{LABEL}.spawned_at": repr(spawned_at),
        f"{LABEL}.backend": "docker",
    }
    host: dict[str, Any] = {
        "network_mode": network,  # "host", or a network's name (compose's)
        "init": init,  # a real PID 1 forwards SIGTERM and reaps the worker's children
    }
    if cap_add:
        host["cap_add"] = list(cap_add)
    if security_opt:
        host["security_opt"] = list(security_opt)
    if limits.cpus is not None:
        host["nano_cpus"] = int(limits.cpus * 1e9)
    if limits.memory is not None:
        host["mem_limit"] = limits.memory
    if limits.gpus:
        if gpu_id is not None:
            labels[f"{LABEL}.gpu"] = gpu_id
            host["device_requests"] = [DeviceRequest(device_ids=[gpu_id], capabilities=[["gpu"]])]
        else:
            host["device_requests"] = [DeviceRequest(count=1, capabilities=[["gpu"]])]
    if volumes:
        host["binds"] = dict(volumes)
    create = {
        "image": image,
        "command": [*command, "--stage", stage, "--name", name],
        "name": name,
        "hostname": name[:63],
        "labels": labels,
        "environment": dict(env),
        "stop_signal": "SIGTERM",
        # the engine's own `docker stop` grace: the stage's timeout plus ours, never less
        "stop_timeout": int(math.ceil(stop_timeout_s)),
    }
    return create, host


SYSTEM_PATHS_UNCONFINED = "systempaths=unconfined"  # the CLI's option; the engine's API takes empty path lists


def host_config(api: Any, host: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's HostConfig for `host` (container_spec's): the SDK's, with the CLI's `systempaths=unconfined`
    written as the API takes it (no masked or read-only /proc paths), which the SDK has no argument for."""
    options = dict(host)
    security = list(options.pop("security_opt", []))
    unmasked = SYSTEM_PATHS_UNCONFINED in security
    security = [o for o in security if o != SYSTEM_PATHS_UNCONFINED]
    if security:
        options["security_opt"] = security
    config = api.create_host_config(**options)
    if unmasked:
        config["MaskedPaths"], config["ReadonlyPaths"] = [], []
    return config


def options_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """The docker backend's options from the environment, for `farm planner --backend docker` in compose:
    FARM_DOCKER_IMAGE, FARM_DOCKER_GPU_IMAGE, FARM_DOCKER_NETWORK, FARM_DOCKER_GPUS ("0,1,2,3"),
    FARM_DOCKER_IMAGES (JSON: {"cuda": "reward-farm-worker-cuda:latest"}, by pipeline or stage queue),
    FARM_DOCKER_LIMITS (JSON: {"cpu": {"cpus": 1, "memory": "2g"}, "cuda.execute": {...}})."""
    options: dict[str, Any] = {}
    for key, option in (("FARM_DOCKER_IMAGE", "image"), ("FARM_DOCKER_GPU_IMAGE", "gpu_image"),
                        ("FARM_DOCKER_NETWORK", "network")):
        if environ.get(key):
            options[option] = environ[key]
    if environ.get("FARM_DOCKER_IMAGES"):
        try:
            images = json.loads(environ["FARM_DOCKER_IMAGES"])
            if not isinstance(images, dict) or not all(isinstance(v, str) for v in images.values()):
                raise ValueError("not an object of strings")
        except ValueError as exc:
            raise ValueError(f"FARM_DOCKER_IMAGES must be a JSON object of stage queue or pipeline -> image: "
                             f"{exc}") from exc
        options["images"] = images
    if environ.get("FARM_DOCKER_GPUS"):
        options["gpu_ids"] = [g.strip() for g in environ["FARM_DOCKER_GPUS"].split(",") if g.strip()]
    if environ.get("FARM_DOCKER_LIMITS"):
        try:
            raw = json.loads(environ["FARM_DOCKER_LIMITS"])
            options["limits"] = {key: Limits(**value) for key, value in raw.items()}
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"FARM_DOCKER_LIMITS must be a JSON object of stage or resource -> "
                             f"{{cpus, memory, gpus}}: {exc}") from exc
    return options
