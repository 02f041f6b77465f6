"""What the metrics label by: a stage queue split into pipeline and stage, its resource kind, and the task
and pipeline of a batch (from its `batch_opened` event, or the store for a batch opened before)."""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Sequence

from farm import registry

UNKNOWN = "unknown"


def split_queue(queue: str) -> tuple[str, str]:
    """`<pipeline>.<stage>` -> (pipeline, stage); pipeline names have no dots."""
    pipeline, _, stage = queue.partition(".")
    return pipeline, stage or UNKNOWN


@lru_cache(maxsize=1024)
def resource_of(queue: str) -> str:
    """The stage's resource kind (cpu, gpu, io), `unknown` for a pipeline this process cannot load."""
    return registry.resource_of(queue) or UNKNOWN


class BatchLabels:
    """batch id -> (task, pipeline), remembered for the most recent `size` batches."""

    def __init__(self, lookup: Callable[[Sequence[str]], Mapping[str, tuple[str, str]]], size: int = 50_000) -> None:
        self._lookup = lookup
        self._size = size
        self._known: OrderedDict[str, tuple[str, str]] = OrderedDict()

    def learn(self, events: Iterable[Mapping[str, Any]]) -> None:
        for e in events:
            if e["kind"] == "batch_opened":
                self._put(e["batch"], (e["task"], e["pipeline"]))

    def of(self, batch_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """Labels of these batches; one store lookup for those not remembered, (unknown, unknown) if none."""
        wanted = set(batch_ids)
        missing = [b for b in wanted if b not in self._known]
        if missing:
            for b, labels in self._lookup(missing).items():
                self._put(b, labels)
        return {b: self._known.get(b, (UNKNOWN, UNKNOWN)) for b in wanted}

    def _put(self, batch_id: str, labels: tuple[str, str]) -> None:
        self._known[batch_id] = labels
        self._known.move_to_end(batch_id)
        while len(self._known) > self._size:
            self._known.popitem(last=False)
