"""Planning a replay: which part of the trace, the knobs on the compressed clock, each trainer's schedule.

Everything here is pure: the trace and the options in, what the trainers will do out, so the plan can be
checked without a farm.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from farm.knobs import Knobs
from farm.protocol.scope import tenant_label
from farm.protocol.shares import FairShare
from planner.eval.trace import Trace, TraceBatch
from planner.policy.capacity import UNBOUNDED, Capacity

PIPELINE = "synthetic"

# A decision takes the daemon tens of milliseconds on a loaded machine (snapshot, decide, apply) and the
# workers it sizes share the CPUs: a compressed run decides no more often than this, in real seconds.
MIN_LIVE_TICK_S = 0.5


class ReplayError(ValueError):
    """A replay that cannot run as asked; the message says why."""


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
    capacity: Capacity = UNBOUNDED  # the fixed cluster the prediction replays on (the run's, as its planner saw it)
    # the fair shares of the trace's tenants, by the trace's names (`farm eval --share`): published for the
    # run under the farm's labels (`tenant_ids`) and given to the prediction; a tenant not named has 1, no cap
    shares: Mapping[str, FairShare] = field(default_factory=dict)
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


# ------------------------------------------------------------------------------------------- selection


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


# ------------------------------------------------------------------------------------------- the tenants

NO_TENANT = "-"  # a trace batch's tenant that is none: the farm's own batches (farm.protocol.scope.tenant_label)
_LABEL = re.compile(r"t(0|[1-9][0-9]*)")  # a tenant's label, `t<id>` (farm.protocol.ids.TENANT_PREFIX less ':')


def tenant_ids(trace: Trace) -> dict[str, int]:
    """The live farm's tenant id of each tenant the trace's batches name: the one place where a trace's
    tenants become the farm's (a batch of tenant `n` is opened as `t<id>:...`, its share published under the
    label `t<id>`), so the measured per-tenant figures can be set beside `farm eval`'s, keyed by the names.

    A name that is a label, `t<digits>` (`farm status` shows tenants so), is that tenant; every other name gets
    the smallest id from 1 that no name takes, in the order the names first appear (batches by start). The
    name `-` is no tenant, as `farm eval` counts it. Deterministic: the same trace always maps the same way."""
    names = list(dict.fromkeys(b.tenant for b in trace.batches if b.tenant not in (None, NO_TENANT)))
    ids = {n: int(found.group(1)) for n in names if (found := _LABEL.fullmatch(n))}
    taken = set(ids.values())
    free = (i for i in itertools.count(1) if i not in taken)
    return {n: ids[n] if n in ids else next(free) for n in names}


def tenant_labels(trace: Trace) -> dict[str, str]:
    """The label the farm reports each of the trace's tenants under, by name (`-`: the farm's own batches)."""
    out = {name: tenant_label(i) for name, i in tenant_ids(trace).items()}
    if any(b.tenant in (None, NO_TENANT) for b in trace.batches):
        out[NO_TENANT] = NO_TENANT
    return out


def farm_shares(trace: Trace, shares: Mapping[str, FairShare]) -> dict[str, FairShare]:
    """The shares to publish, by the farm's label; a share for a tenant the trace does not name is refused (a
    typo would pass for a setting that changed nothing)."""
    labels = tenant_labels(trace)
    unknown = sorted(set(shares) - set(labels))
    if unknown:
        raise ReplayError(f"a share for {', '.join(map(repr, unknown))}, which the trace's batches do not name; "
                          f"its tenants: {', '.join(sorted(labels)) or 'none'}")
    return {labels[name]: share for name, share in shares.items()}


def split_tenants(trace: Trace, n: int) -> Trace:
    """The trace with its tasks divided between n tenants `t1`..`tn`: task k (name order, from 0) is tenant
    `t{k % n + 1}`'s, every batch of it."""
    tasks = trace.tasks
    if not 1 <= n <= len(tasks):
        raise ReplayError(f"--tenants must be 1 to the {len(tasks)} tasks replayed, not {n}")
    owner = {task: f"t{k % n + 1}" for k, task in enumerate(tasks)}
    return Trace(trace.stages, tuple(replace(b, tenant=owner[b.task]) for b in trace.batches))


# ------------------------------------------------------------------------------------------- the knobs


def replay_knobs(base: Knobs, trace: Trace, pipeline: str, speed: float, delay_s: float | None = None) -> Knobs:
    """The knobs on the compressed clock: timeouts, D and the tick divided by K; costs from the trace."""
    knobs = replace(base, delay_s=(base.delay_s if delay_s is None else delay_s) / speed, tick_s=base.tick_s / speed)
    for stage in trace.stages:
        knobs = knobs.with_stage(f"{pipeline}.{stage.name}", timeout_s=stage.timeout_s / speed, cost=stage.cost)
    return knobs


def trace_knobs(base: Knobs, trace: Trace, options: ReplayOptions) -> Knobs:
    """The knobs of the run in trace time (what the prediction uses): the base with the options' overrides,
    and a tick of at least `MIN_LIVE_TICK_S` once compressed."""
    changes = {k: v for k, v in (("policy", options.policy), ("scheduler", options.scheduler)) if v is not None}
    changes["tick_s"] = max(base.tick_s, MIN_LIVE_TICK_S * options.speed)
    return replay_knobs(replace(base, **changes), trace, options.pipeline, 1.0, options.delay_s)


# ------------------------------------------------------------------------------------------- the trainers' timelines


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


def due_together(events: Sequence[Arrival], i: int, elapsed: float) -> list[Arrival]:
    """The requests from `events[i]` on that one round trip sends: the next ones of the same batch that are
    due by `elapsed` seconds into the replay. One submit per request falls behind its schedule on a loaded
    machine (a round trip each, 50-250 ms while the workers start on 2 cores: batches arrived up to 30 s of
    trace time late); a trainer behind its schedule sends what is due at once, as a real one sends a step's
    responses, and the farm sees the trace's arrivals."""
    j = i + 1
    while j < len(events) and events[j].index >= 0 and events[j].batch is events[i].batch and events[j].at <= elapsed:
        j += 1
    return list(events[i:j])


def gather_timeout(batch: TraceBatch, speed: float, slack_s: float = 120.0) -> float:
    """How long a trainer waits for a batch: ten times its compressed T, plus slack for a loaded machine."""
    t = float((batch.arrivals + batch.times.sum(axis=1)).max())
    return 10.0 * t / speed + slack_s
