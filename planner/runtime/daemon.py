"""The planner daemon: at every decision epoch, the live farm -> the policy -> worker pools and EBF keys.

A thin shell around the pure policy (`decide(snapshot, knobs, rng)`): it wakes when a batch opens (the
trainer's hint, so workers start during rollout) or completes, and on a periodic tick (`knobs.tick_s`):
the policy sizes each pool for what its plan keeps busy until the next decision, so the tick is how the
pools follow the plan (and how a lost epoch message is made up for). It reads the knobs afresh every
time (so `farm knobs` takes effect at the next decision); clamps each stage to its min/max workers;
retires idle workers first through the backend; writes each batch's estimated completion time where EBF
reads it; and records the decision.

It keeps no state a restart would need: pools are what the backend lists, batches what the farm shows,
so after a `kill -9` a new daemon reconciles the backend and carries on with the workers that run.
Its wake-ups are `planner.runtime.epochs`; what it reads per pipeline and takes from a decision,
`planner.runtime.view`; the pool changes, `planner.runtime.pools`.

Every epoch it also reads the backend's capacity (the workers of each resource kind the cluster can run,
now and at most) and shares it among the pipelines (`planner.runtime.share`): each snapshot carries its
share, the policy plans within it, and the pools it asks for never exceed the share's most (an
autoscaler's maximum; on a fixed-size cluster what is there). Where the capacity binds, the decision
says which stage wants how many more and the delay now expected (`Decision.binding`): the record and
the heartbeat carry it to `farm status` and the metrics.

The first batch of a task has no history to estimate its requests from. It borrows the other tasks'
history of its pipeline (the live view puts it in the snapshot, the policy pools it). A batch whose
pipeline has no history at all is *cold*; the documented safe default is then the policy's own
(planner.policy.estimate: every arrived request is taken to run to its stages' timeouts, plus a spare worker
per stage for the next arrival), at the same epochs as `farm eval` replays, so the evaluation predicts
what the daemon does. An operator may add a floor (`cold_workers`, `farm planner --cold-workers`):
that many workers per stage (within `max_workers` and the batch size) while a cold batch is active.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from farm.knobs import Knobs
from farm.store.decisions import DecisionRecord
from planner.policy.capacity import UNBOUNDED, Capacity, fit, within
from planner.policy.decide import RECENT_NEEDS
from planner.policy.snapshot import Snapshot
from planner.runtime import native
from planner.runtime.epochs import Wakeup
from planner.runtime.pools import Changes, PoolWorker, clamp, plan
from planner.runtime.share import shares
from planner.runtime.view import (LiveView, PipelineView, capacity_report, cold_floor, decision_binding,
                                  decision_estimates, decision_workers)

log = logging.getLogger("farm.planner")


class Backend(Protocol):
    """What the daemon needs of a backend (`planner.backends.Backend`)."""

    def list(self, stage: str | None = None) -> Sequence[Any]: ...  # Workers: .name .stage .spawned_at .alive

    def spawn(self, stage: str, n: int, *, request_id: str | None = None) -> Sequence[Any]: ...

    def retire(self, names: Iterable[str]) -> Sequence[Any]: ...

    def reconcile(self) -> Sequence[Any]: ...

    def capacity(self) -> Capacity: ...


DecideFn = Callable[[Any, Knobs, random.Random], Any]


def _pool(workers: Sequence[Any], busy: Mapping[str, float]) -> list[PoolWorker]:
    # Busy is judged by the farm's leases (a running request names its worker), not by the backend:
    # a worker the farm has not seen yet holds no lease, so it is idle (it is still starting).
    return [
        PoolWorker(
            name=w.name,
            stage=w.stage,
            started_at=float(w.spawned_at),
            busy_since=busy.get(w.name),
            retiring=not w.alive,  # stopping: finishing its request, no longer part of the pool
        )
        for w in workers
    ]


class Daemon:
    """The shell around the policy: reads the farm, decides, applies and records, once per decision epoch."""

    def __init__(
        self,
        *,
        view: LiveView,
        backend: Backend,
        decide: DecideFn,
        knobs: Callable[[], Knobs],
        set_estimate: Callable[[str, float], Any],
        record: Callable[[DecisionRecord], Any],
        clock: Callable[[], float] = time.time,
        seed: int = 0,
        cold_workers: int = 0,
        on_step: Callable[[list[DecisionRecord]], Any] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        dump: Callable[[Any, Knobs, Any], Any] | None = None,
    ) -> None:
        self.view, self.backend, self.decide = view, backend, decide
        self.knobs, self.set_estimate, self.record, self.clock = knobs, set_estimate, record, clock
        self.rng = random.Random(seed)
        self.decisions = 0
        self.cold_workers = cold_workers
        self.on_step = on_step  # after every epoch, decided or not (the service's liveness heartbeat)
        self.monotonic = monotonic
        self.dump = dump  # (snapshot, knobs, decision) of every decision, for debugging (FARM_PLANNER_DUMP_DIR)
        self.instance = uuid.uuid4().hex[:6]
        self._recorded: dict[str, dict[str, int]] = {}  # per pipeline, the pools of its last recorded decision
        self._needs: dict[str, deque] = {}  # per pipeline, the policy's latest needs (`Snapshot.recent`)
        self.workers: list[Any] = []  # what the backend listed at the last epoch (`farm status` shows it)
        self.capacity: Capacity = UNBOUNDED  # what the backend last said it can run (`farm status` shows it)

    def start(self) -> Any:
        """Adopt what runs (no orphans, no duplicates) before the first decision."""
        native.load()  # the compiled sweeps, if this machine can build them: decisions unchanged, faster
        return self.backend.reconcile()

    def step(self, reason: str) -> list[DecisionRecord]:
        """One decision epoch over every pipeline the farm shows; returns what was recorded."""
        knobs = self.knobs()
        now = self.clock()
        workers = list(self.backend.list())
        self.workers = workers
        capacity = self._read_capacity()
        views = self.view.read(now, knobs, workers)
        share = self._share(views, workers, capacity)
        records = []
        for view in views:
            try:
                records.append(self._decide_pipeline(view, knobs, workers, now, reason,
                                                     within(share.get(view.pipeline, UNBOUNDED), view.caps)))
            except Exception:  # one pipeline's failure must not starve the others
                log.exception("decision for pipeline %s failed", view.pipeline)
        self.decisions += 1
        if self.on_step is not None:
            try:
                self.on_step(records)
            except Exception:
                log.warning("after-epoch hook failed", exc_info=True)
        return records

    def _read_capacity(self) -> Capacity:
        try:
            self.capacity = self.backend.capacity()
        except Exception:
            # the backend could not say (a cluster away): keep what it last said, the worst case for a spawn
            # being that nothing was freed since (unbounded only if it never said, and the knobs still apply)
            log.warning("could not read the backend's capacity; planning with the last one", exc_info=True)
        return self.capacity

    def _share(self, views: Sequence[PipelineView], workers: Sequence[Any], capacity: Capacity) -> dict[str, Capacity]:
        """Each pipeline's share of the capacity, by what it holds and what it last needed."""
        if capacity.unbounded:
            return {}
        kind_of = {s.queue: s.resource for v in views if isinstance(v.snapshot, Snapshot) for s in v.snapshot.stages}
        kinds = {v.pipeline: {kind_of[q] for q in v.stages if q in kind_of} for v in views}
        held: dict[str, dict[str, int]] = {}
        for w in workers:  # placed and not stopping: what the backend counts as this farm's in what is placeable
            if w.stage in kind_of and w.alive and getattr(w.state, "value", w.state) != "pending":
                mine = held.setdefault(w.stage.partition(".")[0], {})
                mine[kind_of[w.stage]] = mine.get(kind_of[w.stage], 0) + 1
        wants: dict[str, dict[str, int] | None] = {}
        for v in views:
            needs = self._needs.get(v.pipeline)
            if needs:
                want: dict[str, int] = {}
                for q, n in needs[-1].workers.items():
                    if q in kind_of:
                        want[kind_of[q]] = want.get(kind_of[q], 0) + int(n)
                wants[v.pipeline] = want
            else:
                wants[v.pipeline] = None
        return shares(capacity, kinds, held, wants)

    def _decide_pipeline(self, view: PipelineView, knobs: Knobs, workers: list[Any], now: float, reason: str,
                         capacity: Capacity = UNBOUNDED):
        needs = self._needs.setdefault(view.pipeline, deque(maxlen=RECENT_NEEDS))
        snapshot = view.snapshot
        if isinstance(snapshot, Snapshot):  # the policy steadies its need against its own latest ones
            snapshot = replace(snapshot, recent=tuple(needs), capacity=capacity)
        started = time.perf_counter()
        decision = self.decide(snapshot, knobs, self.rng)
        runtime = time.perf_counter() - started
        if self.dump is not None:
            try:
                self.dump(snapshot, knobs, decision)
            except Exception:
                log.warning("could not dump the decision's snapshot", exc_info=True)
        need = getattr(decision, "need", None)  # estimating policies only
        if need is not None:
            needs.append(need)
        target = decision_workers(decision, view.stages)
        floor = cold_floor(view, knobs, self.cold_workers)
        target = {q: max(n, floor.get(q, 0)) for q, n in target.items()}
        bounds = {q: (knobs.stage(q).min_workers, knobs.stage(q).max_workers) for q in view.stages}
        target = clamp(target, bounds)
        if isinstance(snapshot, Snapshot) and not capacity.unbounded:
            # never more than the share's most (the cold floor and the knobs' minimum included): beyond it a worker would pend for ever
            queues = [s.queue for s in snapshot.stages if s.queue in target]
            kinds = [s.resource for s in snapshot.stages if s.queue in target]
            target = {**target, **dict(zip(queues, fit([target[q] for q in queues], kinds, capacity.most)))}
        changes = plan(_pool([w for w in workers if w.stage in target], view.busy), target)
        self._apply(changes)
        estimates = decision_estimates(decision)
        for batch_id, t in estimates.items():
            try:
                self.set_estimate(batch_id, t)
            except Exception:  # a batch that completed meanwhile has no key any more
                log.warning("could not set the estimate of batch %s", batch_id, exc_info=True)
        record = DecisionRecord(
            at=now,
            reason=reason,
            policy=knobs.policy,
            workers=target,
            runtime_s=runtime,
            estimates=estimates,
            details={
                "pipeline": view.pipeline,
                "policy_reason": str(getattr(decision, "reason", "")),
                # what this decision alone found, before it was steadied against the latest ones
                "need": dict(need.workers) if need is not None else None,
                "spawned": dict(changes.spawn),
                "retired": [w.name for w in changes.retire],
                "cold": list(view.cold),
                "scheduler": knobs.scheduler,
                "delay_s": knobs.delay_s,
                # the start-up the policy planned with (the live replay's prediction plans with the same)
                "startup_s": getattr(view.snapshot, "startup_s", None),
                # this pipeline's share of the cluster, and the stages it holds below their want (farm status)
                "capacity": {k: asdict(c) for k, c in capacity_report(capacity).items()},
                "binding": {q: asdict(b) for q, b in decision_binding(decision).items()},
            },
        )
        # an idle farm ticks every second: a tick with no batch that leaves the pools as recorded says nothing new
        quiet = reason == "tick" and not estimates and not changes.spawn and not changes.retire
        if quiet and self._recorded.get(view.pipeline) == target:
            return record
        self.record(record)
        self._recorded[view.pipeline] = target
        log.info("%s %s: workers %s (%.3f s) %s", reason, view.pipeline, target, runtime, record.details["policy_reason"])
        return record

    def _apply(self, changes: Changes) -> None:
        # Retire first: a retirement frees its slot at once, a spawn takes seconds to start.
        if changes.retire:
            try:
                self.backend.retire([w.name for w in changes.retire])
            except Exception:
                log.exception("retiring workers %s failed", [w.name for w in changes.retire])
        # A request id per (daemon, decision): a retried call starts nothing twice (names add the stage).
        request_id = f"p{self.instance}-{self.decisions}"

        def spawn(stage: str, count: int) -> None:
            try:
                self.backend.spawn(stage, count, request_id=request_id)
            except Exception:
                log.exception("spawning %d workers of %s failed", count, stage)

        spawns = list(changes.spawn.items())
        if len(spawns) == 1:
            spawn(*spawns[0])
        elif spawns:
            # side by side: a backend that takes seconds to create workers (containers under load) would
            # otherwise start one stage's workers only once another's are created (backends are thread-safe)
            with ThreadPoolExecutor(max_workers=len(spawns), thread_name_prefix="spawn") as pool:
                list(pool.map(lambda item: spawn(*item), spawns))

    def serve(self, wake: Wakeup, stop: threading.Event) -> None:
        """Decide at start, at every epoch message and at every tick, until `stop` is set.

        Ticks keep their own grid (every `tick_s` from the start, as `farm eval` replays them): an epoch
        message in between does not move the next tick. A new `tick_s` in the knobs takes effect at
        once: the next tick comes `tick_s` after the last one (a replay shortens the tick when it starts,
        and should not wait out the long one the daemon started with)."""
        self.start()
        self.step("start")
        tick = self.knobs().tick_s
        next_tick = self.monotonic() + tick
        while not stop.is_set():
            try:
                reason = wake.wait(max(0.0, min(next_tick - self.monotonic(), 1.0)))
            except Exception:  # a wake-up source that fails must not end the daemon: decide on ticks
                log.exception("waiting for an epoch failed")
                stop.wait(0.5)
                reason = None
            now_tick = self._tick_s(tick)
            if now_tick != tick:
                next_tick, tick = next_tick - tick + now_tick, now_tick
            if reason is None:
                if self.monotonic() < next_tick:
                    continue  # wake at least every second to notice `stop`
                reason = "tick"
                while next_tick <= self.monotonic():
                    next_tick += tick  # ticks missed while deciding are not made up
            try:
                self.step(reason)
            except Exception:  # the farm keeps serving with the workers it has; try again next epoch
                log.exception("decision epoch failed")

    def _tick_s(self, current: float) -> float:
        try:
            tick = self.knobs().tick_s
        except Exception:  # the knobs unreadable for a moment: keep the grid we have
            log.warning("could not read the knobs' tick_s; keeping %g s", current, exc_info=True)
            return current
        return tick if tick > 0 else current
