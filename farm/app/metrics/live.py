"""Metrics of the live farm, read at every scrape: queues, workers, active batches, the planner, the
history stream, each tenant's fair share against its busy workers and its recent extra delay, and the allocated
worker-seconds. A source that cannot be read is reported down
(`farm_redis_up`, `farm_history_store_up`) and its metrics left out: a scrape never fails for it."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterator

import redis as redis_lib
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from farm.app import fair_shares, redis_memory
from farm.app.metrics.labels import resource_of, split_queue
from farm.app.overview import busy_workers
from farm.config import Settings
from farm.pipeline import RESOURCES
from farm.protocol import counters, heartbeat
from farm.protocol.heartbeat import Pool
from farm.protocol.keys import Keys
from farm.protocol.live import depths, inspect_batches, running_batches
from farm.protocol.live_knobs import knobs_now
from farm.protocol.scope import batch_tenant
from farm.protocol.shares import DEFAULT
from farm.protocol.stream import health
from farm.store.accounting import allocated_totals
from farm.store.queries import batch_delays

log = logging.getLogger(__name__)

WORKER_STATES = ("pending", "starting", "running", "stopping")
DELAY_WINDOW_S = 600.0  # a tenant's extra delay: the mean over its batches completed this recently


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels or [])


def _scalars(rows) -> Iterator[GaugeMetricFamily]:
    """One unlabelled gauge per (name, doc, value)."""
    for name, doc, value in rows:
        g = _gauge(name, doc)
        g.add_metric([], value)
        yield g


class LiveCollector(Collector):
    """A prometheus_client collector over the farm's Redis and history store."""

    def __init__(self, settings: Settings, engine: Engine | None, redis: Any,
                 *, clock: Callable[[], float] = time.time) -> None:
        self.settings, self.engine, self.redis, self.clock = settings, engine, redis, clock
        self.namespace = settings.namespace

    def collect(self) -> Iterator[Any]:
        now = self.clock()
        redis_up = _gauge("farm_redis_up", "Whether the farm's Redis answered this scrape (1) or not (0).")
        try:
            families = list(self._from_redis(now))
            redis_up.add_metric([], 1)
        except redis_lib.RedisError as exc:
            log.warning("metrics: the farm's Redis did not answer: %s", exc)
            families = []
            redis_up.add_metric([], 0)
        yield redis_up
        yield from families
        yield from self._from_store(now)

    # ------------------------------------------------------------ Redis

    def _from_redis(self, now: float) -> Iterator[Any]:
        queued = _gauge("farm_stage_queued_requests", "Requests waiting in a stage's queue.", ["pipeline", "stage"])
        running = _gauge("farm_stage_running_requests", "Requests a worker runs now at a stage.", ["pipeline", "stage"])
        serving = _gauge("farm_stage_serving_workers", "Workers registered at a stage and heartbeating.",
                         ["pipeline", "stage"])
        for q, d in depths(self.redis, self.settings, now).items():
            labels = list(split_queue(q))
            queued.add_metric(labels, d.pending)
            running.add_metric(labels, d.running)
            serving.add_metric(labels, d.workers)
        yield from (queued, running, serving)
        yield from self._knobs()
        yield from self._planner(now)
        yield from self._batches()
        yield from self._tenants()
        yield from self._counters()
        yield from self._stream(now)
        yield from self._memory()

    def _memory(self) -> Iterator[Any]:
        m = redis_memory.read(self.redis)
        yield from _scalars((
            ("farm_redis_memory_used_bytes", "Memory the farm's Redis uses.", m.used),
            ("farm_redis_memory_max_bytes", "The farm's Redis's memory bound (maxmemory; 0: none).", m.bound),
        ))
        policy = _gauge("farm_redis_maxmemory_policy", "What the farm's Redis does at its bound (1 on the policy's "
                        "label): farm state needs noeviction.", ["policy"])
        policy.add_metric([m.policy], 1)
        yield policy

    def _knobs(self) -> Iterator[Any]:
        knobs = knobs_now(self.redis, Keys(self.namespace))
        yield from _scalars((
            ("farm_delay_tolerance_seconds", "The tolerated extra delay D (the knob delay_s).", knobs.delay_s),
            ("farm_planner_tick_seconds", "The planner's tick (the knob tick_s).", knobs.tick_s),
        ))

    def _planner(self, now: float) -> Iterator[Any]:
        beat = heartbeat.read(self.redis, self.namespace)
        up = _gauge("farm_planner_up", "Whether a planner daemon's heartbeat is alive (1) or not (0).")
        up.add_metric([], 1 if beat else 0)
        yield up
        if not beat:
            return  # no planner: no pools it sizes (fixed pools show in farm_stage_serving_workers)
        workers = _gauge("farm_stage_workers", "The planner's workers of a stage by state (target: what its last "
                         "decision asked for).", ["pipeline", "stage", "state"])
        for q in sorted(set(beat.pools) | set(beat.targets)):
            pipeline, stage = split_queue(q)
            if q in beat.targets:
                workers.add_metric([pipeline, stage, "target"], beat.targets[q])
            pool = beat.pools.get(q) or Pool()
            for state in WORKER_STATES:
                workers.add_metric([pipeline, stage, state], getattr(pool, state))
        yield workers
        startup = _gauge("farm_planner_startup_seconds", "The worker start-up the planner plans with.")
        startup.add_metric([], float(beat.startup_s or 0.0))
        yield startup
        yield from self._capacity(beat)

    def _capacity(self, beat: Any) -> Iterator[Any]:
        """The cluster's capacity as the planner's backend reports it, and the stages it holds below their want."""
        capacity = _gauge("farm_capacity_workers", "Workers of a resource kind the planner's backend can run "
                          "(scope placeable: with the nodes there now; most: once an autoscaler added all it may). "
                          "An unbounded kind has none.", ["resource", "scope"])
        for kind, c in sorted(beat.capacity.items()):
            capacity.add_metric([kind, "placeable"], c.placeable)
            capacity.add_metric([kind, "most"], c.most)
        yield capacity
        node = _gauge("farm_capacity_node_startup_seconds", "How long a node the autoscaler adds takes, as the "
                      "planner plans with it (0: no node expected).")
        node.add_metric([], float(beat.node_startup_s or 0.0))
        yield node
        short = _gauge("farm_stage_capacity_short_workers", "Workers a stage's plan wants beyond what the cluster's "
                       "capacity holds for it (0: not bound).", ["pipeline", "stage", "resource"])
        wanted = _gauge("farm_stage_capacity_wanted_workers", "Workers a capacity-bound stage's plan wants.",
                        ["pipeline", "stage", "resource"])
        delay = _gauge("farm_stage_capacity_expected_delay_seconds", "The extra delay C - T the planner expects of a "
                       "capacity-bound stage's pipeline's active batches (worst batch), to compare with D.",
                       ["pipeline", "stage"])
        for q in sorted(set(beat.pools) | set(beat.targets) | set(beat.bound)):
            pipeline, stage = split_queue(q)
            b = beat.bound.get(q)
            short.add_metric([pipeline, stage, b.resource if b else resource_of(q)], b.short if b else 0)
            if b is not None:
                wanted.add_metric([pipeline, stage, b.resource], b.wanted)
                if b.delay_max_s is not None:
                    delay.add_metric([pipeline, stage], b.delay_max_s)
        yield from (short, wanted, delay)

    def _batches(self) -> Iterator[Any]:
        active = _gauge("farm_task_active_batches", "Batches of a task not yet completed or cancelled.",
                        ["task", "pipeline"])
        outstanding = _gauge("farm_task_outstanding_requests", "Requests of a task's active batches without a "
                             "result (those still to arrive included).", ["task", "pipeline"])
        estimate = _gauge("farm_task_estimated_completion_timestamp_seconds", "The latest estimated completion "
                          "time T of a task's active batches (the EBF key), in epoch seconds.", ["task", "pipeline"])
        per_task: dict[tuple[str, str], list[Any]] = {}
        for b in inspect_batches(self.redis, self.settings):
            if not b.finished:
                per_task.setdefault((b.task, b.pipeline), []).append(b)
        for (task, pipeline), batches in sorted(per_task.items()):
            active.add_metric([task, pipeline], len(batches))
            outstanding.add_metric([task, pipeline], sum(max(0, b.size - b.done) for b in batches))
            estimate.add_metric([task, pipeline], max(b.key for b in batches))
        yield from (active, outstanding, estimate)

    def _tenants(self) -> Iterator[Any]:
        """Per tenant with a share published or a worker busy on it: its share and caps as the pick reads them,
        and its busy workers per resource kind (0 for a kind it holds none of)."""
        shares = fair_shares.read(self.redis, self.namespace)
        busy = busy_workers(running_batches(self.redis, self.namespace), resource_of)
        share = _gauge("farm_tenant_share", "A tenant's fair share: its weight when a stage's workers are divided "
                       "between the tenants with work waiting there (1 unless set).", ["tenant"])
        cap = _gauge("farm_tenant_max_workers", "A tenant's cap of the farm's workers of a resource kind (a kind "
                     "without a cap has none).", ["tenant", "resource"])
        held = _gauge("farm_tenant_busy_workers", "Workers running a tenant's requests now, by resource kind.",
                      ["tenant", "resource"])
        for t in sorted(set(shares) | set(busy)):
            s = shares.get(t, DEFAULT)
            share.add_metric([t], s.share)
            for kind, n in s.max_workers.items():
                cap.add_metric([t, kind], n)
            kinds = busy.get(t, {})
            for kind in sorted(set(RESOURCES) | set(kinds)):
                held.add_metric([t, kind], kinds.get(kind, 0))
        yield from (share, cap, held)

    def _counters(self) -> Iterator[Any]:
        c = counters.read(self.redis, self.namespace)
        recovered = CounterMetricFamily("farm_lease_recoveries", "Requests given back to their queue because "
                                        "their worker stopped heartbeating.", labels=["pipeline", "stage"])
        for q, n in sorted(c.lease_recovered.items()):
            recovered.add_metric(list(split_queue(q)), n)
        yield recovered
        preempted = CounterMetricFamily("farm_preemptions", "Running requests stopped and given back to their queue "
                                        "so that a tenant whose share is reserved is served at once.",
                                        labels=["pipeline", "stage"])
        for q, n in sorted(c.preempted.items()):
            preempted.add_metric(list(split_queue(q)), n)
        yield preempted
        yield HistogramMetricFamily("farm_planner_decision_seconds", "Runtime of the planner's policy per pipeline "
                                    "and decision.", buckets=list(c.decision_buckets), sum_value=c.decision_sum_s)
        overflows = CounterMetricFamily("farm_history_overflows", "Times the history stream's cap dropped entries "
                                        "the recorder had not written (history lost).")
        overflows.add_metric([], c.history_overflows)
        yield overflows

    def _stream(self, now: float) -> Iterator[Any]:
        h = health(self.redis, self.namespace, now=now)
        yield from _scalars((
            ("farm_history_stream_entries", "Events waiting in the history stream for the recorder.", h.length),
            ("farm_history_stream_cap_entries", "The history stream's cap: beyond it the oldest events are lost.",
             h.cap),
            ("farm_history_stream_lag_seconds", "Age of the oldest event the recorder has not written.",
             h.oldest_age_s),
        ))

    # ------------------------------------------------------------ history store

    def _from_store(self, now: float) -> Iterator[Any]:
        up = _gauge("farm_history_store_up", "Whether the history store answered this scrape (1) or not (0).")
        if self.engine is None:
            return
        try:
            totals = allocated_totals(self.engine, now)
            delays = batch_delays(self.engine, now - DELAY_WINDOW_S, None)
        except SQLAlchemyError as exc:
            log.warning("metrics: the history store did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        allocated = CounterMetricFamily("farm_worker_allocated_seconds", "Worker-seconds allocated (placed on a "
                                        "machine, busy or not): the farm's cost, by stage and resource.",
                                        labels=["pipeline", "stage", "resource"])
        for q, seconds in sorted(totals.items()):
            allocated.add_metric([*split_queue(q), resource_of(q)], seconds)
        yield allocated
        yield from _tenant_delays(delays)


def _tenant_delays(delays: list[tuple[str, str | None, float]]) -> Iterator[Any]:
    """Per tenant, the mean extra delay d of its batches completed in the last DELAY_WINDOW_S, and how many."""
    per_tenant: dict[str, list[float]] = {}
    for batch, _task, d in delays:
        per_tenant.setdefault(batch_tenant(batch), []).append(d)
    mean = _gauge("farm_tenant_extra_delay_seconds", f"Mean extra delay d of a tenant's batches completed in the "
                  f"last {DELAY_WINDOW_S:g} s (completion minus the earliest possible completion T), to compare "
                  "with D and between tenants.", ["tenant"])
    count = _gauge("farm_tenant_completed_batches", f"A tenant's batches completed in the last {DELAY_WINDOW_S:g} s "
                   "(those its farm_tenant_extra_delay_seconds is the mean of).", ["tenant"])
    for t, ds in sorted(per_tenant.items()):
        mean.add_metric([t], sum(ds) / len(ds))
        count.add_metric([t], len(ds))
    yield from (mean, count)
