"""Replaying a trace's trainers against the live farm, K times faster, and measuring what the farm did.

The synthetic pipeline sleeps s_ij / K, each batch opens at start_s / K and its requests arrive at
r_i / K; the stage timeouts and the tolerated delay D are divided by K through the knobs, so the farm
and its planner face the trace's workload on a compressed clock. One client per task, each in its own
thread, as separate trainers would be. The report is measured from the history store (design.md's
metrics, times multiplied back by K) and shown beside `farm eval`'s prediction for the same trace.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import redis
import redis as redis_lib

from farm import registry
from farm.app.live_replay.metrics import RecordingTimeout, measure, wait_recorded, within, worker_physics
from farm.client.sync import RewardClient
from farm.config import redis_url
from farm.knobs import Knobs
from farm.store.knob_store import KnobStore
from farm.store.models import Batch
from planner.eval import loop
from planner.eval.trace import Trace, TraceBatch

PIPELINE = "synthetic"


class ReplayError(ValueError):
    """A replay that cannot run as asked; the message says why."""


# ------------------------------------------------------------------------------------------- planning


def select(trace: Trace, tasks: Sequence[str] | int | None = None, batches: int | None = None) -> Trace:
    """The part of a trace to replay: some tasks (names, or the first N in name order), the first N batches of each."""
    names = list(trace.tasks)
    if isinstance(tasks, int):
        if tasks < 1:
            raise ReplayError(f"--tasks must be at least 1, not {tasks}")
        chosen = names[:tasks]
    elif tasks:
        unknown = [t for t in tasks if t not in names]
        if unknown:
            raise ReplayError(f"the trace has no task {', '.join(map(repr, unknown))}; its tasks: {', '.join(names)}")
        chosen = list(dict.fromkeys(tasks))
    else:
        chosen = names
    if batches is not None and batches < 1:
        raise ReplayError(f"--batches must be at least 1, not {batches}")
    picked = [b for task in chosen for b in trace.batches_of(task)[: batches or None]]
    if not picked:
        raise ReplayError("nothing to replay: the selection holds no batch")
    return Trace(stages=trace.stages, batches=tuple(picked))


def parse_tasks(spec: str | None) -> Sequence[str] | int | None:
    """`--tasks 2` (the first two) or `--tasks cuda-0,cuda-3` (by name)."""
    if not spec:
        return None
    spec = spec.strip()
    if spec.isdigit():
        return int(spec)
    return [t.strip() for t in spec.split(",") if t.strip()]


def check_pipeline(trace: Trace, pipeline: Any) -> None:
    """The pipeline that replays a trace must have the trace's stages, in its order."""
    want = [s.name for s in trace.stages]
    have = [s.name for s in pipeline.stages]
    if want != have:
        raise ReplayError(
            f"the trace's stages {want} do not match the {pipeline.name!r} pipeline's stages {have}; "
            "replay a trace with those stages"
        )


def replay_knobs(base: Knobs, trace: Trace, pipeline: str, speed: float, delay_s: float | None = None) -> Knobs:
    """The knobs on the compressed clock: timeouts, D and the tick divided by K; costs from the trace."""
    knobs = replace(base, delay_s=(base.delay_s if delay_s is None else delay_s) / speed, tick_s=base.tick_s / speed)
    for stage in trace.stages:
        knobs = knobs.with_stage(f"{pipeline}.{stage.name}", timeout_s=stage.timeout_s / speed, cost=stage.cost)
    return knobs


def payload(row: np.ndarray, speed: float) -> dict[str, Any]:
    """A synthetic request for one trace row [r_i, s_i1, ..., s_iM]: sleep s_ij / K at stage j."""
    return {"times": [float(s) / speed for s in row[1:]]}


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the replay's start, compressed
    batch: TraceBatch
    index: int  # -1: the batch opens (the trainer's hint); else request i arrives


def schedule(trace: Trace, task: str, speed: float) -> list[Arrival]:
    """One trainer's timeline: each batch opens at its start, then its requests at their r_i (all / K)."""
    origin = min(b.start_s for b in trace.batches)
    events = []
    for b in trace.batches_of(task):
        start = (b.start_s - origin) / speed
        events.append(Arrival(start, b, -1))
        events.extend(Arrival(start + float(r) / speed, b, i) for i, r in enumerate(b.arrivals))
    return sorted(events, key=lambda e: (e.at, e.batch.batch, e.index))


# ------------------------------------------------------------------------------------------- running


@dataclass
class TaskOutcome:
    """What one trainer saw: its batches' ids, results per request id (a duplicate would show here)."""

    task: str
    batch_ids: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # batch id -> B
    results: dict[tuple[str, str], int] = field(default_factory=dict)  # (batch id, request id) -> times seen
    statuses: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.results.values() if n > 1)


def gather_timeout(batch: TraceBatch, speed: float, slack_s: float = 120.0) -> float:
    """How long a trainer waits for a batch: ten times its compressed T, plus slack for a loaded machine."""
    t = float((batch.arrivals + batch.times.sum(axis=1)).max())
    return 10.0 * t / speed + slack_s


class Trainer(threading.Thread):
    """One task's trainer: opens its batches and submits their requests on the compressed clock."""

    def __init__(self, client: Any, trace: Trace, task: str, speed: float, t0: float,
                 on_result: Callable[[str], None], pipeline: str = PIPELINE) -> None:
        super().__init__(name=f"trainer-{task}", daemon=True)
        self.client, self.trace, self.task, self.speed, self.t0 = client, trace, task, speed, t0
        self.on_result, self.pipeline = on_result, pipeline
        self.outcome = TaskOutcome(task)
        self._gatherers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            batches: dict[int, Any] = {}
            for event in schedule(self.trace, self.task, self.speed):
                delay = self.t0 + event.at - time.time()
                if delay > 0:
                    time.sleep(delay)
                if event.index < 0:
                    handle = self.client.open_batch(self.task, self.pipeline, event.batch.size)
                    batches[event.batch.batch] = handle
                    self.outcome.batch_ids.append(str(handle.id))
                    self.outcome.sizes[str(handle.id)] = event.batch.size
                    gatherer = threading.Thread(target=self._gather, args=(handle, event.batch), daemon=True)
                    gatherer.start()
                    self._gatherers.append(gatherer)
                else:
                    row = event.batch.requests[event.index]
                    batches[event.batch.batch].submit(str(event.index), payload(row, self.speed))
            for gatherer in self._gatherers:
                gatherer.join()
        except Exception as exc:  # reported, never swallowed: the replay fails with it
            self.outcome.error = f"{type(exc).__name__}: {exc}"

    def _gather(self, handle: Any, batch: TraceBatch) -> None:
        # A broken connection restarts the reading from the batch's first result: results already
        # counted are skipped, and a request seen twice *within one reading* is a real duplicate.

        deadline = time.monotonic() + gather_timeout(batch, self.speed)
        counted: dict[tuple[str, str], int] = {}
        for attempt in range(self.RETRIES + 1):
            this_pass: dict[tuple[str, str], int] = {}
            try:
                for result in handle.as_completed(timeout=max(1.0, deadline - time.monotonic())):
                    key = (str(result.batch_id), str(result.request_id))
                    this_pass[key] = this_pass.get(key, 0) + 1
                    if this_pass[key] <= counted.get(key, 0):
                        continue  # read again after a reconnect
                    counted[key] = this_pass[key]
                    status = getattr(result.status, "value", str(result.status))
                    with self._lock:
                        self.outcome.results[key] = counted[key]
                        self.outcome.statuses[status] = self.outcome.statuses.get(status, 0) + 1
                    self.on_result(self.task)
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if attempt == self.RETRIES or time.monotonic() > deadline:
                    self._fail(handle, exc)
                    return
            except Exception as exc:
                self._fail(handle, exc)
                return

    RETRIES = 5

    def _fail(self, handle: Any, exc: BaseException) -> None:
        with self._lock:
            self.outcome.error = self.outcome.error or f"batch {handle.id}: {type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------- the replay


# A decision takes the daemon tens of milliseconds on a loaded machine (snapshot, decide, apply) and the
# workers it sizes share the CPUs: a compressed run decides no more often than this, in real seconds.
MIN_LIVE_TICK_S = 0.5


@dataclass(frozen=True)
class ReplayOptions:
    speed: float = 20.0  # K
    tasks: Sequence[str] | int | None = None
    batches: int | None = None  # per task
    delay_s: float | None = None  # D in trace seconds (default: the knobs')
    policy: str | None = None  # default: the knobs'
    scheduler: str | None = None  # default: the knobs'
    startup_s: float = 2.0  # real seconds a new worker takes here, when the run's workers do not show it
    startup_per_start_s: float = 0.0  # real seconds more per worker starting at the same time (idem)
    retire_s: float = 0.0  # real seconds a retired worker still exists (idem)
    dispatch_s: float = 0.0  # real seconds a request takes to reach a free worker (idem)
    policy_startup_s: float | None = None  # the start-up the planner is told (default: startup_s)
    seed: int = 0
    pipeline: str = PIPELINE
    record_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not (isinstance(self.speed, (int, float)) and math.isfinite(self.speed) and self.speed > 0):
            raise ReplayError(f"--speed must be a number > 0, not {self.speed!r}")
        for name in ("startup_s", "startup_per_start_s", "retire_s", "dispatch_s", "policy_startup_s"):
            value = getattr(self, name)
            if value is None and name == "policy_startup_s":
                continue
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ReplayError(f"{name} must be a number >= 0, not {value!r}")


def trace_knobs(base: Knobs, trace: Trace, options: ReplayOptions) -> Knobs:
    """The knobs of the run in trace time (what the prediction uses): the base with the options' overrides,
    and a tick of at least `MIN_LIVE_TICK_S` once compressed."""
    changes = {k: v for k, v in (("policy", options.policy), ("scheduler", options.scheduler)) if v is not None}
    changes["tick_s"] = max(base.tick_s, MIN_LIVE_TICK_S * options.speed)
    return replay_knobs(replace(base, **changes), trace, options.pipeline, 1.0, options.delay_s)


def predict_result(trace: Trace, knobs: Knobs, options: ReplayOptions) -> Any:
    """`farm eval`'s replay of the same trace and knobs, its worker physics (real seconds) times K: a new
    worker ready (startup_s + startup_per_start_s x workers starting) x K later, a retired one gone
    retire_s x K later, a request at its worker dispatch_s x K after it is taken, the policy told a
    start-up of policy_startup_s x K."""
    k = options.speed
    told = None if options.policy_startup_s is None else options.policy_startup_s * k
    return loop.evaluate(trace, knobs, startup_s=options.startup_s * k, startup_per_start_s=options.startup_per_start_s * k,
                  retire_s=options.retire_s * k, dispatch_s=options.dispatch_s * k, policy_startup_s=told,
                  seed=options.seed, pipeline=options.pipeline)


def same_run(options: ReplayOptions, report: Mapping[str, Any]) -> ReplayOptions:
    """The options of a run's prediction: the worker physics measured on that run (`report["physics"]`), the
    planner told the start-up it was told live: the larger of the configured one and the observed median
    (`report["startup_s"]`), as planner.runtime.live does."""
    physics = report["physics"]
    return replace(options, startup_s=physics["startup_s"], startup_per_start_s=physics["startup_per_start_s"],
                   retire_s=physics["retire_s"], dispatch_s=physics["dispatch_s"],
                   policy_startup_s=max(options.startup_s, report["startup_s"]))


def predict(trace: Trace, knobs: Knobs, options: ReplayOptions) -> dict[str, Any]:
    """`farm eval --json`'s object for the same trace and knobs."""
    return predict_result(trace, knobs, options).summary()


def run(settings: Any, engine: Any, trace: Trace, options: ReplayOptions, *,
        on_result: Callable[[str], None] | None = None, predict_too: bool = True) -> dict[str, Any]:
    """Play the trainers of `trace` against the farm at `settings`; the report measured beside the prediction.

    The farm must be serving (workers, or a planner daemon that sizes the pools). The knobs are set for
    the compressed clock for the run and restored afterwards."""
    check_pipeline(trace, registry.get(options.pipeline))
    client_redis = redis_lib.Redis.from_url(redis_url(settings))
    store = KnobStore(engine, client_redis, settings.namespace)
    before = store.load()
    in_trace_time = trace_knobs(before, trace, options)
    live = replay_knobs(in_trace_time, trace, options.pipeline, options.speed)
    store.save(live)
    clients: list[Any] = []
    try:
        t0 = time.time() + 0.2
        trainers = []
        for task in trace.tasks:
            client = RewardClient(settings)
            clients.append(client)
            trainers.append(Trainer(client, trace, task, options.speed, t0, on_result or (lambda task: None),
                                    options.pipeline))
        for trainer in trainers:
            trainer.start()
        for trainer in trainers:
            trainer.join()
        outcomes = [t.outcome for t in trainers]
        errors = [f"{o.task}: {o.error}" for o in outcomes if o.error]
        if errors:
            raise ReplayError("the replay failed: " + "; ".join(errors)
                              + " (is the farm serving: `farm up`, and `farm planner` or fixed workers?)")
        batch_ids = [bid for o in outcomes for bid in o.batch_ids]
        try:
            wait_recorded(engine, batch_ids, options.record_timeout_s)
        except RecordingTimeout as exc:
            raise ReplayError(str(exc)) from exc
        # the prediction for *this* run: new workers as slow to start, retired ones as slow to exit, as
        # they were on this machine during it
        from planner.runtime.live import observed_startup

        end = _last_completion(engine, batch_ids)
        physics = worker_physics(engine, since=t0 - 60.0, until=end, startup_s=options.startup_s,
                                 startup_per_start_s=options.startup_per_start_s, retire_s=options.retire_s,
                                 dispatch_s=options.dispatch_s)
        startup = observed_startup(engine, since=t0 - 60.0) or options.startup_s
        measured = measure(engine, trace, batch_ids, start=t0, pipeline=options.pipeline, speed=options.speed,
                           knobs=live, startup_s=startup)
    finally:
        store.save(before)
        for client in clients:
            client.close()
        client_redis.close()
    expected = {(bid, str(i)) for o in outcomes for bid, size in o.sizes.items() for i in range(size)}
    seen = {key: n for o in outcomes for key, n in o.results.items()}
    report: dict[str, Any] = {
        "measured": measured,
        "started_at": t0,  # epoch seconds of the trace's origin on the farm's clock
        "startup_s": startup,  # real seconds a new worker took to be ready here (median)
        "physics": physics.to_dict(),  # what the prediction assumes, measured on this run (real seconds)
        "results": {
            "expected": len(expected),
            "received": sum(seen.values()),
            "lost": len(expected - set(seen)),
            "duplicated": sum(n - 1 for n in seen.values() if n > 1),
            "statuses": _merge(o.statuses for o in outcomes),
        },
    }
    report["knobs"] = in_trace_time.to_dict()
    if predict_too:
        report["predicted"] = predict(trace, in_trace_time, same_run(options, report))
        report["fidelity"] = within(measured, report["predicted"])
    return report


def _last_completion(engine: Any, batch_ids: Sequence[str]) -> float:
    from sqlalchemy import func, select

    with engine.connect() as conn:
        query = select(func.max(Batch.completed_at)).where(Batch.id.in_(list(batch_ids)))
        return float(conn.execute(query).scalar_one())


def _merge(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items()))
