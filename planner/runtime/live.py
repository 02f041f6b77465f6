"""The live farm as the policy sees it: a `planner.policy.snapshot.Snapshot` per pipeline, from Redis and the store.

Per pipeline: its stages (with the knobs' costs and timeouts) and pools, each active batch (start, size,
EBF key, every arrived request with its arrival offset and where it is now: queued at a stage since
when, running there since when, or done), and per task the previous completed batch as an (n, 1+M)
array. History changes only when a batch completes, so it is cached per task and re-read only for a
task one of whose batches left the active set since the last read (until the recorder has written it).
A task with no history borrows the other tasks' of its pipeline (the policy pools them); a batch whose
whole pipeline has none is *cold*, and the policy's documented cold default serves it (planner.policy.estimate).
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from sqlalchemy import select

from farm import registry
from farm.knobs import Knobs
from farm.protocol import reads
from farm.protocol.keys import Keys, text
from farm.protocol.live import inspect
from farm.protocol.scope import batch_tenant
from farm.protocol.shares import FairShare, caps_bound
from farm.protocol.silence import silent
from farm.protocol.state import RequestState
from farm.store import queries
from farm.store.models import Batch, Task, Worker
from planner.policy.snapshot import DONE, QUEUED, RUNNING, ActiveBatch, Snapshot, StageState
from planner.policy.startup import StartupStats, summarise
from planner.runtime.view import PipelineView

log = logging.getLogger("farm.planner")


def stage_states(pipeline: Any, knobs: Knobs, pools: Mapping[str, tuple[int, int]]) -> tuple[StageState, ...]:
    """The pipeline's stages with the operator's cost and timeout overrides and the pools (workers, starting)."""
    out = []
    for s in pipeline.stages:
        workers, starting = pools.get(s.queue, (0, 0))
        out.append(StageState(s.name, s.resource, knobs.cost_of(s), knobs.timeout_of(s), s.queue,
                              workers, min(starting, workers)))
    return tuple(out)


def served(records: Iterable[Any], index: Mapping[str, int]) -> list[float]:
    """Seconds a request spent at each stage it has finished (0 elsewhere), from its stage records."""
    out = [0.0] * len(index)
    for record in records:
        if not isinstance(record, Mapping):
            continue
        j = index.get(record.get("name"))
        if j is None:
            continue
        try:
            seconds = float(record.get("finished_at")) - float(record.get("started_at"))
        except (TypeError, ValueError):
            continue  # a record without its times says nothing of the stage's time
        if math.isfinite(seconds):
            out[j] = max(0.0, seconds)
    return out


def active_batch(
    progress: Any,
    names: Sequence[str],
    states: Mapping[str, str],
    results: Mapping[str, str],
    pending: Mapping[str, tuple[int, float]],
    running: Mapping[str, tuple[int, float]],
) -> ActiveBatch:
    """One active batch with every arrived request and where it is now.

    `states`: request id -> its state JSON (the batch's `:req` hash); `results`: id -> result JSON
    (`:res`); `pending`: id -> (stage index, queued at); `running`: id -> (stage index, started at).
    """
    rows = []
    index = {name: j for j, name in enumerate(names)}
    for rid, raw in states.items():
        try:
            state = RequestState.decode(raw)
        except (TypeError, ValueError):
            log.warning("batch %s: request %s has an unreadable state", progress.batch_id, rid)
            continue
        arrived = state.arrived_at
        if arrived is None:
            continue
        offset = max(0.0, arrived - progress.opened_at)
        done = served(state.records, index)
        if rid in running:
            j, since = running[rid]
            rows.append((offset, j, RUNNING, since, rid, done))
        elif rid in pending:
            j, since = pending[rid]
            rows.append((offset, j, QUEUED, since, rid, done))
        elif rid in results or state.next_visit(names) is None:
            finished = arrived
            try:
                result = json.loads(results[rid])
                finished = float(result.get("finished_at") or arrived)
                # the state is not written again after the last stage: the result has every stage's record
                if result.get("stages"):
                    done = served(result["stages"], index)
            except (KeyError, TypeError, ValueError, AttributeError):
                pass
            rows.append((offset, 0, DONE, finished, rid, done))
        else:
            # Neither queued, running nor done (a lapsed lease not yet reclaimed): the worst case for the
            # pool is that it is queued at its next stage since it last moved.
            rows.append((offset, index[state.next_visit(names)], QUEUED, state.queued_at or arrived, rid, done))
    rows.sort(key=lambda r: (r[0], r[4]))
    key = float(progress.key) if progress.key is not None else math.nan
    return ActiveBatch(
        id=progress.batch_id, task=progress.task, start_s=float(progress.opened_at), size=int(progress.size),
        key=key,
        arrival=[r[0] for r in rows], stage=[r[1] for r in rows], state=[r[2] for r in rows],
        since=[r[3] for r in rows], served=np.array([r[5] for r in rows]).reshape(len(rows), len(names)),
    )


class HistoryCache:
    """One pipeline's history: each task's previous completed batch, re-read only after its batch completes.

    `load(task, queues)` returns the task's latest completed batch (with `.id` and `.requests`) or None;
    `latest(queues, exclude)` the latest completed batch of any other task of the pipeline, or None.
    """

    def __init__(self, load: Callable[[str, Sequence[str]], Any],
                 latest: Callable[[Sequence[str], str], Any] | None = None) -> None:
        self.load, self.latest = load, latest
        self.cache: dict[str, tuple[str | None, np.ndarray | None]] = {}
        self.dirty: set[str] = set()
        self.active: dict[str, str] = {}  # batch id -> task, as of the last read
        self.loads = 0

    def observe(self, batches: Iterable[ActiveBatch]) -> None:
        """Tasks whose batch left the active set since the last read have new history to read."""
        now_active = {b.id: b.task for b in batches}
        self.dirty.update(task for bid, task in self.active.items() if bid not in now_active)
        self.active = now_active

    def get(self, task: str, queues: Sequence[str]) -> np.ndarray | None:
        if task not in self.cache or task in self.dirty:
            previous = self.cache.get(task, (None, None))[0]
            found = self.load(task, queues)
            self.loads += 1
            self.cache[task] = (found.id, found.requests) if found is not None else (None, None)
            # Until the recorder has written the batch that just completed, keep asking (one query).
            if found is not None and (found.id != previous or task not in self.dirty):
                self.dirty.discard(task)
        return self.cache[task][1]

    def others(self, task: str, queues: Sequence[str]) -> dict[str, np.ndarray]:
        """History for a task that has none: the cached batches of the pipeline's other tasks, else the
        latest completed batch of any other task of the pipeline from the store (after a restart)."""
        found = {t: h for t, (_, h) in self.cache.items() if t != task and h is not None and len(h)}
        if not found and self.latest is not None:
            latest = self.latest(queues, task)
            if latest is not None and len(latest.requests):
                self.cache.setdefault(latest.task, (latest.id, latest.requests))
                found[latest.task] = latest.requests
        return found


def snapshot(now: float, pipeline: Any, knobs: Knobs, pools: Mapping[str, tuple[int, int]],
             batches: Sequence[ActiveBatch], history: HistoryCache, startup_s: float = 0.0
             ) -> tuple[Snapshot, tuple[str, ...]]:
    """The policy's snapshot of one pipeline, and the ids of its cold batches (no history anywhere).

    A task without history of its own gets none in the snapshot; the snapshot then carries the other
    tasks' histories of the pipeline, which the policy pools for it (planner.policy.estimate).
    """
    stages = stage_states(pipeline, knobs, pools)
    queues = [s.queue for s in stages]
    history.observe(batches)
    hist: dict[str, np.ndarray] = {}
    for task in sorted({b.task for b in batches}):
        found = history.get(task, queues)
        if found is not None and len(found):
            hist[task] = found
    for task in sorted({b.task for b in batches} - set(hist)):
        for other, h in history.others(task, queues).items():
            hist.setdefault(other, h)
    cold = tuple(b.id for b in batches if not hist)
    return Snapshot(now=now, pipeline=pipeline.name, stages=stages, batches=tuple(batches), history=hist,
                    startup_s=startup_s), cold


# ------------------------------------------------------------------------------------------- Redis + store


class LiveFarm:
    """Reads the live farm (farm.protocol.live.inspect plus each active batch's request states) and the store."""

    def __init__(self, settings: Any, redis: Any, engine: Any, *, startup_s: float = 0.0,
                 pipelines: Sequence[str] | None = None, backend: str | None = None) -> None:
        self.settings, self.redis, self.engine = settings, redis, engine
        self.startup_s = startup_s
        self.backend = backend
        self.only = tuple(pipelines) if pipelines else None
        self.histories: dict[str, HistoryCache] = {}
        self._startup: tuple[float, dict[str, StartupStats]] | None = None  # (read at, per stage queue)

    def startups(self, now: float) -> dict[str, StartupStats]:
        """Per stage queue, the start-ups of this backend's workers spawned in the last `STARTUP_WINDOW_S`
        (stages with fewer than `STARTUP_MIN_SAMPLES` left out), re-read every few seconds."""
        every = STARTUP_REFRESH_S if self._startup and self._startup[1] else STARTUP_RETRY_S
        if self._startup is None or now - self._startup[0] > every:
            try:
                observed = observed_startups(self.engine, since=now - STARTUP_WINDOW_S, backend=self.backend)
            except Exception:
                log.warning("could not read worker start-up times from the store", exc_info=True)
                observed = {}
            self._startup = (now, observed)
        return self._startup[1]

    def startup(self, now: float, queues: Sequence[str] | None = None) -> float:
        """The start-up the policy plans with for a pipeline of these stage queues (all when None): the
        configured one, or the 90th percentile its workers' lives show when that is longer (a loaded
        machine starts workers slower; plan for the worse). The snapshot has one start-up per pipeline,
        so its slowest stage's: a longer start-up only starts workers earlier."""
        seen = [st.plan_s for q, st in self.startups(now).items() if queues is None or q in queues]
        return max([self.startup_s, *seen])

    def _history(self, pipeline: str) -> HistoryCache:
        if pipeline not in self.histories:
            def load(task: str, queues: Sequence[str]):
                return queries.previous_batch(self.engine, task, stages=queues)

            def latest(queues: Sequence[str], exclude: str):
                return latest_of_pipeline(self.engine, pipeline, queues, exclude)

            self.histories[pipeline] = HistoryCache(load, latest)
        return self.histories[pipeline]

    def read(self, now: float, knobs: Knobs, workers: Sequence[Any]) -> list[PipelineView]:
        live = inspect(self.redis, self.settings, now=now, knobs=knobs)
        keys = Keys(self.settings.namespace)
        names = {q.partition(".")[0] for q in live.stages} | {b.pipeline for b in live.batches}
        names |= {w.stage.partition(".")[0] for w in workers}
        names |= {q.partition(".")[0] for q, k in knobs.stages.items() if k.min_workers > 0}
        if self.only is not None:
            names &= set(self.only)
        pools: dict[str, tuple[int, int]] = {}
        for w in workers:
            if not w.alive:
                continue
            n, starting = pools.get(w.stage, (0, 0))
            pools[w.stage] = (n + 1, starting + (getattr(w.state, "value", w.state) == "starting"))
        shares = read_shares(self.redis, keys)
        views = []
        for name in sorted(names):
            try:
                pipeline = registry.get(name)
            except Exception as exc:
                log.warning("skipping pipeline %s: %s", name, exc)
                continue
            stage_names = [s.name for s in pipeline.stages]
            index = {s.queue: j for j, s in enumerate(pipeline.stages)}
            pending: dict[str, dict[str, tuple[int, float]]] = {}  # batch -> request -> (stage, queued at)
            running: dict[str, dict[str, tuple[int, float]]] = {}  # batch -> request -> (stage, started at)
            busy: dict[str, float] = {}
            for q, st in live.stages.items():
                if q not in index:
                    continue
                for p in st.pending:
                    pending.setdefault(p.batch, {})[p.id] = (index[q], p.enqueued_at)
                for r in st.running:
                    running.setdefault(r.batch, {})[r.id] = (index[q], r.started_at)
                    busy[r.worker] = r.started_at
            # a batch whose trainer is past its allowed silence is planned for no more, even before a sweep
            # abandons it (farm.protocol.silence); once abandoned it has left the active set
            progress = [b for b in live.batches if b.pipeline == name and b.state == "open"
                        and not silent(b.seen_at, knobs.abandon_after(), now)]
            pipe = self.redis.pipeline(transaction=False)
            for b in progress:
                reads.request_states(pipe, keys, b.batch_id)
                reads.stored_results(pipe, keys, b.batch_id)
            raw = pipe.execute() if progress else []
            batches = []
            for i, b in enumerate(progress):
                states, results = raw[2 * i], raw[2 * i + 1]
                batches.append(active_batch(b, stage_names, states, results,
                                            pending.get(b.batch_id, {}), running.get(b.batch_id, {})))
            snap, cold = snapshot(now, pipeline, knobs, pools, batches, self._history(name),
                                  self.startup(now, pipeline.queues))
            views.append(PipelineView(name, tuple(pipeline.queues), snap,
                                      {b.id: b.size for b in batches}, cold, busy,
                                      caps_bound((batch_tenant(b.id) for b in batches), shares)))
        return views


def read_shares(redis: Any, keys: Keys) -> dict[str, FairShare]:
    """The tenants' fair shares as published (`Keys.shares`); one that does not decode counts as the default
    (1, no cap: for the planner, an unknown cap is no bound) and is logged."""
    out = {}
    for label, raw in redis.hgetall(keys.shares).items():
        try:
            out[text(label)] = FairShare.decode(raw)
        except (ValueError, TypeError, AttributeError):
            log.warning("tenant %s: its fair share %r does not decode; planning as if it had none", text(label), raw)
    return out


STARTUP_WINDOW_S = 600.0  # start-ups of the workers spawned this recently
STARTUP_REFRESH_S = 5.0  # re-read the observed start-up this often (a query over recent worker lives)
STARTUP_RETRY_S = 1.0  # ... and this often while too few workers have been seen starting
STARTUP_MIN_SAMPLES = 3


def startup_rows(engine: Any, since: float, backend: str | None = None) -> list[tuple[str | None, str, float]]:
    """(backend, stage, seconds from placement to ready) of the workers spawned since `since` that became
    ready. From placement, not spawn: time spent waiting for a cluster's room is not start-up."""
    query = select(Worker.backend, Worker.stage, Worker.spawned_at, Worker.placed_at, Worker.ready_at).where(
        Worker.spawned_at >= since, Worker.ready_at.is_not(None))
    if backend is not None:
        query = query.where(Worker.backend == backend)
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    out = []
    for r in rows:
        start = r.spawned_at if r.placed_at is None else r.placed_at
        if r.ready_at >= start:
            out.append((r.backend, r.stage, r.ready_at - start))
    return out


def observed_startups(engine: Any, since: float, backend: str | None = None) -> dict[str, StartupStats]:
    """Per stage queue, the start-up statistics of one backend's recent workers (enough samples only)."""
    return {st.stage: st for st in summarise(startup_rows(engine, since, backend)) if st.count >= STARTUP_MIN_SAMPLES}


def observed_startup(engine: Any, since: float) -> float | None:
    """Median seconds from spawn to ready of the workers spawned since `since` (None with too few)."""
    delays = [d for _, _, d in startup_rows(engine, since)]
    return float(np.median(delays)) if len(delays) >= STARTUP_MIN_SAMPLES else None


def latest_of_pipeline(engine: Any, pipeline: str, queues: Sequence[str], exclude: str) -> Any:
    """The latest completed batch of any task of `pipeline` other than `exclude`, or None."""
    with engine.connect() as conn:
        task = conn.execute(
            select(Batch.task).join(Task, Task.name == Batch.task)
            .where(Task.pipeline == pipeline, Batch.task != exclude, Batch.completed_at.is_not(None),
                   Batch.cancelled_at.is_(None))
            .order_by(Batch.completed_at.desc()).limit(1)
        ).scalar()
    return queries.previous_batch(engine, task, stages=queues) if task else None
