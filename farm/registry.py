"""Pipeline names -> definitions, from the `farm.pipelines` entry-point group (each entry point is a
Pipeline or a zero-argument callable returning one) and from `register`. The built-in pipelines
(`workers.pipelines`) are entry points of this package like any other's, so the base names no module
above it; a pipeline loads on first use, so a trainer client does not pay for a verifier's imports."""

from __future__ import annotations

import functools
import importlib
import threading
from importlib.metadata import entry_points

from farm.knobs import Knobs
from farm.pipeline import Pipeline, UnknownPipeline

GROUP = "farm.pipelines"

_lock = threading.Lock()
_registry: dict[str, Pipeline] = {}


def register(pipeline: Pipeline, *, replace: bool = False) -> Pipeline:
    with _lock:
        if pipeline.name in _registry and not replace and _registry[pipeline.name] != pipeline:
            raise ValueError(f"a different pipeline named {pipeline.name!r} is already registered")
        _registry[pipeline.name] = pipeline
    return pipeline


@functools.cache
def _entry_points() -> dict[str, str]:
    """Each entry point's name -> target, read once per process: a scan reads every installed distribution's
    metadata (tens of ms, paid per lookup before), and a pipeline installed later needs its processes restarted
    anyway. The first of two entry points with one name wins, as a scan in order would pick it."""
    found: dict[str, str] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def _load(target: str) -> Pipeline:
    module, _, attr = target.partition(":")
    obj = getattr(importlib.import_module(module), attr)
    return obj() if callable(obj) and not isinstance(obj, Pipeline) else obj


def get(name: str) -> Pipeline:
    with _lock:
        found = _registry.get(name)
    if found is not None:
        return found
    target = _entry_points().get(name)
    if target is None:
        raise UnknownPipeline(f"unknown pipeline {name!r}; known: {', '.join(names())}")
    try:
        pipeline = _load(target)
    except ModuleNotFoundError as exc:
        raise UnknownPipeline(f"pipeline {name!r} is not available here: {exc}") from exc
    return register(pipeline)


def names() -> list[str]:
    found = set(_entry_points())
    with _lock:
        found |= set(_registry)
    return sorted(found)


def stage_by_queue(queue: str):
    """The (pipeline, stage) that a queue name `<pipeline>.<stage>` belongs to."""
    pipeline_name, _, stage_name = queue.partition(".")
    pipeline = get(pipeline_name)
    try:
        return pipeline, pipeline.stage(stage_name)
    except KeyError as exc:
        raise UnknownPipeline(str(exc)) from exc


def queues_of_kind(resource: str) -> tuple[str, ...]:
    """The stage queues of every known pipeline whose stages use `resource`: where a tenant's cap of that kind
    counts its workers (farm.protocol.shares). A pipeline that fails to load has none."""
    out = []
    for name in names():
        try:
            pipeline = get(name)
        except Exception:  # noqa: BLE001 - a broken entry point is reported where it is used, not here
            continue
        out += [s.queue for s in pipeline.stages if s.resource == resource]
    return tuple(sorted(set(out)))


def resource_of(queue: str) -> str | None:
    """The resource kind (cpu, gpu, io) of the stage behind a queue; None for a pipeline this process cannot load
    or a stage it does not have (the reports then say `unknown`)."""
    try:
        return stage_by_queue(queue)[1].resource
    except (UnknownPipeline, KeyError, IndexError, ValueError):
        return None


def stage_timeout(queue: str, knobs: Knobs | None = None) -> float:
    """The effective timeout of the stage behind a queue (raises UnknownPipeline for a stage none has)."""
    return (knobs or Knobs()).timeout_of(stage_by_queue(queue)[1])
