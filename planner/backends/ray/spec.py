"""What a Ray worker actor asks of the cluster, as data: its resources per stage, and the ray backend's
options from the environment. Pure (no `ray` import), so all of it is tested without a cluster."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

_RESOURCE_NAME = "a custom resource name of letters, digits, '_', '-', '.' or ':'"


def _amount(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a number >= 0, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class Resources:
    """What one worker actor holds on its node while it lives. Ray places the actor only on a node with
    all of it free; `label_selector` (Ray's node labels) narrows the nodes further."""

    num_cpus: float = 0.0
    num_gpus: float = 0.0
    memory: int | None = None  # bytes, Ray's logical memory resource
    custom: Mapping[str, float] = field(default_factory=dict)  # e.g. {"nvcc": 1}: only nodes that declare it
    label_selector: Mapping[str, str] = field(default_factory=dict)  # e.g. {"farm/pool": "gpu"}

    def __post_init__(self) -> None:
        _amount(self.num_cpus, "num_cpus")
        _amount(self.num_gpus, "num_gpus")
        if self.num_gpus > 1:
            raise ValueError(f"a worker holds at most one GPU (or a fraction of one), not {self.num_gpus!r}")
        if self.memory is not None and (isinstance(self.memory, bool) or not isinstance(self.memory, int)
                                        or self.memory <= 0):
            raise ValueError(f"memory must be a whole number of bytes > 0, not {self.memory!r}")
        if not isinstance(self.custom, Mapping) or not all(isinstance(k, str) and k for k in self.custom):
            raise ValueError(f"custom resources must map {_RESOURCE_NAME} to an amount, not {self.custom!r}")
        for name, amount in self.custom.items():
            _amount(amount, f"custom resource {name!r}")
        if not isinstance(self.label_selector, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.label_selector.items()):
            raise ValueError(f"label_selector must map label names to values (strings), not {self.label_selector!r}")

    @classmethod
    def parse(cls, raw: Any, where: str) -> "Resources":
        """From JSON: {"num_cpus": 1, "num_gpus": 0, "memory": 2e9, "resources": {...}, "label_selector": {...}}."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where} must be an object, not {raw!r}")
        unknown = set(raw) - {"num_cpus", "num_gpus", "memory", "resources", "label_selector"}
        if unknown:
            raise ValueError(f"{where} has unknown keys {sorted(unknown)}: use num_cpus, num_gpus, memory, "
                             f"resources, label_selector")
        memory = raw.get("memory")
        if isinstance(memory, float) and memory.is_integer():
            memory = int(memory)
        return cls(num_cpus=raw.get("num_cpus", 0.0), num_gpus=raw.get("num_gpus", 0.0), memory=memory,
                   custom=dict(raw.get("resources") or {}), label_selector=dict(raw.get("label_selector") or {}))

    def options(self) -> dict[str, Any]:
        """As keyword arguments of `ActorClass.options(...)`."""
        out: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory is not None:
            out["memory"] = self.memory
        if self.custom:
            out["resources"] = dict(self.custom)
        if self.label_selector:
            out["label_selector"] = dict(self.label_selector)
        return out


# by resource kind: a CPU stage holds a core, a GPU stage one GPU (Ray sets CUDA_VISIBLE_DEVICES for it;
# it asks no core so that a GPU node's cores stay for CPU stages), an I/O stage a quarter of a core
DEFAULT_RESOURCES: Mapping[str, Resources] = {
    "cpu": Resources(num_cpus=1.0),
    "gpu": Resources(num_gpus=1.0),
    "io": Resources(num_cpus=0.25),
}


def resources_for(stage: str, resource: str, overrides: Mapping[str, Resources]) -> Resources:
    """The stage's own entry (by queue), else its pipeline's, else its resource kind's, else the default."""
    pipeline = stage.partition(".")[0]
    for key in (stage, pipeline, resource):
        if key in overrides:
            return overrides[key]
    return DEFAULT_RESOURCES.get(resource, Resources(num_cpus=1.0))


def options_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ray backend's options from the environment, for `farm planner --backend ray` in a deployment:
    FARM_RAY_ADDRESS ("ray://head:10001" or "head:6379"; "auto": the cluster this machine belongs to),
    FARM_RAY_RESOURCES (JSON: {"gpu": {"num_gpus": 1}, "cuda.compile": {"num_cpus": 1, "resources": {"nvcc": 1}}},
    by stage queue, pipeline or resource kind), FARM_RAY_RUNTIME_ENV (JSON: Ray's runtime_env for every worker)."""
    options: dict[str, Any] = {}
    if environ.get("FARM_RAY_ADDRESS", "").strip():
        options["address"] = environ["FARM_RAY_ADDRESS"].strip()
    if environ.get("FARM_RAY_RESOURCES", "").strip():
        try:
            raw = json.loads(environ["FARM_RAY_RESOURCES"])
            if not isinstance(raw, dict):
                raise ValueError("not an object")
            options["resources"] = {key: Resources.parse(value, f"FARM_RAY_RESOURCES[{key!r}]")
                                    for key, value in raw.items()}
        except ValueError as exc:
            raise ValueError(f"FARM_RAY_RESOURCES must be a JSON object of stage queue, pipeline or resource kind -> "
                             f"{{num_cpus, num_gpus, memory, resources, label_selector}}: {exc}") from exc
    if environ.get("FARM_RAY_RUNTIME_ENV", "").strip():
        try:
            runtime_env = json.loads(environ["FARM_RAY_RUNTIME_ENV"])
            if not isinstance(runtime_env, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise ValueError(f"FARM_RAY_RUNTIME_ENV must be a JSON object (Ray's runtime_env): {exc}") from exc
        options["runtime_env"] = runtime_env
    return options


def ray_namespace(namespace: str) -> str:
    """The Ray namespace of a farm's worker actors: a restarted daemon finds exactly its own farm's there."""
    return f"reward-farm.{namespace}"
