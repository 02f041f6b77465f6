"""The policy in the loop: a discrete-event replay of a trace on elastic pools.

Decision epochs are those of the live daemon: a batch opens (the trainer's hint), a batch completes, and
a periodic tick (`knobs.tick_s`). Each calls `decide()` on a snapshot built exactly as the daemon would
see the farm. Requests take the trace's actual times. The loop is SimPy's: pop every event of an
instant and hand it to its handler (`planner.eval.handlers`), decide if one of them was an epoch, then
let free workers take queued requests. The simulated farm itself, with its optional physical effects
(start-up under load, exit lag, dispatch latency), is `planner.eval.state`.
"""

from __future__ import annotations

import math
import random
import time as _clock
from typing import Callable

from farm.knobs import Knobs
from farm.protocol.shares import FairShare
from planner.eval.handlers import HANDLERS
from planner.eval.metrics import EvalResult
from planner.eval.startup import Startup
from planner.eval.state import FarmState
from planner.eval.trace import Trace
from planner.policy.capacity import UNBOUNDED, Capacity
from planner.policy.decide import decide, parse_policy


def evaluate(trace: Trace, knobs: Knobs, *, startup_s: float = 0.0, seed: int = 0, pipeline: str = "trace",
             progress: Callable[[float], None] | None = None, startup_per_start_s: float = 0.0,
             retire_s: float = 0.0, policy_startup_s: float | None = None, dispatch_s: float = 0.0,
             startup: Startup | None = None, capacity: Capacity = UNBOUNDED,
             shares: dict[str, FairShare] | None = None) -> EvalResult:
    """Replay `trace` under `knobs` (policy, scheduler, D, tick); metrics as docs/design.md defines them.

    A new worker is ready `startup_s + startup_per_start_s x (workers starting then + its rank in the
    decision)` later; a retired one exists `retire_s` longer; a request reaches its worker `dispatch_s`
    after it is taken (see `planner.eval.state`). The defaults, `farm eval`'s model: a constant start-up,
    no exit lag, no dispatch latency. `startup` (a distribution) replaces `startup_s`: each new worker
    draws its own, from a stream seeded by `seed` apart from the policy's. The policy is told a start-up
    of `policy_startup_s` (default: the distribution's `plan_s`, its 90th percentile), as a live planner
    is told the one its workers' lives show. `capacity` makes the farm a fixed-size cluster (see
    `planner.eval.state`), and the policy is told it, as a live planner is by its backend. `shares`: the
    fair shares of the trace's tenants (its batches' `tenant`; farm.protocol.shares), 1 each and no cap
    unless given."""
    if startup is None:
        if not (isinstance(startup_s, (int, float)) and math.isfinite(startup_s) and startup_s >= 0):
            raise ValueError(f"startup_s must be a finite number >= 0, not {startup_s!r}")
        startup = Startup.fixed(startup_s)
    if policy_startup_s is None:
        policy_startup_s = startup.plan_s
    for name, value in (("startup_per_start_s", startup_per_start_s),
                        ("retire_s", retire_s), ("policy_startup_s", policy_startup_s), ("dispatch_s", dispatch_s)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
    if not trace.batches:
        raise ValueError("the trace has no batches to replay")
    kind, _ = parse_policy(knobs.policy, len(trace.stages))
    farm = FarmState(trace, knobs, kind=kind, pipeline=pipeline, startup=startup,
                     startup_rng=random.Random(f"startup-{seed}"),
                     startup_per_start_s=startup_per_start_s, retire_s=retire_s, policy_startup_s=policy_startup_s,
                     dispatch_s=dispatch_s, capacity=capacity, shares=shares)
    rng = random.Random(seed)
    events = farm.events
    now = farm.t0
    while farm.remaining and len(events):
        now = events.peek_time()
        farm.account(now)
        epoch = False
        while len(events) and events.peek_time() == now:
            _, event_kind, event = events.pop()
            if HANDLERS[event_kind](farm, now, event):
                epoch = True
        if epoch:
            snapshot = farm.snapshot(now)
            started = _clock.perf_counter()
            decision = decide(snapshot, knobs, rng)
            farm.decisions.append((now, _clock.perf_counter() - started, farm.outstanding()))
            farm.bound += bool(decision.binding)
            farm.apply(decision, now)
            if progress is not None:
                progress(now)
        farm.place(now)
        farm.dispatch(now)
        farm.record(now)
    return EvalResult.build(trace, knobs, startup, farm.batches, farm.alloc, farm.busy_s, farm.timeline,
                            farm.decisions, now, capacity=capacity, bound=farm.bound,
                            preempted=tuple(int(n) for n in farm.preempted) if farm.reserved else None)
