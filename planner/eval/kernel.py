"""The discrete-event kernel of the replay, after SimPy's core: a heap of (time, priority, seq, event).

The `itertools.count()` sequence breaks ties between events of equal time and priority in the order
they were scheduled, so a replay is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()

    def push(self, time: float, priority: int, event: Any) -> None:
        heapq.heappush(self._heap, (time, priority, next(self._seq), event))

    def pop(self) -> tuple[float, int, Any]:
        time, priority, _, event = heapq.heappop(self._heap)
        return time, priority, event

    def peek_time(self) -> float:
        return self._heap[0][0] if self._heap else float("inf")

    def __len__(self) -> int:
        return len(self._heap)
