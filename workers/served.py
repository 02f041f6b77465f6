"""What a stage worker served for one wake-up token, as one line: the Celery task's result.

Flower shows a task's name, arguments and result; a token's name is its stage and its arguments are `()`
(a token only says "one more request waits here", sent before anyone knows which one a worker will pick), so
the result is where Flower can show which batch, request and tenant a worker served, with what status,
reward, queue wait and service time, and where its search finds "batch t3:step-41" or "timeout". Built from
what the worker already holds: no Redis read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from farm.protocol.scope import tenant_of


@dataclass(frozen=True)
class Served:
    """One token's work. `reply`: what the farm said to the hand-on (next, finished, lost, discarded,
    duplicate), or `idle` when the token found no request to pick."""

    stage: str  # queue, "<pipeline>.<stage>"
    reply: str
    batch: str | None = None
    request: str | None = None
    status: str | None = None  # the stage's outcome: `passed` on to the next stage, else the request's status
    reward: float | None = None
    wait_s: float | None = None  # queued at this stage before the worker picked it
    service_s: float | None = None  # the stage's run

    def __str__(self) -> str:
        if self.batch is None:
            return f"stage {self.stage}: idle (its request was cancelled or taken by another token)"
        tenant = tenant_of(self.batch)
        parts = [f"batch {self.batch}", f"request {self.request}", f"tenant {'-' if tenant is None else f't{tenant}'}",
                 f"stage {self.stage}", f"status {self.status}",
                 f"reward {'-' if self.reward is None else f'{self.reward:g}'}",
                 f"wait {_seconds(self.wait_s)}", f"service {_seconds(self.service_s)}"]
        return " ".join(parts) + f": {self.reply}"


def served_line(served: Sequence[Served]) -> str:
    """A token's result: the request it was sent for and, where the worker served on (workers.stage), how many
    more by status and the last of them (Flower's search still finds a batch or a status served on last)."""
    first, more = str(served[0]), [s for s in served[1:] if s.batch is not None]
    if not more:
        return first
    statuses = ", ".join(f"{status} {n}" for status, n in sorted(Counter(s.status for s in more).items()))
    return f"{first}; served on {len(more)} more ({statuses}), the last: {more[-1]}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"
