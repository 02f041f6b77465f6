"""The wake-up token: the Celery message on a stage's queue that says "one more request is pending".

Python sends it through Celery (farm.celery_app) and the Lua scripts push the same message themselves
when the broker is the farm's own Redis; both name the task and bound it with the rules here.
"""

from __future__ import annotations

TASK_PREFIX = "farm.stage."
HARD_LIMIT_MARGIN_S = 5.0  # the hard Celery limit sits this far (or 10 %) above the stage timeout


def task_name(stage_queue: str) -> str:
    """One Celery task name per stage queue, so Flower shows which stage ran."""
    return TASK_PREFIX + stage_queue


def hard_limit(timeout_s: float) -> float:
    return timeout_s + max(HARD_LIMIT_MARGIN_S, 0.1 * timeout_s)


def serves_on(elapsed_s: float, limit_s: float | None, timeout_s: float) -> bool:
    """Whether a worker `elapsed_s` into a token's task, whose hard limit is `limit_s`, may serve one more request
    in it (serving on, workers.stage): only while that request keeps its whole stage timeout and at least half the
    margin above it that a token's own request has, before the hard limit kills the worker. None: no limit known,
    so no serving on."""
    if limit_s is None:
        return False
    return limit_s - elapsed_s >= timeout_s + (hard_limit(timeout_s) - timeout_s) / 2
