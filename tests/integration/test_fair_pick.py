"""pick.lua divides a stage's workers between tenants by the rule of farm.protocol.shares, as the replay does.

Each case lays out one stage queue on the real Redis: tenants' batches with EBF keys, one request waiting in
each, the workers each tenant holds at this stage and at another stage of the same kind, the roster and the
tenants' shares; then one free worker picks. The batch it takes is the one `eligible` and the scheduler
order choose in Python.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from farm import registry
from farm.config import Settings
from farm.protocol import roster
from farm.protocol.calls import finish_call, open_call, submit_call
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import Keys, QueuePart
from farm.protocol.shares import FairShare, eligible
from farm.results import Result, Status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUEUE = "synthetic.compile"
OTHER = "synthetic.other"  # another stage queue of the same kind: a cap counts the tenant's workers there too


def _tenant(label: str) -> str:
    return "" if label == "-" else f"{label}:"


@pytest.fixture
def farm(script_dispatch):
    return script_dispatch


def lay_out(d: Dispatch, batches, busy, other_busy, roster: int, shares, idle_open=(), size: int = 1) -> None:
    """`batches`: (tenant, EBF key) in submit order, one request waiting in each (of `size`); `busy`/`other_busy`:
    tenant -> its workers at QUEUE/OTHER; `idle_open`: tenants with an open batch of nothing submitted yet."""
    synthetic = registry.get("synthetic")
    keys = Keys(d.settings.namespace)
    for n, (tenant, key) in enumerate(batches):
        bid = f"{_tenant(tenant)}b{n}"
        d.run(open_call("t", synthetic, size, bid, None, 0.0))
        assert d.set_estimate(bid, key)
        d.run(submit_call(d.settings, synthetic, bid, "r", {"times": [1, 0]}, None, float(n)))
    for tenant in idle_open:
        d.run(open_call("t", synthetic, 1, f"{_tenant(tenant)}idle", None, 0.0))
    r, now = d.redis, time.time()
    for queue, held in ((QUEUE, busy), (OTHER, other_busy)):
        w = 0
        for tenant, n in held.items():
            for _ in range(n):
                w += 1
                r.hset(keys.queue(queue, QueuePart.busy), f"{queue}-w{w}",
                       json.dumps({"batch": f"{_tenant(tenant)}running", "request": "x", "started_at": now,
                                   "token": f"tok{w}"}))
    for w in range(roster):
        r.hset(keys.queue(QUEUE, QueuePart.seen), f"{QUEUE}-w{w + 1}", repr(now))
    for tenant, share in shares.items():
        r.hset(keys.shares, tenant, share.encode())


def expected(batches, busy, other_busy, roster: int, shares, idle_open=()) -> str | None:
    waiting = [t for t, _ in batches]
    kind_use = {t: busy.get(t, 0) + other_busy.get(t, 0) for t in set(busy) | set(other_busy)}
    workers = max(roster, sum(busy.values()) + 1)
    reserving = [t for t in idle_open if shares.get(t, FairShare()).reserve]
    ok = eligible(waiting, shares, busy, kind_use, workers, "cpu", reserving)
    fair = [(key, n) for n, (t, key) in enumerate(batches) if t in ok]
    if not fair:
        return None
    _, n = min(fair)  # equal keys: the one whose head came first (submitted in batch order)
    return f"{_tenant(batches[n][0])}b{n}"


@st.composite
def layouts(draw):
    labels = draw(st.lists(st.sampled_from(["t1", "t2", "t3", "-"]), min_size=1, max_size=3, unique=True))
    batches = [(draw(st.sampled_from(labels)), float(draw(st.integers(0, 4)))) for _ in range(draw(st.integers(1, 5)))]
    busy = {t: draw(st.integers(0, 3)) for t in labels}
    other_busy = {t: draw(st.integers(0, 2)) for t in labels}
    shares = {t: FairShare(draw(st.sampled_from([0.5, 1.0, 2.0])), draw(st.sampled_from([{}, {"cpu": 2},
                                                                                          {"cpu": 4}, {"gpu": 1}])),
                           draw(st.booleans()))
              for t in labels if draw(st.booleans())}
    roster = draw(st.integers(0, sum(busy.values()) + 4))
    idle_open = [t for t in labels if t != "-" and draw(st.booleans())]  # an open batch with nothing waiting
    return batches, busy, other_busy, roster, shares, idle_open


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layouts())
def test_the_live_pick_serves_the_batch_the_fair_share_rule_chooses(redis_url, layout):
    batches, busy, other_busy, roster, shares, idle_open = layout
    ns = f"fp{uuid.uuid4().hex[:10]}"
    d = Dispatch(Settings(redis_url=redis_url, namespace=ns, lease_s=3600.0))
    try:
        lay_out(d, batches, busy, other_busy, roster, shares, idle_open)
        reply = d.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE, OTHER))
        picked = reply[1] if len(reply) > 1 else None
        assert picked == expected(batches, busy, other_busy, roster, shares, idle_open), layout
    finally:
        for key in d.redis.scan_iter(match=f"{ns}*", count=1000):
            d.redis.delete(key)
        d.close()


def test_a_flooding_tenant_over_its_share_yields_the_free_worker_to_the_other(farm):
    # t2's batch is the more urgent, but t2 holds three of four workers
    lay_out(farm, [("t2", 1.0), ("t1", 9.0)], {"t2": 3}, {}, 4, {})
    assert farm.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE,))[1] == "t1:b1"


def stale(farm, workers, leases: float) -> None:
    """The roster's entries of `workers` beat `leases` lease times ago."""
    keys = Keys(farm.settings.namespace)
    for w in workers:
        farm.redis.hset(keys.queue(QUEUE, QueuePart.seen), w, repr(time.time() - leases * farm.settings.lease_s))


IDLE_THREE = [f"{QUEUE}-w{w}" for w in (2, 3, 4)]  # lay_out's roster of 4 where one worker is busy


def test_an_idle_worker_that_beat_two_leases_ago_still_counts_among_the_workers_to_divide(farm):
    # of 4 workers t2 holds 1, under its half: its more urgent batch is served (of 2, t1's would be)
    lay_out(farm, [("t2", 1.0), ("t1", 9.0)], {"t2": 1}, {}, 4, {})
    stale(farm, IDLE_THREE, 2.0)  # an idle worker on an idle farm beats once a lease: two missed beats
    assert expected([("t2", 1.0), ("t1", 9.0)], {"t2": 1}, {}, 1, {}) == "t1:b1"
    assert farm.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE,))[1] == "t2:b0"


def test_an_idle_worker_silent_past_the_rosters_freshness_no_longer_counts(farm):
    lay_out(farm, [("t2", 1.0), ("t1", 9.0)], {"t2": 1}, {}, 4, {})
    stale(farm, IDLE_THREE, roster.FRESH_LEASES + 0.5)
    assert farm.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE,))[1] == "t1:b1"


def test_with_one_tenant_waiting_the_pick_is_plain_ebf(farm):
    lay_out(farm, [("t2", 5.0), ("t2", 1.0)], {"t2": 3}, {}, 4, {})
    assert farm.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE,))[1] == "t2:b1"


def finish(farm, bid: str, token: str, worker: str) -> None:
    result = Result("r", bid, Status.OK, 1.0, "", finished_at=time.time())
    farm.run(finish_call(result, token, worker, QUEUE, json.dumps({"kind": "stage_done"})))


def test_a_queue_left_waiting_for_a_cap_is_woken_when_a_worker_is_released(farm):
    keys = Keys(farm.settings.namespace)
    lay_out(farm, [("t1", 1.0), ("t1", 2.0)], {}, {}, 2, {"t1": FairShare(max_workers={"cpu": 1})})
    first = farm.pick(QUEUE, "w1", "ebf", "tok1", "cpu", (QUEUE,))
    assert first[1] == "t1:b0"
    assert len(farm.pick(QUEUE, "w2", "ebf", "tok2", "cpu", (QUEUE,))) == 1  # t1 is at its cap
    assert farm.redis.hget(keys.held, QUEUE) == "1"
    tokens = farm.redis.llen(keys.broker(QUEUE))
    finish(farm, "t1:b0", "tok1", "w1")
    assert not farm.redis.hexists(keys.held, QUEUE)
    if farm.lua_tokens:
        assert farm.redis.llen(keys.broker(QUEUE)) == tokens + 1
    assert farm.pick(QUEUE, "w2", "ebf", "tok3", "cpu", (QUEUE,))[1] == "t1:b1"


def test_every_token_a_capped_pick_swallowed_is_handed_back_one_release_at_a_time(farm):
    # three of t1's requests, a cap of one: two picks find t1 at its cap; each of the next two releases hands back
    # one token, so the last request is not left without one (a wake-up lost would leave it to the idle check)
    keys = Keys(farm.settings.namespace)
    # (batches of two, one submitted: none ends, which would hand every token back)
    lay_out(farm, [("t1", 1.0), ("t1", 2.0), ("t1", 3.0)], {}, {}, 3, {"t1": FairShare(max_workers={"cpu": 1})},
            size=2)
    assert farm.pick(QUEUE, "w1", "ebf", "tok1", "cpu", (QUEUE,))[1] == "t1:b0"
    for worker in ("w2", "w3"):
        assert len(farm.pick(QUEUE, worker, "ebf", f"tok-{worker}", "cpu", (QUEUE,))) == 1
    assert farm.redis.hget(keys.held, QUEUE) == "2"
    finish(farm, "t1:b0", "tok1", "w1")
    assert farm.redis.hget(keys.held, QUEUE) == "1"
    assert farm.pick(QUEUE, "w2", "ebf", "tok2", "cpu", (QUEUE,))[1] == "t1:b1"
    finish(farm, "t1:b1", "tok2", "w2")
    assert not farm.redis.hexists(keys.held, QUEUE)
    assert farm.pick(QUEUE, "w3", "ebf", "tok3", "cpu", (QUEUE,))[1] == "t1:b2"


def test_a_share_that_does_not_decode_counts_as_the_default_and_picks_go_on(farm):
    lay_out(farm, [("t1", 1.0)], {}, {}, 1, {})
    farm.redis.hset(Keys(farm.settings.namespace).shares, "t1", "{not json")
    farm.redis.hset(Keys(farm.settings.namespace).shares, "t2", '{"w": -3, "cap": {"cpu": "x"}}')
    assert farm.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE,))[1] == "t1:b0"


@pytest.mark.parametrize("retiring, served", [(0, "t2:b0"), (1, "t1:b1")])
def test_a_worker_whose_warm_shutdown_began_is_not_among_the_workers_divided(farm, retiring, served):
    # five workers, t2 holding two: t2 is entitled to 2.5 and, under it, wins by its earlier key; with one idle
    # worker retiring there are four, t2 is entitled to two and the free worker serves t1
    lay_out(farm, [("t2", 1.0), ("t1", 9.0)], {"t2": 2}, {}, 5, {})
    for w in range(retiring):
        roster.retiring(farm.redis, Keys(farm.settings.namespace), QUEUE, f"{QUEUE}-w{5 - w}", time.time())
    assert farm.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE,))[1] == served


def test_a_worker_is_held_for_a_reserving_tenant_with_an_open_batch_and_handed_back_when_it_ends(farm):
    # four workers, t2 holds two: t1's reserved share of two is held for it while its batch is open, though
    # nothing of t1's waits; once that batch ends, the worker serves t2
    keys = Keys(farm.settings.namespace)
    lay_out(farm, [("t2", 1.0)], {"t2": 2}, {}, 4, {"t1": FairShare(reserve=True)}, idle_open=["t1"])
    assert len(farm.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE,))) == 1
    assert farm.redis.hget(keys.held, QUEUE) == "1"
    tokens = farm.redis.llen(keys.broker(QUEUE))
    assert farm.cancel("t1:idle") == "cancelled"
    assert not farm.redis.hexists(keys.held, QUEUE)
    if farm.lua_tokens:
        assert farm.redis.llen(keys.broker(QUEUE)) == tokens + 1
    assert farm.pick(QUEUE, "free", "ebf", "tok2", "cpu", (QUEUE,))[1] == "t2:b0"


def test_a_tenant_that_does_not_reserve_its_share_leaves_it_to_the_others_while_nothing_of_it_waits(farm):
    lay_out(farm, [("t2", 1.0)], {"t2": 2}, {}, 4, {}, idle_open=["t1"])
    assert farm.pick(QUEUE, "free", "ebf", "tok", "cpu", (QUEUE,))[1] == "t2:b0"
