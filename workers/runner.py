"""Running one stage of one request: the code every execution path shares (Celery stage workers and
`farm score`), so a stage behaves the same in-process and on the farm."""

from __future__ import annotations

import time
import traceback
from typing import Any, Mapping

from farm.knobs import Knobs
from farm.pipeline import InvalidInput, Pipeline, StageContext, StageOutcome
from farm.results import Result, StageRecord, Status
from workers.sandbox.live import RunsEnded


def run_stage(ctx: StageContext) -> StageOutcome:
    """Run a stage's code; never raises. A crash of the verifier itself is an infra error, not the model's fault."""
    try:
        outcome = ctx.stage.run(ctx)
    except InvalidInput as exc:
        return StageOutcome(Status.INVALID_INPUT, message=str(exc))
    except RunsEnded as exc:  # the worker killed its programs: the request is not its own any more
        return StageOutcome(Status.CANCELLED, message=str(exc))
    except Exception as exc:
        tail = traceback.format_exc(limit=3)
        return StageOutcome(Status.INFRA_ERROR, message=f"stage {ctx.stage.name!r} crashed: {exc!r}\n{tail}")
    if not isinstance(outcome, StageOutcome):
        return StageOutcome(Status.INFRA_ERROR, message=f"stage {ctx.stage.name!r} returned {type(outcome).__name__}, not a StageOutcome")
    return outcome


def next_stage(visits: tuple[str, ...], current: str) -> str | None:
    """The stage a request goes to after `current`, or None when `current` was its last."""
    i = visits.index(current)
    return visits[i + 1] if i + 1 < len(visits) else None


def score(
    pipeline: Pipeline,
    payload: Mapping[str, Any],
    *,
    request_id: str = "local",
    batch_id: str = "local",
    task: str = "local",
    knobs: Knobs | None = None,
    worker: str = "in-process",
) -> Result:
    """Score one request in this process through the same stage code the farm runs (no broker)."""
    arrived = time.time()
    try:
        admission = pipeline.checked_admit(payload)
    except InvalidInput as exc:
        return Result(request_id, batch_id, Status.INVALID_INPUT, message=str(exc), finished_at=time.time())
    if not admission.stages:
        return Result(request_id, batch_id, admission.status, admission.reward, admission.message,
                      outcome=admission.outcome, finished_at=arrived)
    carry: dict[str, Any] = {}
    records: list[StageRecord] = []
    details: dict[str, Any] = {}
    outcome = StageOutcome()
    stage_name: str | None = admission.stages[0]
    while stage_name is not None:
        stage = pipeline.stage(stage_name)
        ctx = StageContext(request_id, batch_id, task, payload, dict(carry), stage,
                           (knobs or Knobs()).timeout_of(stage), worker)
        started = time.time()
        outcome = run_stage(ctx)
        finished = time.time()
        status = outcome.status.value if outcome.status else "passed"
        records.append(StageRecord(stage_name, status, started, started, finished, worker, outcome.message))
        carry.update(outcome.carry)
        details.update(outcome.details)
        if outcome.status is not None:
            return Result(request_id, batch_id, outcome.status, outcome.reward, outcome.message,
                          stage=stage_name if outcome.status is not Status.OK else None,
                          outcome=outcome.outcome, stages=tuple(records), finished_at=finished, details=details)
        stage_name = next_stage(admission.stages, stage_name)
    return Result(request_id, batch_id, Status.OK, outcome.reward, outcome.message, outcome=outcome.outcome,
                  stages=tuple(records), finished_at=records[-1].finished_at, details=details)
