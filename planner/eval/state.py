"""The simulated farm of the replay: elastic pools, the trace's batches, the stage queues and the accounting.

The handlers (`planner.eval.handlers`) change this state one event at a time, the loop asks it for the
policy's snapshot and applies the decision. Pools grow by workers that are ready a start-up later (each
its own draw of the start-up distribution, constant by default), and shrink by retiring workers still
starting, then idle workers at once, then busy ones as they finish their
request (the first to finish leaves first). A free worker takes the most urgent request of its stage
(EBF: the batch key of the latest decision, then queue time; FCFS: queue time), so queued requests are
re-ordered when a decision changes a key, as in the live queues.

Preemption (only while some tenant's share is reserved, `FairShare.reserve`), as the live farm's preempt.lua: when
a batch begins to wait at a stage, the stage is noticed; once a worker of it is busy, the notice is consumed and
`farm.protocol.shares.preempted` names the tenants whose running requests there are stopped, the one of each that
started last. A stopped request goes back to the head of its batch's queue with its queue time and order, its
worker is free at once (and serves the reserving tenant, as `eligible` then decides), and the stage's busy time
keeps only what it served.

A fixed-size cluster (`capacity`, off by default): a kind's workers, all of its stages' pools together
and retired ones still leaving included, never exceed its capacity. A worker asked for beyond it is
pending, as on a real cluster: it costs nothing and serves nothing, and it starts (its start-up from
then) once a worker of its kind is gone, in pool order.

Three optional physical effects, all off by default (`farm eval` models none), for `farm replay`'s
prediction of a live run with parameters measured on that run:

- start-up under load: a new worker is ready `startup + startup_per_start_s x n` later, n the workers
  still starting at that moment plus its rank among the decision's new workers (stage order): start-ups
  share the machine's CPUs and finish in turn.
- exit lag: a retired worker still exists for `retire_s` (an idle or starting one from its retirement, a
  busy one from the end of its request): allocated, no longer part of its pool, taking no request.
- dispatch latency: a request a free worker takes reaches it `dispatch_s` later (the queue's round trip),
  the worker held meanwhile; the request's stage ends `dispatch_s` + its time after it was taken.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from farm.knobs import Knobs
from farm.protocol.shares import FairShare, caps_bound, eligible, preempted
from planner.eval.kernel import EventQueue
from planner.eval.startup import Startup
from planner.eval.trace import Trace, TraceBatch
from planner.policy.capacity import UNBOUNDED, Capacity, within
from planner.policy.decide import RECENT_NEEDS
from planner.policy.snapshot import DONE, QUEUED, RUNNING, ActiveBatch, Decision, Need, Snapshot, StageState

# Event kinds, each also its priority at one instant: workers free up and arrive before requests are dispatched
FINISH, READY, OPEN, ARRIVE, TICK, LEAVE = range(6)


class Run(NamedTuple):
    """A request a busy worker serves: what a stop needs to put it back where it was queued (preemption)."""

    batch: Batch
    i: int  # the request's index in its batch
    k: int  # the stage
    started_at: float  # when the worker took it
    queued_at: float  # when it joined the stage's queue, kept when it is put back
    seq: int  # its order among requests queued at the same instant, kept too


@dataclass
class Pool:
    """The workers of one stage (of one task's own pools under `zq-dedicated`) and the requests they serve."""

    idle: int = 0
    busy: int = 0
    starting: dict = field(default_factory=dict)  # worker id -> ready time
    target: int = 0
    leaving: int = 0  # retired, not gone yet (exit lag): allocated, not in the pool
    queues: dict = field(default_factory=dict)  # batch index -> deque of (queued at, seq, request)
    held: dict = field(default_factory=dict)  # tenant -> its busy workers here (fair shares)
    running: dict = field(default_factory=dict)  # run id (dispatch order) -> Run: what the busy workers serve
    noticed: bool = False  # a batch began to wait here while a share is reserved: preemption is due (preempt.lua)

    @property
    def count(self) -> int:
        return self.idle + self.busy + len(self.starting)

    @property
    def allocated(self) -> int:
        return self.count + self.leaving


class Batch:
    """A trace batch under replay: per request, its current stage, state and since when (as the daemon sees)."""

    def __init__(self, index: int, tb: TraceBatch) -> None:
        order = np.argsort(tb.requests[:, 0], kind="stable")
        self.index, self.tb = index, tb
        self.id = f"{tb.task}/{tb.batch}"
        self.tenant = tb.tenant or "-"  # as farm.protocol.scope labels a batch opened outside any tenant's
        self.requests = tb.requests[order]  # in arrival order: the arrived ones are a prefix
        self.size = len(order)
        self.stage = np.zeros(self.size, dtype=np.int64)
        self.state = np.zeros(self.size, dtype=np.int8)
        self.since = np.zeros(self.size)
        self.served = np.zeros((self.size, self.requests.shape[1] - 1))  # time at each stage it has finished
        self.arrived = self.done = 0
        self.key = math.inf
        self.completed_at: float | None = None
        self.earliest = tb.start_s + float((self.requests[:, 0] + self.requests[:, 1:].sum(axis=1)).max())

    def next_stage(self, i: int, after: int) -> int:
        """The first stage after `after` that request i visits; -1 when it has none left."""
        times = self.requests[i, 1 + after + 1:]
        visited = np.flatnonzero(times > 0)
        return after + 1 + int(visited[0]) if len(visited) else -1


class FarmState:
    """Everything the replay's handlers share: the pools, the batches, the event queue and the metrics' sums."""

    def __init__(self, trace: Trace, knobs: Knobs, *, kind: str, pipeline: str, startup: Startup,
                 startup_rng: random.Random, startup_per_start_s: float, retire_s: float, policy_startup_s: float,
                 dispatch_s: float, capacity: Capacity = UNBOUNDED,
                 shares: dict[str, FairShare] | None = None) -> None:
        self.trace, self.knobs, self.kind, self.pipeline = trace, knobs, kind, pipeline
        self.capacity = capacity
        self.shares = dict(shares or {})  # tenant -> its fair share (farm.protocol.shares), 1 and no cap unless set
        self.reserved = {t for t, share in self.shares.items() if share.reserve}
        self.kinds = [s.resource for s in trace.stages]
        self.startup, self.startup_rng, self.startup_per_start_s = startup, startup_rng, startup_per_start_s
        self.retire_s, self.policy_startup_s, self.dispatch_s = retire_s, policy_startup_s, dispatch_s
        self.dedicated = kind == "zq-dedicated"
        self.m = len(trace.stages)
        self.queues = [f"{pipeline}.{s.name}" for s in trace.stages]
        self.batches = [Batch(i, tb) for i, tb in enumerate(trace.batches)]
        self.active: dict[int, Batch] = {}
        self.history: dict[str, np.ndarray] = {}  # task -> its latest completed batch's requests
        self.pools: dict[tuple[int, str | None], Pool] = {}  # (stage, task under zq-dedicated else None)
        self.events = EventQueue()
        self.ids = itertools.count()  # worker ids
        self.seq = itertools.count()  # queue order of requests queued at the same instant
        self.runs = itertools.count()  # run ids, in dispatch order: a stopped run's FINISH event is then ignored
        self.remaining = len(self.batches)
        # a replay that has not finished a day after the last arrival never will
        self.stall_at = max(b.tb.start_s + float(b.requests[:, 0].max()) for b in self.batches) + 86400.0
        for b in self.batches:
            self.events.push(b.tb.start_s, OPEN, b)
        self.t0 = min(b.tb.start_s for b in self.batches)
        self.events.push(self.t0, TICK, None)
        # the metrics' sums: allocated and busy worker-seconds per stage, pool sizes, decisions
        self.alloc = np.zeros(self.m)
        self.busy_s = np.zeros(self.m)
        self.preempted = np.zeros(self.m, dtype=np.int64)  # running requests stopped per stage (preemption)
        self.timeline: list[tuple[float, tuple[int, ...]]] = []
        self.decisions: list[tuple[float, float, int]] = []
        self.bound = 0  # decisions whose pools the capacity held below what they wanted
        self.last = self.t0
        self.last_counts: tuple[int, ...] | None = None
        self.recent: deque[Need] = deque(maxlen=RECENT_NEEDS)  # the policy's latest needs, passed back to it

    def pool(self, k: int, task: str) -> Pool:
        """The pool of stage k that serves `task` (one per stage unless zq-dedicated), made on first use."""
        key = (k, task if self.dedicated else None)
        if key not in self.pools:
            self.pools[key] = Pool()
        return self.pools[key]

    def counts(self) -> tuple[int, ...]:
        """Allocated workers per stage, all pools of a stage together."""
        out = [0] * self.m
        for (k, _), p in self.pools.items():
            out[k] += p.allocated
        return tuple(out)

    def account(self, now: float) -> None:
        """Add the workers allocated since the last event to the allocated worker-seconds."""
        self.alloc += np.asarray(self.counts()) * (now - self.last)
        self.last = now

    def record(self, now: float) -> None:
        """Note the pool sizes in the timeline when they changed."""
        c = self.counts()
        if c != self.last_counts:
            self.timeline.append((now, c))
            self.last_counts = c

    def room(self, k: int) -> float:
        """Workers of stage k's kind the cluster can still place (inf: no capacity for that kind)."""
        limit = self.capacity.limit(self.kinds[k])
        if limit is None:
            return math.inf
        return limit - sum(p.allocated for (j, _), p in self.pools.items() if self.kinds[j] == self.kinds[k])

    def place(self, now: float) -> None:
        """Start the pending workers that the workers gone since left room for, in pool order."""
        if not self.capacity.unbounded:
            self._start({key: p.target - p.count for key, p in self.pools.items() if p.count < p.target}, now)

    def outstanding(self) -> int:
        """Requests of the active batches not done yet: what the policy estimates."""
        return sum(b.size - b.done for b in self.active.values())

    def leave(self, p: Pool, n: int, now: float) -> None:
        """n workers retired from `p` at `now`: gone at once, or after the exit lag."""
        if n > 0 and self.retire_s > 0:
            p.leaving += n
            self.events.push(now + self.retire_s, LEAVE, (p, n))

    def enqueue(self, b: Batch, i: int, k: int, t: float) -> None:
        """Request i of `b` joins stage k's queue at `t`; the batch beginning to wait there notices the stage
        while a share is reserved, as the live enqueue leaves a notice for preempt.lua."""
        b.stage[i], b.state[i], b.since[i] = k, QUEUED, t
        p = self.pool(k, b.tb.task)
        q = p.queues.get(b.index)
        if not q:
            q = p.queues[b.index] = deque()
            if self.reserved:
                p.noticed = True
        q.append((t, next(self.seq), i))

    def release(self, p: Pool, now: float) -> None:
        """A busy worker of `p` is free: idle, or it retires when the pool is over its target (busy workers
        beyond it leave as they free up, the first to free up first)."""
        if p.count < p.target:
            p.idle += 1
        else:
            self.leave(p, 1, now)

    def finish_request(self, b: Batch, i: int, t: float) -> bool:
        """Request i of `b` is done at `t`; True when that completes its batch (a decision epoch)."""
        b.state[i], b.since[i] = DONE, t
        b.done += 1
        if b.done < b.size:
            return False
        b.completed_at = t
        self.history[b.tb.task] = b.requests
        del self.active[b.index]
        self.remaining -= 1
        return True

    def snapshot(self, now: float) -> Snapshot:
        """The farm as the daemon would see it at `now`."""
        stage_states = []
        for k, s in enumerate(self.trace.stages):
            here = [p for (j, _), p in self.pools.items() if j == k]
            stage_states.append(StageState(
                s.name, s.resource, s.cost, s.timeout_s, self.queues[k], workers=sum(p.count for p in here),
                starting=sum(len(p.starting) for p in here)))
        live = []
        for b in self.active.values():
            a = b.arrived
            live.append(ActiveBatch(
                id=b.id, task=b.tb.task, start_s=b.tb.start_s, size=b.size,
                key=b.key if math.isfinite(b.key) else math.nan,
                arrival=b.requests[:a, 0], stage=b.stage[:a], state=b.state[:a], since=b.since[:a],
                served=b.served[:a], oracle=b.requests if self.kind == "ideal" else None))
        return Snapshot(now=now, pipeline=self.pipeline, stages=tuple(stage_states), batches=tuple(live),
                        history=dict(self.history), startup_s=self.policy_startup_s, recent=tuple(self.recent),
                        capacity=within(self.capacity, caps_bound((b.tenant for b in self.active.values()),
                                                                  self.shares)))

    def apply(self, decision: Decision, now: float) -> None:
        """Take the decision's batch keys and resize the pools to its targets."""
        m, queues, pools = self.m, self.queues, self.pools
        if decision.need is not None:
            self.recent.append(decision.need)
        for b in self.active.values():
            b.key = decision.estimates.get(b.id, b.key)
        if self.dedicated:
            targets = {(k, task): d[queues[k]] for task, d in (decision.dedicated or {}).items() for k in range(m)}
            for key in list(pools):
                targets.setdefault(key, 0)
        else:
            targets = {(k, None): decision.workers[queues[k]] for k in range(m)}
        for (k, task), n in targets.items():
            p = pools.setdefault((k, task), Pool())
            p.target = int(n)
            if p.count > p.target:
                # the youngest first, as the live planner retires (planner.runtime.pools): workers still
                # starting (the latest to be ready first), then idle ones; a worker ready this instant is
                # idle until the dispatch that follows the decision, and keeping it is worth more than
                # keeping one that serves nobody yet
                for wid in sorted(p.starting, key=lambda w: -p.starting[w])[: p.count - p.target]:
                    del p.starting[wid]
                    self.leave(p, 1, now)
                idle = min(p.idle, max(p.count - p.target, 0))
                p.idle -= idle
                self.leave(p, idle, now)
                # busy workers beyond the target leave as they finish (see handlers.on_finish)
        self._start({key: pools[key].target - pools[key].count for key in targets
                     if pools[key].count < pools[key].target}, now)

    def _start(self, new: dict, now: float) -> None:
        """Start `new[key]` workers in pool `key`, as many as the capacity places (the rest pend)."""
        if not new:
            return
        pools = self.pools
        # start-ups share the CPUs: the j-th new worker of this decision is ready after those under way
        # and the j - 1 before it (in stage order, as the live planner spawns them)
        under_way = sum(len(p.starting) for p in pools.values()) if self.startup_per_start_s > 0 else 0
        j = 0
        for key, n in new.items():
            p = pools[key]
            if not self.capacity.unbounded:
                n = int(min(n, max(self.room(key[0]), 0)))
            for _ in range(n):
                j += 1
                ready_at = now + self.startup.draw(self.startup_rng) + self.startup_per_start_s * (under_way + j)
                if ready_at > now:
                    wid = next(self.ids)
                    p.starting[wid] = ready_at
                    self.events.push(ready_at, READY, (p, wid))
                else:
                    p.idle += 1

    def dispatch(self, now: float) -> None:
        """Every free worker takes the most urgent request queued at its stage; then a noticed stage with a busy
        worker decides preemption (the busy worker pops the notice) and its freed workers serve in turn."""
        for (k, _), p in self.pools.items():
            self._serve(k, p, now)
            # with no worker busy the notice waits for one; with nothing queued there is nothing to decide
            if p.noticed and p.busy > 0:
                p.noticed = False
                if p.queues and self._preempt(k, p, now):
                    self._serve(k, p, now)

    def _serve(self, k: int, p: Pool, now: float) -> None:
        """Every free worker of `p` takes the most urgent request queued there that the fair shares allow."""
        batches, events, dispatch_s = self.batches, self.events, self.dispatch_s
        ebf = self.knobs.scheduler == "ebf"
        while p.idle > 0 and p.queues:
            fair = self._fair(k, p)
            if fair is None:
                break  # only tenants at their cap wait: the worker stays free
            if ebf:
                bi = min(fair, key=lambda j: (batches[j].key, p.queues[j][0][0], p.queues[j][0][1]))
            else:
                bi = min(fair, key=lambda j: (p.queues[j][0][0], p.queues[j][0][1]))
            q = p.queues[bi]
            queued_at, seq, i = q.popleft()
            if not q:
                del p.queues[bi]
            b = batches[bi]
            b.state[i], b.since[i] = RUNNING, now
            p.idle -= 1
            p.busy += 1
            p.held[b.tenant] = p.held.get(b.tenant, 0) + 1
            s = float(b.requests[i, 1 + k])
            self.busy_s[k] += s
            run = next(self.runs)
            p.running[run] = Run(b, i, k, now, queued_at, seq)
            events.push(now + dispatch_s + s if dispatch_s > 0 else now + s, FINISH, (p, run))

    def _preempt(self, k: int, p: Pool, now: float) -> int:
        """Stop the running requests of `p` that a reserving tenant waiting there takes back (preempt.lua's
        decision, `farm.protocol.shares.preempted`); how many were stopped."""
        batches = self.batches
        # each tenant's requests waiting here, the most urgent first: the order of the live EBF zset's ZRANGE
        want: dict[str, int] = {}
        for j in sorted(p.queues, key=lambda j: (batches[j].key, batches[j].id)):
            want[batches[j].tenant] = want.get(batches[j].tenant, 0) + len(p.queues[j])
        kind = self.kinds[k]
        victims = preempted(want, self.shares, p.held, self._kind_use(kind), p.idle + p.busy, kind,
                            self._reserving(want))
        for tenant in victims:
            self._stop(p, tenant, now)
        return len(victims)

    def _stop(self, p: Pool, tenant: str, now: float) -> None:
        """Stop the request of `tenant` in `p` that started last (the least work lost; of equals the one taken
        last) and put it back at the head of its batch's queue, its queue time and order kept."""
        run_id = max((r for r, run in p.running.items() if run.batch.tenant == tenant),
                     key=lambda r: (p.running[r].started_at, r))
        b, i, k, started_at, queued_at, seq = p.running.pop(run_id)
        p.busy -= 1
        p.held[tenant] -= 1
        self.release(p, now)
        # the busy time counts what the worker served of it, not the rest: that is served when it runs again
        s = float(b.requests[i, 1 + k])
        self.busy_s[k] -= s - min(max(now - started_at - self.dispatch_s, 0.0), s)
        b.state[i], b.since[i] = QUEUED, queued_at
        p.queues.setdefault(b.index, deque()).appendleft((queued_at, seq, i))
        self.preempted[k] += 1

    def _kind_use(self, kind: str) -> dict[str, int]:
        """Each tenant's busy workers at every stage of resource `kind` (a tenant's cap is per kind)."""
        out: dict[str, int] = {}
        for (j, _), other in self.pools.items():
            if self.kinds[j] == kind:
                for t, n in other.held.items():
                    out[t] = out.get(t, 0) + n
        return out

    def _reserving(self, waiting) -> list[str]:
        """The tenants whose share is reserved with an open batch and nothing waiting in the pool (`waiting`).

        The replay's pipeline is one: every batch visits its stages, as a live batch lists its pipeline's queues."""
        if not self.reserved:
            return []
        return [t for t in dict.fromkeys(b.tenant for b in self.active.values())
                if t in self.reserved and t not in waiting]

    def _fair(self, k: int, p: Pool):
        """The batches queued in `p` a free worker may serve under the tenants' fair shares (all of them when one
        tenant waits, uncapped); None when only tenants at their cap of the stage's kind wait (pick.lua's rule)."""
        batches = self.batches
        waiting = list(dict.fromkeys(batches[j].tenant for j in p.queues))
        kind = self.kinds[k]
        reserving = self._reserving(waiting)  # a reserving tenant's share is held while it has an open batch
        if len(waiting) == 1 and self.shares.get(waiting[0], FairShare()).cap(kind) is None and not reserving:
            return p.queues
        ok = set(eligible(waiting, self.shares, p.held, self._kind_use(kind), p.idle + p.busy, kind, reserving))
        if not ok:
            return None
        return [j for j in p.queues if batches[j].tenant in ok]
