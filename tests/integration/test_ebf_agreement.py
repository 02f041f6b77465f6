"""The three implementations of the dispatch order serve the same queue in the same order.

docs/design.md (section 14, trap 1) requires that the policy's simulation dispatch as the live queues do: the
live farm picks in `farm/protocol/lua/pick.lua`, the policy simulates in `planner/policy/sweep.py` (through
`Simulator`), the replay dispatches in `planner/eval/state.py` (`FarmState.dispatch`). Each test here feeds
one queue to all three: batches with EBF keys, requests arriving at one stage in any order (several at one
instant too), one worker that is free from some moment and then serves one request at a time. A free
worker takes a request as soon as one waits, counting those that arrive at that very instant.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from farm import registry
from farm.config import Settings
from farm.knobs import Knobs
from farm.protocol.calls import open_call, submit_call
from farm.protocol.dispatch import Dispatch
from planner.eval.handlers import HANDLERS
from planner.eval.startup import Startup
from planner.eval.state import READY, TICK, FarmState
from planner.eval.trace import Trace, TraceBatch, TraceStage
from planner.policy.simulate import Simulator
from planner.policy.workload import single_stage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUEUE = "synthetic.compile"


@dataclass(frozen=True)
class Queue:
    """Batches by their EBF keys; requests as (batch, arrival, service time) in the order they are submitted
    (by arrival; at one instant, by batch, then as listed); one worker, free from `free_at`."""

    keys: tuple[float, ...]
    requests: tuple[tuple[int, float, float], ...]
    free_at: float

    @classmethod
    def of(cls, keys, requests, free_at: float = 0.0) -> "Queue":
        ordered = sorted(enumerate(requests), key=lambda ir: (ir[1][1], ir[1][0], ir[0]))
        return cls(tuple(keys), tuple(r for _, r in ordered), free_at)

    def ids(self) -> list[str]:
        return [f"r{i}" for i in range(len(self.requests))]


def live_order(q: Queue, scheduler: str, redis_url: str) -> list[str]:
    """pick.lua on the real Redis: requests are submitted as they arrive, the worker picks whenever it is free."""
    ns = f"t{uuid.uuid4().hex[:10]}"
    d = Dispatch(Settings(redis_url=redis_url, namespace=ns, lease_s=3600.0))
    synthetic = registry.get("synthetic")
    try:
        for b, key in enumerate(q.keys):
            size = sum(1 for rb, _, _ in q.requests if rb == b)
            if size:
                d.run(open_call("t", synthetic, size, f"b{b}", None, 0.0))
                assert d.set_estimate(f"b{b}", key)
        order: list[str] = []
        submitted, t = 0, q.free_at
        ids = q.ids()
        while len(order) < len(q.requests):
            if submitted == len(order):  # nothing waits: the worker idles until the next arrival
                t = max(t, q.requests[submitted][1])
            while submitted < len(q.requests) and q.requests[submitted][1] <= t:
                b, arrival, _ = q.requests[submitted]
                d.run(submit_call(d.settings, synthetic, f"b{b}", ids[submitted], {"times": [1, 0]}, None, arrival))
                submitted += 1
            picked = d.pick(QUEUE, "w", scheduler, f"token{len(order)}")
            order.append(picked[2])
            t += q.requests[ids.index(picked[2])][2]
        return order
    finally:
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"{ns}*", count=1000):
            client.delete(key)
        client.close()
        d.close()


def simulated_order(q: Queue, scheduler: str) -> list[str]:
    """SIMULATE's sweep (`sweep_ebf` / `sweep_fcfs`) with one worker, ready at `free_at`."""
    batch = [b for b, _, _ in q.requests]
    w = single_stage([a for _, a, _ in q.requests], [s for _, _, s in q.requests], 1e9, batch=batch,
                     keys=list(q.keys), deadlines=[1e9] * len(q.keys), now=q.free_at)
    starts = Simulator(w, scheduler=scheduler, timeout_aware=False).run([1], stop_early=False, detail=True).starts[0]
    ids = q.ids()
    return [ids[i] for i in np.argsort(starts, kind="stable")]


def replayed_order(q: Queue, scheduler: str) -> list[str]:
    """The replay's farm (`FarmState`) driven by its own handlers, without decisions: the keys stay as given."""
    own = {b: [i for i, (rb, _, _) in enumerate(q.requests) if rb == b] for b in range(len(q.keys))}
    batches = [TraceBatch("t", b, 0.0, [[q.requests[i][1], q.requests[i][2]] for i in own[b]])
               for b in range(len(q.keys)) if own[b]]
    trace = Trace(stages=(TraceStage("compile", "cpu", 1.0, 1e9),), batches=tuple(batches))
    farm = FarmState(trace, Knobs(scheduler=scheduler), kind="static", pipeline="trace", startup=Startup.fixed(0.0),
                     startup_rng=random.Random(0), startup_per_start_s=0.0, retire_s=0.0, policy_startup_s=0.0,
                     dispatch_s=0.0)
    for fb in farm.batches:
        fb.key = q.keys[fb.tb.batch]
    pool = farm.pool(0, "t")
    pool.target = 1
    pool.starting[0] = q.free_at
    farm.events.push(q.free_at, READY, (pool, 0))
    events = farm.events
    while farm.remaining:
        now = events.peek_time()
        while events.peek_time() == now:
            _, kind, event = events.pop()
            if kind != TICK:  # no decisions: nothing may change a key
                HANDLERS[kind](farm, now, event)
        farm.dispatch(now)
    ids = q.ids()
    done = [(fb.since[j], own[fb.tb.batch][j]) for fb in farm.batches for j in range(fb.size)]
    return [ids[i] for _, i in sorted(done)]


def orders(q: Queue, scheduler: str, redis_url: str) -> dict[str, list[str]]:
    return {"pick.lua": live_order(q, scheduler, redis_url), "sweep.py": simulated_order(q, scheduler),
            "state.py": replayed_order(q, scheduler)}


def test_a_later_batch_with_an_earlier_key_overtakes_requests_already_waiting(redis_url):
    q = Queue.of(keys=[50.0, 20.0], requests=[(0, 0.0, 1.0), (0, 1.0, 1.0), (1, 2.0, 1.0), (1, 2.0, 1.0)],
                 free_at=3.0)
    assert orders(q, "ebf", redis_url) == dict.fromkeys(("pick.lua", "sweep.py", "state.py"), ["r2", "r3", "r0", "r1"])


def test_fcfs_serves_in_arrival_order_whatever_the_keys(redis_url):
    q = Queue.of(keys=[50.0, 20.0], requests=[(0, 0.0, 1.0), (1, 0.5, 1.0), (0, 1.0, 1.0), (1, 1.5, 1.0)],
                 free_at=3.0)
    assert orders(q, "fcfs", redis_url) == dict.fromkeys(("pick.lua", "sweep.py", "state.py"), ["r0", "r1", "r2", "r3"])


def test_a_request_arriving_while_the_worker_is_busy_waits_its_turn_by_key(redis_url):
    # r0 starts at once (nothing else waits); r1 (key 30) and r2 (key 10) arrive while it runs: r2 goes first
    q = Queue.of(keys=[30.0, 10.0], requests=[(0, 0.0, 5.0), (0, 1.0, 1.0), (1, 2.0, 1.0)])
    assert orders(q, "ebf", redis_url) == dict.fromkeys(("pick.lua", "sweep.py", "state.py"), ["r0", "r2", "r1"])


TIMES = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0])  # a coarse grid: requests arrive together


@st.composite
def queues(draw) -> Queue:
    n_batches = draw(st.integers(1, 4))
    key = st.sampled_from([10.0, 20.0, 30.0, 40.0, 55.5, 70.0])
    keys = draw(st.lists(key, min_size=n_batches, max_size=n_batches))  # equal keys too
    requests = draw(st.lists(st.tuples(st.integers(0, n_batches - 1), TIMES, st.sampled_from([0.5, 1.0, 2.0, 4.0])),
                             min_size=1, max_size=12))
    return Queue.of(keys, requests, free_at=draw(st.sampled_from([0.0, 1.0, 4.0, 20.0])))


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=queues(), scheduler=st.sampled_from(["ebf", "fcfs"]))
def test_the_three_serve_any_queue_in_one_order_equal_keys_too(redis_url, q, scheduler):
    got = orders(q, scheduler, redis_url)
    assert got["pick.lua"] == got["sweep.py"] == got["state.py"], got


def test_batches_with_equal_keys_are_served_in_one_order_by_all_three(redis_url):
    # b1's request waits from 0, b0's from 0.5, both keyed 10: b1's head entered first, so b1 goes first (a sorted
    # set alone would order them by batch id, b0 first)
    q = Queue.of(keys=[10.0, 10.0], requests=[(1, 0.0, 0.5), (0, 0.5, 0.5)], free_at=1.0)
    got = orders(q, "ebf", redis_url)
    assert got["pick.lua"] == got["sweep.py"] == got["state.py"], got
