"""The policy in the loop: a discrete-event replay of a trace on elastic pools.

Decision epochs are those of the live daemon: a batch opens (the trainer's hint), a batch completes, and
a periodic tick (`knobs.tick_s`). Each calls `decide()` on a snapshot built exactly as the daemon would
see the farm. Pools grow by workers that are ready `startup_s` later, and shrink by retiring idle workers
at once, then workers still starting, then busy ones as they finish their request (the first to finish
leaves first). Requests take the trace's actual times. A free worker takes the most urgent request of
its stage (EBF: the batch key of the latest decision, then queue time; FCFS: queue time), so queued
requests are re-ordered when a decision changes a key, as in the live queues.

Three optional physical effects, all off by default (`farm eval` models none), for `farm replay`'s
prediction of a live run with parameters measured on that run:

- start-up under load: a new worker is ready `startup_s + startup_per_start_s x n` later, n the workers
  still starting at that moment plus its rank among the decision's new workers (stage order): start-ups
  share the machine's CPUs and finish in turn.
- exit lag: a retired worker still exists for `retire_s` (an idle or starting one from its retirement, a
  busy one from the end of its request): allocated, no longer part of its pool, taking no request.
- dispatch latency: a request a free worker takes reaches it `dispatch_s` later (the queue's round trip),
  the worker held meanwhile; the request's stage ends `dispatch_s` + its time after it was taken.
"""

from __future__ import annotations

import math
import random
import time as _clock
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from farm.knobs import Knobs
from planner.eval.kernel import EventQueue
from planner.eval.metrics import EvalResult
from planner.eval.trace import Trace
from planner.policy.decide import decide, parse_policy
from planner.policy.snapshot import DONE, QUEUED, RUNNING, ActiveBatch, Snapshot, StageState

STARTUP_PRESETS = {"paper": 0.0, "realistic": 30.0}  # seconds for a new worker to be ready
# event priorities at one instant: workers free up and arrive before requests are dispatched
_FINISH, _READY, _OPEN, _ARRIVE, _TICK, _LEAVE = 0, 1, 2, 3, 4, 5


@dataclass
class _Pool:
    idle: int = 0
    busy: int = 0
    starting: dict = field(default_factory=dict)  # worker id -> ready time
    target: int = 0
    leaving: int = 0  # retired, not gone yet (exit lag): allocated, not in the pool
    queues: dict = field(default_factory=dict)  # batch index -> deque of (queued at, seq, request)

    @property
    def count(self) -> int:
        return self.idle + self.busy + len(self.starting)

    @property
    def allocated(self) -> int:
        return self.count + self.leaving


class _Batch:
    def __init__(self, index: int, tb) -> None:
        order = np.argsort(tb.requests[:, 0], kind="stable")
        self.index, self.tb = index, tb
        self.id = f"{tb.task}/{tb.batch}"
        self.requests = tb.requests[order]  # in arrival order: the arrived ones are a prefix
        self.size = len(order)
        self.stage = np.zeros(self.size, dtype=np.int64)
        self.state = np.zeros(self.size, dtype=np.int8)
        self.since = np.zeros(self.size)
        self.arrived = self.done = 0
        self.key = math.inf
        self.completed_at: float | None = None
        self.earliest = tb.start_s + float((self.requests[:, 0] + self.requests[:, 1:].sum(axis=1)).max())

    def next_stage(self, i: int, after: int) -> int:
        times = self.requests[i, 1 + after + 1:]
        visited = np.flatnonzero(times > 0)
        return after + 1 + int(visited[0]) if len(visited) else -1


def evaluate(trace: Trace, knobs: Knobs, *, startup_s: float = 0.0, seed: int = 0, pipeline: str = "trace",
           progress: Callable[[float], None] | None = None, startup_per_start_s: float = 0.0,
           retire_s: float = 0.0, policy_startup_s: float | None = None, dispatch_s: float = 0.0) -> EvalResult:
    """Replay `trace` under `knobs` (policy, scheduler, D, tick); metrics as design.md defines them.

    A new worker is ready `startup_s + startup_per_start_s x (workers starting then + its rank in the
    decision)` later; a retired one exists `retire_s` longer; a request reaches its worker `dispatch_s`
    after it is taken (see the module's docstring). The defaults, `farm eval`'s model: a constant
    start-up, no exit lag, no dispatch latency. The policy is told a start-up of `policy_startup_s` (default: `startup_s`), as a live planner is told
    its configured or observed one."""
    if policy_startup_s is None:
        policy_startup_s = startup_s
    for name, value in (("startup_s", startup_s), ("startup_per_start_s", startup_per_start_s),
                        ("retire_s", retire_s), ("policy_startup_s", policy_startup_s), ("dispatch_s", dispatch_s)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
    if not trace.batches:
        raise ValueError("the trace has no batches to replay")
    m = len(trace.stages)
    kind, _ = parse_policy(knobs.policy, m)
    dedicated = kind == "zq-dedicated"
    rng = random.Random(seed)
    queues = [f"{pipeline}.{s.name}" for s in trace.stages]
    batches = [_Batch(i, tb) for i, tb in enumerate(trace.batches)]
    active: dict[int, _Batch] = {}
    history: dict[str, np.ndarray] = {}
    pools: dict[tuple[int, str | None], _Pool] = {}
    events = EventQueue()
    ids = iter(range(1 << 62))
    seq = iter(range(1 << 62))
    alloc = np.zeros(m)
    busy_s = np.zeros(m)
    timeline: list[tuple[float, tuple[int, ...]]] = []
    decisions: list[tuple[float, float, int]] = []
    stall_at = max(b.tb.start_s + float(b.requests[:, 0].max()) for b in batches) + 86400.0
    for b in batches:
        events.push(b.tb.start_s, _OPEN, b)
    t0 = min(b.tb.start_s for b in batches)
    events.push(t0, _TICK, None)
    remaining = len(batches)

    def pool(k: int, task: str) -> _Pool:
        key = (k, task if dedicated else None)
        if key not in pools:
            pools[key] = _Pool()
        return pools[key]

    def counts() -> tuple[int, ...]:
        out = [0] * m
        for (k, _), p in pools.items():
            out[k] += p.allocated
        return tuple(out)

    def leave(p: _Pool, n: int, now: float) -> None:
        """n workers retired from `p` at `now`: gone at once, or after the exit lag."""
        if n > 0 and retire_s > 0:
            p.leaving += n
            events.push(now + retire_s, _LEAVE, (p, n))

    def enqueue(b: _Batch, i: int, k: int, t: float) -> None:
        b.stage[i], b.state[i], b.since[i] = k, QUEUED, t
        p = pool(k, b.tb.task)
        p.queues.setdefault(b.index, deque()).append((t, next(seq), i))

    def finish_request(b: _Batch, i: int, t: float) -> bool:
        b.state[i], b.since[i] = DONE, t
        b.done += 1
        if b.done < b.size:
            return False
        b.completed_at = t
        history[b.tb.task] = b.requests
        del active[b.index]
        return True

    def snapshot(now: float) -> Snapshot:
        stage_states = []
        for k, s in enumerate(trace.stages):
            here = [p for (j, _), p in pools.items() if j == k]
            stage_states.append(StageState(
                s.name, s.resource, s.cost, s.timeout_s, queues[k], workers=sum(p.count for p in here),
                starting=sum(len(p.starting) for p in here)))
        live = []
        for b in active.values():
            a = b.arrived
            live.append(ActiveBatch(
                id=b.id, task=b.tb.task, start_s=b.tb.start_s, size=b.size,
                key=b.key if math.isfinite(b.key) else math.nan,
                arrival=b.requests[:a, 0], stage=b.stage[:a], state=b.state[:a], since=b.since[:a],
                oracle=b.requests if kind == "ideal" else None))
        return Snapshot(now=now, pipeline=pipeline, stages=tuple(stage_states), batches=tuple(live),
                        history=dict(history), startup_s=policy_startup_s)

    def apply(decision, now: float) -> None:
        for b in active.values():
            b.key = decision.estimates.get(b.id, b.key)
        if dedicated:
            targets = {(k, task): d[queues[k]] for task, d in (decision.dedicated or {}).items() for k in range(m)}
            for key in list(pools):
                targets.setdefault(key, 0)
        else:
            targets = {(k, None): decision.workers[queues[k]] for k in range(m)}
        for (k, task), n in targets.items():
            p = pools.setdefault((k, task), _Pool())
            p.target = int(n)
            if p.count > p.target:
                idle = min(p.idle, p.count - p.target)
                p.idle -= idle
                leave(p, idle, now)
                for wid in sorted(p.starting, key=lambda w: -p.starting[w])[: max(p.count - p.target, 0)]:
                    del p.starting[wid]
                    leave(p, 1, now)
                # busy workers beyond the target leave as they finish (see _FINISH)
        new = {key: pools[key].target - pools[key].count for key in targets if pools[key].count < pools[key].target}
        if not new:
            return
        # start-ups share the CPUs: the j-th new worker of this decision is ready after those under way
        # and the j - 1 before it (in stage order, as the live planner spawns them)
        under_way = sum(len(p.starting) for p in pools.values()) if startup_per_start_s > 0 else 0
        j = 0
        for key, n in new.items():
            p = pools[key]
            for _ in range(n):
                j += 1
                ready_at = now + startup_s + startup_per_start_s * (under_way + j)
                if ready_at > now:
                    wid = next(ids)
                    p.starting[wid] = ready_at
                    events.push(ready_at, _READY, (p, wid))
                else:
                    p.idle += 1

    def dispatch(now: float) -> None:
        for (k, _), p in pools.items():
            while p.idle > 0 and p.queues:
                if knobs.scheduler == "ebf":
                    bi = min(p.queues, key=lambda j: (batches[j].key, p.queues[j][0][0], p.queues[j][0][1]))
                else:
                    bi = min(p.queues, key=lambda j: (p.queues[j][0][0], p.queues[j][0][1]))
                q = p.queues[bi]
                _, _, i = q.popleft()
                if not q:
                    del p.queues[bi]
                b = batches[bi]
                b.state[i], b.since[i] = RUNNING, now
                p.idle -= 1
                p.busy += 1
                s = float(b.requests[i, 1 + k])
                busy_s[k] += s
                events.push(now + dispatch_s + s if dispatch_s > 0 else now + s, _FINISH, (p, b, i, k))

    now = t0
    last = t0
    last_counts: tuple[int, ...] | None = None
    while remaining and len(events):
        now = events.peek_time()
        alloc += np.asarray(counts()) * (now - last)
        last = now
        need_decision = False
        while len(events) and events.peek_time() == now:
            _, prio, ev = events.pop()
            if prio == _FINISH:
                p, b, i, k = ev
                p.busy -= 1
                if p.count < p.target:  # otherwise the pool is over its target: this worker retires
                    p.idle += 1
                else:
                    leave(p, 1, now)
                nxt = b.next_stage(i, k)
                if nxt >= 0:
                    enqueue(b, i, nxt, now)
                elif finish_request(b, i, now):
                    remaining -= 1
                    need_decision = True
            elif prio == _READY:
                p, wid = ev
                if p.starting.pop(wid, None) is not None:
                    p.idle += 1
            elif prio == _OPEN:
                b = ev
                active[b.index] = b
                for i in range(b.size):
                    events.push(b.tb.start_s + float(b.requests[i, 0]), _ARRIVE, (b, i))
                need_decision = True
            elif prio == _LEAVE:
                p, n = ev
                p.leaving -= n
            elif prio == _ARRIVE:
                b, i = ev
                b.arrived += 1
                first = b.next_stage(i, -1)
                if first >= 0:
                    enqueue(b, i, first, now)
                elif finish_request(b, i, now):  # visits no stage: done on arrival
                    remaining -= 1
                    need_decision = True
            else:  # _TICK
                need_decision = True
                if now > stall_at:
                    raise RuntimeError(f"replay stalled: {remaining} batches unfinished a day after the last arrival")
                events.push(now + knobs.tick_s, _TICK, None)
        if need_decision:
            snap = snapshot(now)
            started = _clock.perf_counter()
            decision = decide(snap, knobs, rng)
            decisions.append((now, _clock.perf_counter() - started, sum(b.size - b.done for b in active.values())))
            apply(decision, now)
            if progress is not None:
                progress(now)
        dispatch(now)
        c = counts()
        if c != last_counts:
            timeline.append((now, c))
            last_counts = c
    return EvalResult.build(trace, knobs, startup_s, batches, alloc, busy_s, timeline, decisions, now)
