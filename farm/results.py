"""The result a trainer gets for one reward request, and the status taxonomy shared by every pipeline."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping


class Status(str, enum.Enum):
    """Outcome of a request. Infra errors are told apart from model failures so trainers can mask them."""

    OK = "ok"
    WRONG = "wrong"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    INVALID_INPUT = "invalid_input"
    CANCELLED = "cancelled"
    INFRA_ERROR = "infra_error"

    @property
    def is_model_failure(self) -> bool:
        return self in (Status.WRONG, Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT)

    @property
    def is_maskable(self) -> bool:
        """True where the reward says nothing about the response (the trainer should mask it)."""
        return self in (Status.INFRA_ERROR, Status.CANCELLED, Status.INVALID_INPUT)


class Outcome(str, enum.Enum):
    """The paper's outcome categories (§3), recorded in the history so the planner sees the real mix."""

    GENERATION_FAILED = "generation_failed"
    COMPILE_FAILED = "compile_failed"
    EXECUTE_ERROR = "execute_error"
    SUCCESS = "success"


@dataclass(frozen=True)
class StageRecord:
    """What happened to one request at one stage; times are epoch seconds."""

    name: str
    status: str
    queued_at: float
    started_at: float
    finished_at: float
    worker: str = ""
    message: str = ""

    @property
    def seconds(self) -> float:
        return max(0.0, self.finished_at - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "queued_at": self.queued_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "seconds": self.seconds,
            "worker": self.worker,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StageRecord":
        return cls(
            name=d["name"],
            status=d["status"],
            queued_at=float(d["queued_at"]),
            started_at=float(d["started_at"]),
            finished_at=float(d["finished_at"]),
            worker=d.get("worker", ""),
            message=d.get("message", ""),
        )


@dataclass(frozen=True)
class Result:
    """A request's reward and status, with per-stage timings and the worker that ran each stage."""

    request_id: str
    batch_id: str
    status: Status
    reward: float = 0.0
    message: str = ""
    stage: str | None = None  # the stage that decided a non-ok status (e.g. where a timeout hit)
    outcome: Outcome | None = None
    group: str | None = None
    stages: tuple[StageRecord, ...] = field(default_factory=tuple)
    finished_at: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "batch_id": self.batch_id,
            "status": self.status.value,
            "reward": self.reward,
            "message": self.message,
            "stage": self.stage,
            "outcome": self.outcome.value if self.outcome else None,
            "group": self.group,
            "stages": [s.to_dict() for s in self.stages],
            "finished_at": self.finished_at,
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Result":
        return cls(
            request_id=d["request_id"],
            batch_id=d["batch_id"],
            status=Status(d["status"]),
            reward=float(d.get("reward", 0.0)),
            message=d.get("message", ""),
            stage=d.get("stage"),
            outcome=Outcome(d["outcome"]) if d.get("outcome") else None,
            group=d.get("group"),
            stages=tuple(StageRecord.from_dict(s) for s in d.get("stages", ())),
            finished_at=float(d.get("finished_at", 0.0)),
            details=d.get("details") or {},
        )
