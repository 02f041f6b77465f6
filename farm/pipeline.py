"""Pipelines as data: ordered stages with a resource kind, a cost, a timeout and a Celery queue.

The core (dispatch, workers, planner) only ever sees these types, so a new reward kind is a new
module under `workers/pipelines/` that builds a `Pipeline` and registers it; nothing else changes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from farm.results import Outcome, Status

RESOURCES = ("cpu", "gpu", "io")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # no dots: a queue is "<pipeline>.<stage>"


class InvalidInput(ValueError):
    """A request the farm refuses; the message says what was wrong. It harms nobody else."""


class UnknownPipeline(InvalidInput):
    pass


@dataclass(frozen=True)
class StageContext:
    """What a stage's code sees of one request."""

    request_id: str
    batch_id: str
    task: str
    payload: Mapping[str, Any]
    carry: Mapping[str, Any]  # what earlier stages of this request passed on
    stage: "Stage"
    timeout_s: float  # the effective timeout (the operator's knob, else the stage's own)
    worker: str = ""
    cancelled: Callable[[], bool] = lambda: False  # cooperative: long stages poll it


@dataclass(frozen=True)
class StageOutcome:
    """A stage's verdict. `status=None` passes the request on to the next stage it visits;
    at the last visited stage it means `ok` with `reward`."""

    status: Status | None = None
    reward: float = 0.0
    message: str = ""
    carry: Mapping[str, Any] = field(default_factory=dict)  # merged into the request's carry
    outcome: Outcome | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


StageFn = Callable[[StageContext], StageOutcome]


@dataclass(frozen=True)
class Stage:
    name: str
    resource: str
    cost: float
    timeout_s: float
    run: StageFn = field(compare=False, repr=False)
    queue: str = ""  # filled in by the Pipeline: "<pipeline>.<stage>"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"stage name {self.name!r} must be 1-64 letters, digits, '_' or '-'")
        if self.resource not in RESOURCES:
            raise ValueError(f"stage {self.name!r}: resource must be one of {RESOURCES}, not {self.resource!r}")
        if not (self.cost > 0 and math.isfinite(self.cost)):
            raise ValueError(f"stage {self.name!r}: cost must be a positive number, not {self.cost!r}")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(f"stage {self.name!r}: timeout_s must be a positive number, not {self.timeout_s!r}")


@dataclass(frozen=True)
class Admission:
    """What a pipeline decides about a payload before any worker sees it.

    `stages` are the names of the stages the request visits, in pipeline order. An empty tuple
    means it visits none (the paper's "generation failed") and finishes on arrival with `status`.
    """

    stages: tuple[str, ...]
    status: Status = Status.OK
    reward: float = 0.0
    message: str = ""
    outcome: Outcome | None = None


AdmitFn = Callable[[Mapping[str, Any]], Admission]


@dataclass(frozen=True)
class Pipeline:
    name: str
    stages: tuple[Stage, ...]
    admit: AdmitFn = field(compare=False, repr=False)  # pure and cheap; raises InvalidInput
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"pipeline name {self.name!r} must be 1-64 letters, digits, '_' or '-'")
        if not self.stages:
            raise ValueError(f"pipeline {self.name!r} has no stages")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"pipeline {self.name!r} has duplicate stage names: {names}")
        queued = tuple(
            s if s.queue else Stage(s.name, s.resource, s.cost, s.timeout_s, s.run, f"{self.name}.{s.name}")
            for s in self.stages
        )
        object.__setattr__(self, "stages", queued)
        object.__setattr__(self, "_names", tuple(names))  # in pipeline order

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"pipeline {self.name!r} has no stage {name!r}")

    @property
    def queues(self) -> tuple[str, ...]:
        return tuple(s.queue for s in self.stages)

    def checked_admit(self, payload: Any) -> Admission:
        """Admit a payload, turning anything a pipeline raises into InvalidInput with its reason."""
        if not isinstance(payload, Mapping):
            raise InvalidInput(f"payload must be a JSON object, not {type(payload).__name__}")
        try:
            admission = self.admit(payload)
        except InvalidInput:
            raise
        except Exception as exc:  # a pipeline's validation bug must not become a dead client
            raise InvalidInput(f"pipeline {self.name!r} rejected the payload: {exc}") from exc
        names = self._names
        unknown = [n for n in admission.stages if n not in names]
        if unknown:
            raise InvalidInput(f"pipeline {self.name!r} routed to unknown stages {unknown}")
        order = tuple(n for n in names if n in admission.stages)
        if order == admission.stages:  # the usual case, kept as it is: this runs for every submitted request
            return admission
        return Admission(order, admission.status, admission.reward, admission.message, admission.outcome)
