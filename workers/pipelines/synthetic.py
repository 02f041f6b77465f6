"""The `synthetic` pipeline: each stage sleeps the time the payload gives for it.

It stands in for real verifiers when replaying a `reward-trace/1` trace on a live farm. Payload:
`{"times": [s_1, ..., s_M]}` (stage order) or `{"times": {"compile": 48.9, ...}}`, seconds >= 0,
0 meaning the stage is not visited; optional `"reward"` (default 1.0). A time at or over the stage's
timeout is cut at the timeout and reported as `timeout` at that stage, as the real pipelines do.
"""

from __future__ import annotations

import heapq
import time
from typing import Any, Mapping, Sequence

from farm.pipeline import Admission, InvalidInput, Pipeline, Stage, StageContext, StageOutcome
from farm.results import Outcome, Status
from workers.pipelines.common import SHOWN_ITEMS, finite, shown

# The CUDA reward service of the paper (§3, Figure 6): compile on CPUs (120 s timeout), execute on a GPU (60 s).
DEFAULT_STAGES = (
    {"name": "compile", "resource": "cpu", "cost": 1.0, "timeout_s": 120.0},
    {"name": "execute", "resource": "gpu", "cost": 8.0, "timeout_s": 60.0},
)
_POLL_S = 0.05  # how often a sleeping stage checks for cancellation


def stage_times(payload: Mapping[str, Any], stage_names: Sequence[str]) -> list[float]:
    """The per-stage times of a payload, validated; raises InvalidInput saying what is wrong."""
    raw = payload.get("times")
    if raw is None:
        raise InvalidInput("synthetic payload needs 'times': a list of per-stage seconds or an object by stage name")
    if isinstance(raw, Mapping):
        # the first names only: a refusal shows a few, and the payload may name a hundred thousand
        unknown = heapq.nsmallest(SHOWN_ITEMS + 1, set(raw) - set(stage_names))
        if unknown:
            named = ", ".join(shown(name) for name in unknown[:SHOWN_ITEMS])
            more = ", ..." if len(unknown) > SHOWN_ITEMS else ""
            raise InvalidInput(f"synthetic payload names unknown stages [{named}{more}]; "
                               f"stages are {list(stage_names)}")
        values = [raw.get(name, 0.0) for name in stage_names]
    elif isinstance(raw, (list, tuple)):
        if len(raw) != len(stage_names):
            raise InvalidInput(f"synthetic payload has {len(raw)} times for {len(stage_names)} stages {list(stage_names)}")
        values = list(raw)
    else:
        raise InvalidInput(f"synthetic 'times' must be a list or an object, not {type(raw).__name__}")
    times = []
    for name, value in zip(stage_names, values):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidInput(f"synthetic time for stage {name!r} must be a number of seconds, not {shown(value)}")
        seconds = finite(value)
        if seconds is None or seconds < 0:
            raise InvalidInput(f"synthetic time for stage {name!r} must be finite and >= 0, not {shown(value)}")
        times.append(seconds)
    return times


def _reward(payload: Mapping[str, Any]) -> float:
    reward = finite(payload.get("reward", 1.0))
    if reward is None:
        raise InvalidInput(f"synthetic 'reward' must be a finite number, not {shown(payload.get('reward'))}")
    return reward


def make(name: str = "synthetic", stages: Sequence[Mapping[str, Any]] = DEFAULT_STAGES) -> Pipeline:
    """A synthetic pipeline with the given stages (a trace header's `stages` fits as it is)."""
    names = [str(s["name"]) for s in stages]

    def admit(payload: Mapping[str, Any]) -> Admission:
        times = stage_times(payload, names)
        _reward(payload)
        visited = tuple(n for n, t in zip(names, times) if t > 0)
        if not visited:
            return Admission((), Status.WRONG, 0.0, "visits no stage (generation failed)", Outcome.GENERATION_FAILED)
        return Admission(visited)

    def run(ctx: StageContext) -> StageOutcome:
        wanted = stage_times(ctx.payload, names)[names.index(ctx.stage.name)]
        limit = ctx.timeout_s
        end = time.monotonic() + min(wanted, limit)
        while (left := end - time.monotonic()) > 0:
            if ctx.cancelled():
                return StageOutcome(Status.CANCELLED, message="batch cancelled")
            time.sleep(min(left, _POLL_S))
        if wanted >= limit:
            return StageOutcome(Status.TIMEOUT, message=f"killed at the {limit:g} s timeout of stage {ctx.stage.name!r}")
        return StageOutcome(None, reward=_reward(ctx.payload), outcome=Outcome.SUCCESS)

    built = tuple(
        Stage(str(s["name"]), str(s.get("resource", "cpu")), float(s.get("cost", 1.0)), float(s["timeout_s"]), run)
        for s in stages
    )
    return Pipeline(name, built, admit, description="sleeps the per-stage times its payload gives (trace replay)")


pipeline = make()
