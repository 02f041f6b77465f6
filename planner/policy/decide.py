"""`decide(snapshot, knobs, rng)`: the planner's policy, the same for the live daemon and the evaluation.

Policies (`knobs.policy`):
- `distrs`: Algorithm 2 estimates, Algorithm 1 with the timeout-aware SIMULATE, the knobs' scheduler
  (EBF by default) simulated as dispatched, shared pools.
- `history`: the same without the timeout-aware check (Algorithm 1 on history alone).
- `ideal`: shared pools sized with the actual requests of the active batches (evaluation only).
- `zq-dedicated`: per task its own pools, each stage sized for zero queueing from the task's history:
  the most requests of the previous batch that ran there at once, held from the batch's first arrival
  (less the look-ahead, so the pool is ready) until it completes: the paper's batch-granularity baseline.
- `static:N1,N2,...`: fixed pools, one count per stage in pipeline order.

Algorithm 1 sizes a pool that is constant until every active batch is done. Decisions recur at least
every `knobs.tick_s`, so the pool needed *now* is only what that schedule keeps busy until the next
decision can take effect (`tick_s + startup_s`): that is the decision, and an idle rollout phase costs
nothing. The shorter the tick, the closer the pools follow that schedule: decisions take milliseconds, so
the default tick is one second. The same window is the cost comparison for an idle worker: kept through a
gap, it costs the gap; retired and replaced, the replacement is allocated for its whole start-up before
it serves. So a worker the schedule needs again within a start-up (plus the tick) is kept, and one idle
for longer is retired and its replacement started in time from the estimated arrivals (the cost per
second of a stage's worker is the same either way, so comparing the times is comparing the costs). Where
workers take a start-up, the pool follows the median need of the decisions of the last third of a
start-up (`_steady`): an estimate is a sample, and a need that one sample in a few shows would start
workers that are retired before they serve. Where a request the estimate did not foresee could wait
longer than D for the next decision's worker (`tick_s + startup_s > D`), estimating policies keep spare
workers at the stages that requests of batches in their end phase may still reach, as many as such
requests can take before a replacement could be ready and never more than may still arrive (`_reserve`).
A scale-down inside the tolerance band (the pool at most 10% over its need, as Kubernetes' replica
calculator tolerates; see `_band`) is skipped: no churn for a worker or two.

Within a capacity (`Snapshot.capacity`: the workers of each resource kind the cluster can run, its
stages of one kind sharing it) the policy plans with the pools that will really run. Where the pools an
estimating policy asks for fit the capacity (with an autoscaler whose nodes take time: where its plan's
N fits what is placeable now, `planner.policy.held.room`), the decision is the one without a capacity. Where they do not,
the capacity binds: Algorithm 1 searches again within
it (`search`'s bounds cut to the capacity, an autoscaler's workers beyond what is placeable now ready a
node start-up later), the decision is that search's, never above the capacity's `most`, and it names
each stage held below what it wants with the extra delay the capped plan expects (`Binding`). The
baselines ask for at most `most` too: `static` its pools cut in proportion, `zq-dedicated` every task's.

A task's first batch borrows the pipeline's other tasks' history; with none at all (a cold farm) see
`planner.policy.estimate` for the default. The EBF key of a batch is its T from Eq. 1-2 over its estimated
requests, each from when it entered its current queue (time spent waiting counts against D).
"""

from __future__ import annotations

import math
import random
import re

import numpy as np

from farm.knobs import Knobs
from planner.policy.capacity import fit
from planner.policy.estimate import estimate
from planner.policy.held import bindings, dedicated_within, extra_delays, fits, pools_within, room
from planner.policy.search import Plan, search
from planner.policy.simulate import peak_busy
from planner.policy.snapshot import DONE, RUNNING, ActiveBatch, Binding, Decision, Need, Snapshot, at_origin, from_now
from planner.policy.workload import Workload

POLICIES = ("distrs", "history", "ideal", "zq-dedicated", "static:N1,N2,...")
TOLERANCE = 0.1  # keep a pool up to 10% above its need rather than retire a worker or two
STEADY_SHARE = 1 / 3  # with start-ups, a pool follows the median need over this share of a start-up
RECENT_NEEDS = 64  # the latest needs a caller keeps for `Snapshot.recent`
_STATIC = re.compile(r"^static:(\d+(?:,\d+)*)$")


def parse_policy(name: str, stages: int | None = None) -> tuple[str, tuple[int, ...]]:
    """('distrs' | 'history' | 'ideal' | 'zq-dedicated' | 'static', counts for static)."""
    if name in ("distrs", "history", "ideal", "zq-dedicated"):
        return name, ()
    match = _STATIC.match(name or "")
    if not match:
        raise ValueError(f"unknown policy {name!r}; policies: {', '.join(POLICIES)}")
    counts = tuple(int(x) for x in match.group(1).split(","))
    if stages is not None and len(counts) != stages:
        raise ValueError(f"policy {name!r} names {len(counts)} pools but the pipeline has {stages} stages")
    return "static", counts


def _band(need: int, current: int, startup_s: float) -> int:
    """Keep a pool up to 10% over its need. Where a replacement costs a start-up, a small pool keeps
    one surplus worker too (retired now and needed again soon, it would be paid for twice); with
    instant start-ups churn costs nothing, and a pool of under 10 workers keeps none."""
    top = need * (1 + TOLERANCE)
    if startup_s > 0:
        top = math.ceil(top)
    if need > 0 and need <= current <= top:
        return current
    return need


def _steady(snapshot: Snapshot, need: dict[str, int], tick_s: float) -> dict[str, int]:
    """The median need per stage over this decision and those of the last `STEADY_SHARE` of a start-up
    (two ticks at least).

    An estimate is a sample: one decision in a few may draw a tail that asks for many more workers (or
    fewer), and the next one not. Where a new worker takes a start-up to be ready, following each sample
    starts workers that are retired before they serve, and retires ones needed a tick later. The median
    follows a need that persists about half the window later, a sixth of the start-up it waits for
    anyway (measured on the bundled colocated trace at 30 s: a fifth of a start-up gave 206k GPU-s, a
    third 203k and a half 203k, at about the same mean extra delay). With fewer than two earlier
    decisions in the window (after a quiet spell) the need stands.
    """
    window_s = max(2 * tick_s, STEADY_SHARE * snapshot.startup_s)
    window = [r for r in snapshot.recent if snapshot.now - window_s < r.at <= snapshot.now]
    if snapshot.startup_s <= 0 or len(window) < 2:
        return need
    return {q: int(np.median([n, *(r.workers.get(q, n) for r in window)])) for q, n in need.items()}


def _clamp(snapshot: Snapshot, knobs: Knobs, counts) -> dict[str, int]:
    out = {}
    for stage, n in zip(snapshot.stages, counts):
        bounds = knobs.stage(stage.queue)
        out[stage.queue] = int(min(max(int(n), bounds.min_workers), bounds.max_workers))
    return out


def _zero_queue_peaks(h: np.ndarray) -> np.ndarray:
    """Per stage, the most requests of a batch `[r_i, s_ij]` running at once when none ever waits."""
    times = h[:, 1:]
    start = h[:, 0:1] + np.concatenate([np.zeros((len(h), 1)), np.cumsum(times, axis=1)[:, :-1]], axis=1)
    out = np.zeros(times.shape[1], dtype=np.int64)
    for k in range(times.shape[1]):
        visit = times[:, k] > 0
        s = np.where(visit, start[:, k], np.nan)
        out[k] = peak_busy(s, s + times[:, k])
    return out


def _zq_batch(snapshot: Snapshot, b: ActiveBatch, lookahead: float) -> np.ndarray:
    m = len(snapshot.stages)
    live = b.state != DONE
    present = np.bincount(b.stage[live], minlength=m)[:m]  # never fewer than what is at each stage now
    h = snapshot.history.get(b.task)
    if h is None or not len(h):
        others = [np.asarray(v) for _, v in sorted(snapshot.history.items()) if len(v)]
        h = np.concatenate(others) if others else None
    if h is None:  # cold: zero queueing for what arrived, and a spare worker while requests are to come
        return present + (1 if b.outstanding > 0 else 0)
    first = b.start_s + float(np.min(h[:, 0]))
    if not len(b.arrival) and snapshot.now < first - lookahead:
        return np.zeros(m, dtype=np.int64)
    return np.maximum(_zero_queue_peaks(np.asarray(h, dtype=np.float64)), present)


def _reuse_s(snapshot: Snapshot) -> np.ndarray:
    """Per stage, how soon a spare taken by an unforeseen request is free again: the 90th percentile of
    the stage's time in the history, and never longer than a new worker takes to start (a spare used
    up is replaced that late). Without history a spare counts as used up until its replacement is
    ready (the worst case: more spares)."""
    m = len(snapshot.stages)
    out = np.full(m, snapshot.startup_s)
    rows = [np.asarray(h, dtype=np.float64) for _, h in sorted(snapshot.history.items()) if len(h)]
    if rows:
        h = np.concatenate(rows)
        for k in range(m):
            times = h[h[:, 1 + k] > 0, 1 + k]
            if len(times):
                out[k] = min(snapshot.startup_s, float(np.quantile(times, 0.9)))
    return out


def _reserve(snapshot: Snapshot, keys: np.ndarray, knobs: Knobs, cold: tuple[str, ...] = ()) -> np.ndarray:
    """Spare workers at each stage that a request of a batch in its end phase may still reach.

    The estimate cannot say which in-flight request goes on to a later stage nor when; near a batch's
    end such a request may be its critical one, and it waits for the next decision's worker: up to
    `tick_s + startup_s`. Within D that wait needs no spare. Beyond it, each stage that requests of
    batches in their end phase (due within the sum of the timeouts: any request still out may be
    critical) may still reach keeps spares: one, plus one per tick that a spare taken by such a
    request stays taken (`_reuse_s`: its stage time, at most a new worker's start-up). Never more
    than the requests that may still reach the stage: a spare nobody can take is waste. A cold batch
    (`cold`: no history anywhere) with requests still to come is not in its end phase, though its T
    always sits on the horizon (its estimate's spare arrival, now, runs to the timeouts): each stage
    keeps one spare for its next arrival, which may pass every stage quickly (issue 12: counting it
    held 31 idle GPU workers from a cold farm's first hint, before anything arrived; 6-7k GPU-s of a
    trace at 30 s start-ups).
    """
    m = len(snapshot.stages)
    if knobs.tick_s + snapshot.startup_s <= knobs.delay_s:
        return np.zeros(m, dtype=np.int64)
    horizon = float(snapshot.timeouts.sum())
    may = np.zeros(m, dtype=np.int64)  # requests of end-phase batches that may still arrive at each stage
    stages = np.arange(m)
    first = 0  # a spare per stage for a cold batch's next arrival, which may pass every stage quickly
    for b, key in zip(snapshot.batches, keys):
        if b.id in cold and b.outstanding > 0:  # its T is still to come (see above)
            first = 1
            continue
        if key - snapshot.now > horizon:
            continue
        live = b.state != DONE
        # a request queued at stage k, or anywhere before it, may still arrive there; one running at k holds its worker
        before = (b.stage[live][None, :] < stages[:, None]) | (
            (b.stage[live][None, :] == stages[:, None]) & (b.state[live][None, :] != RUNNING))
        may += b.outstanding + before.sum(axis=1)
    spares = 1 + np.ceil(_reuse_s(snapshot) / knobs.tick_s).astype(np.int64)
    return np.maximum(np.minimum(may, spares), first)


def _pools(snapshot: Snapshot, knobs: Knobs, kind: str, plan: Plan, w: Workload, cold) -> tuple[dict, list[int]]:
    """The need a plan gives (its window, plus the spares of `_reserve`) and the pools it decides now."""
    queues = [s.queue for s in snapshot.stages]
    if kind == "ideal":  # it knows every request: no spare worker for the unforeseen, no sample to steady
        need = {q: int(n) for q, n in zip(queues, plan.window)}
        steady = need
    else:
        need = {q: int(n + r) for q, n, r in zip(queues, plan.window, _reserve(snapshot, w.keys, knobs, cold))}
        steady = _steady(snapshot, need, knobs.tick_s)
    return need, [_band(steady[q], s.workers, snapshot.startup_s) for q, s in zip(queues, snapshot.stages)]


def decide(snapshot: Snapshot, knobs: Knobs, rng: random.Random) -> Decision:
    """The workers per stage and the EBF key of every active batch, from this snapshot alone; decided in
    seconds from `now` (`from_now`), so that a farm on the epoch's clock decides as one in trace time."""
    return at_origin(_decide(from_now(snapshot), knobs, rng), snapshot.now)


def _decide(snapshot: Snapshot, knobs: Knobs, rng: random.Random) -> Decision:
    kind, static = parse_policy(knobs.policy, len(snapshot.stages))
    lookahead = knobs.tick_s + snapshot.startup_s
    if not snapshot.batches:
        counts = static if kind == "static" else [0] * len(snapshot.stages)
        held, binding = pools_within(snapshot, knobs, _clamp(snapshot, knobs, counts), None)
        return Decision(held, {}, f"{kind}: no active batch", binding=binding)
    w, cold = estimate(snapshot, rng, oracle=(kind == "ideal"))
    estimates = {b.id: float(t) for b, t in zip(snapshot.batches, w.keys)}
    note = f" (cold default for {', '.join(cold)})" if cold else ""
    if kind == "static":
        held, binding = pools_within(snapshot, knobs, _clamp(snapshot, knobs, static), w)
        return Decision(held, estimates, f"static pools {static}{note}", binding=binding)
    if kind == "zq-dedicated":
        per_task: dict[str, np.ndarray] = {}
        for b in snapshot.batches:
            per_task[b.task] = per_task.get(b.task, 0) + _zq_batch(snapshot, b, lookahead)
        dedicated, binding = dedicated_within(
            snapshot, knobs, {task: _clamp(snapshot, knobs, n) for task, n in sorted(per_task.items())})
        totals = {s.queue: sum(d[s.queue] for d in dedicated.values()) for s in snapshot.stages}
        return Decision(totals, estimates, f"zq-dedicated: {len(dedicated)} tasks' own pools{note}", dedicated,
                        binding=binding)
    costs = [s.cost for s in snapshot.stages]
    args = dict(scheduler=knobs.scheduler, delay_s=knobs.delay_s, timeout_aware=(kind == "distrs"), lookahead_s=lookahead)
    plan = search(w, costs, **args)
    need, counts = _pools(snapshot, knobs, kind, plan, w, cold)
    workers = _clamp(snapshot, knobs, counts)
    kinds = [s.resource for s in snapshot.stages]
    wanted = [max(a, b) for a, b in zip(_clamp(snapshot, knobs, plan.workers).values(), workers.values())]
    binding: tuple[Binding, ...] = ()
    capacity = snapshot.capacity
    # on a fixed cluster the capacity binds when the pools asked for now do not fit (a plan's N above it
    # while its pools fit is re-planned by the decisions to come: N overshoots the pools that ever run);
    # with an autoscaler whose nodes take time, when its N does not fit what is placeable: the nodes are
    # asked for ahead
    check = [wanted] if capacity.node_startup_s > 0 else [list(workers.values())]
    if not capacity.unbounded and not fits(kinds, check, room(capacity)):
        # the capacity binds: the plan, its delay and the decision are those of the pools that can run
        plan = search(w, costs, capacity=capacity, resources=kinds, **args)
        need, counts = _pools(snapshot, knobs, kind, plan, w, cold)
        workers = dict(zip(workers, fit(list(_clamp(snapshot, knobs, counts).values()), kinds, capacity.most)))
        held = [max(a, b) for a, b in zip(_clamp(snapshot, knobs, plan.workers).values(), workers.values())]
        binding = bindings(snapshot, knobs, wanted, held, extra_delays(w, plan.completion))
    reason = (
        f"{kind}: N={list(plan.workers)} need={list(need.values())} now={counts} for "
        f"{len(snapshot.batches)} batches, {w.size} estimated requests, {plan.probes} simulations{note}"
    )
    if binding:
        reason += "; capacity binds: " + ", ".join(f"{b.queue} wants {b.wanted} holds {b.held}" for b in binding)
    return Decision(workers, estimates, reason, need=Need(snapshot.now, need), binding=binding)
