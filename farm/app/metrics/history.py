"""Metrics from the history as it is recorded: the recorder hands every committed chunk of events here
(`Recorder(on_recorded=...)`), so each fact is counted once, after the store has it. Counters restart
at 0 with the recorder (Prometheus' `rate` and `increase` take resets in their stride)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from sqlalchemy import Engine

from farm.app.metrics.labels import BatchLabels, resource_of, split_queue
from farm.store import queries

# seconds a request waits for and spends in a stage: milliseconds (a math check) to the timeouts (minutes)
STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# a batch's extra delay d: the tolerated D is seconds; a farm short of workers runs to minutes
DELAY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
ENDINGS = {"batch_completed": "completed", "batch_cancelled": "cancelled", "batch_abandoned": "abandoned"}


class HistoryMetrics:
    """Counters and histograms of results, stage times, busy seconds, batch endings and extra delays."""

    def __init__(self, registry: CollectorRegistry, *,
                 labels_of: Callable[[Sequence[str]], Mapping[str, tuple[str, str]]],
                 delays_of: Callable[[Sequence[str]], Mapping[str, tuple[str, float]]]) -> None:
        """`labels_of(batch ids)` -> {batch: (task, pipeline)} and `delays_of(batch ids)` -> {batch: (task, d)}
        read the store (`from_store`): what a chunk's events do not say themselves."""
        self.delays_of = delays_of
        self.labels = BatchLabels(labels_of)
        self.results = Counter("farm_results", "Results handed back, by pipeline and status.",
                               ["pipeline", "status"], registry=registry)
        self.waits = Histogram("farm_stage_wait_seconds", "Time a request waited in a stage's queue.",
                               ["pipeline", "stage"], buckets=STAGE_BUCKETS, registry=registry)
        self.services = Histogram("farm_stage_service_seconds", "Time a worker spent on a request at a stage.",
                                  ["pipeline", "stage"], buckets=STAGE_BUCKETS, registry=registry)
        self.busy = Counter("farm_worker_busy_seconds", "Worker-seconds spent on requests, by stage and resource.",
                            ["pipeline", "stage", "resource"], registry=registry)
        self.batches = Counter("farm_batches_ended", "Batches that ended, by task and how (completed, cancelled, "
                               "abandoned).", ["task", "outcome"], registry=registry)
        self.delays = Histogram("farm_batch_extra_delay_seconds", "Extra delay d of completed batches: completion "
                                "minus the earliest possible completion T.", ["task"], buckets=DELAY_BUCKETS,
                                registry=registry)
        self.recorded = Counter("farm_recorder_events", "History events the recorder wrote to the store.",
                                registry=registry)

    @classmethod
    def from_store(cls, engine: Engine, registry: CollectorRegistry) -> "HistoryMetrics":
        return cls(registry, labels_of=lambda ids: queries.batch_labels(engine, ids),
                   delays_of=lambda ids: queries.completed_delays(engine, ids))

    def __call__(self, events: Sequence[Mapping[str, Any]]) -> None:
        self.observe(events)

    def observe(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Count one committed chunk of clean events (`farm.store.ingest.clean`)."""
        self.recorded.inc(len(events))
        self.labels.learn(events)
        batch_ids = {e["batch"] for e in events if "batch" in e and e["kind"] in ("request_done", "stage_done")}
        labels = self.labels.of(batch_ids)
        completed = []
        for e in events:
            kind = e["kind"]
            if kind == "request_done":
                self.results.labels(labels[e["batch"]][1], e["status"]).inc()
            elif kind == "stage_done":
                self._stage(e, labels[e["batch"]][1])
            elif kind in ENDINGS:
                if kind == "batch_completed":
                    completed.append(e["batch"])
                else:
                    task = self.labels.of([e["batch"]])[e["batch"]][0]
                    self.batches.labels(task, ENDINGS[kind]).inc()
        if completed:
            # d is the store's: it is computed as the batch's completion is written (this chunk's commit)
            delays = self.delays_of(completed)
            for batch_id in completed:
                task, d = delays.get(batch_id, (self.labels.of([batch_id])[batch_id][0], None))
                self.batches.labels(task, "completed").inc()
                if d is not None:
                    self.delays.labels(task).observe(d)

    def _stage(self, e: Mapping[str, Any], pipeline: str) -> None:
        stage = e["stage"]
        queue = stage if "." in stage else f"{pipeline}.{stage}"
        pipeline, stage = split_queue(queue)
        queued, started, finished = e.get("queued_at"), e.get("started_at"), e.get("finished_at")
        if queued is not None and started is not None:
            self.waits.labels(pipeline, stage).observe(max(0.0, started - queued))
        if started is not None and finished is not None:
            service = max(0.0, finished - started)
            self.services.labels(pipeline, stage).observe(service)
            self.busy.labels(pipeline, stage, resource_of(queue)).inc(service)
