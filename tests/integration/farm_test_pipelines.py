"""Pipelines that misbehave on purpose, for worker tests; a worker loads them with `--import farm_test_pipelines`.

`faulty.step`: the payload's "do" says what the stage does: "ok", "raise" (the verifier crashes),
"bad_carry" (passes on data that is not JSON) or "hang" (ignores its timeout; only the hard time
limit stops it). `faulty.after` runs after `step` and reports the carry it got.
"""

from __future__ import annotations

import time

from farm import registry
from farm.pipeline import Admission, Pipeline, Stage, StageContext, StageOutcome
from farm.results import Status


def _admit(payload):
    return Admission(("step", "after") if payload.get("then") else ("step",))


def _step(ctx: StageContext) -> StageOutcome:
    do = ctx.payload.get("do", "ok")
    if do == "raise":
        raise RuntimeError("the verifier fell over")
    if do == "bad_carry":
        return StageOutcome(None, carry={"x": object()})
    if do == "hang":
        time.sleep(3600)
    return StageOutcome(None, reward=1.0, carry={"seen_by": ctx.worker})


def _after(ctx: StageContext) -> StageOutcome:
    return StageOutcome(Status.OK, reward=2.0, details={"carry": dict(ctx.carry)})


pipeline = registry.register(Pipeline("faulty", (
    Stage("step", "cpu", 1.0, 30.0, _step),
    Stage("after", "cpu", 1.0, 30.0, _after),
), _admit, description="misbehaves on purpose (tests)"))
