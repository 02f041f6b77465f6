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
