"""preempt.lua stops the running requests farm.protocol.shares.preempted names, on the real Redis, and puts each
back at the head of its batch without counting a lost worker; the submit scripts leave the stage's notice only
while some tenant's share is reserved."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings as hypothesis_settings, strategies as st

from farm import registry
from farm.app import fair_shares
from farm.config import Settings
from farm.protocol import counters
from farm.protocol.calls import open_call, submit_call
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import Keys, QueuePart
from farm.protocol.shares import FairShare, preempted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUEUE = "synthetic.compile"
R = FairShare(reserve=True)


def _bid(tenant: str, n: int) -> str:
    return f"{tenant}:b{n}"


@pytest.fixture
def farm(script_dispatch):
    return script_dispatch


def submit(d: Dispatch, bid: str, requests: int, key: float) -> None:
    synthetic = registry.get("synthetic")
    d.run(open_call("t", synthetic, requests, bid, None, 0.0))
    assert d.set_estimate(bid, key)
    for r in range(requests):
        d.run(submit_call(d.settings, synthetic, bid, f"r{r}", {"times": [1, 0]}, None, time.time()))


def lay_out(d: Dispatch, waiting, busy, idle: int, shares) -> dict[str, str]:
    """`waiting`: tenant -> (requests waiting, EBF key), one batch each; `busy`: tenant -> its running requests
    (fake records, started one second apart); `idle`: free workers on the roster. Returns worker -> tenant."""
    keys, r, now = Keys(d.settings.namespace), d.redis, time.time()
    fair_shares.put(r, d.settings.namespace, shares)
    owner, w = {}, 0
    for tenant, n in busy.items():
        for _ in range(n):
            w += 1
            name = f"{QUEUE}-w{w}"
            owner[name] = tenant
            r.hset(keys.queue(QUEUE, QueuePart.busy), name, json.dumps(
                {"batch": f"{tenant}:running", "request": "x", "started_at": now - w, "token": f"tok{w}"}))
            r.hset(keys.queue(QUEUE, QueuePart.seen), name, repr(now))
    for i in range(idle):
        r.hset(keys.queue(QUEUE, QueuePart.seen), f"{QUEUE}-idle{i}", repr(now))
    for n, (tenant, (count, key)) in enumerate(waiting.items()):
        if count:
            submit(d, _bid(tenant, n), count, key)
    return owner


@st.composite
def layouts(draw):
    labels = ["t1", "t2", "t3"]
    waiting = {t: (draw(st.integers(0, 3)), float(draw(st.integers(0, 3)))) for t in labels}
    busy = {t: draw(st.sampled_from([0, 0, 1, 2, 3])) for t in labels}
    shares = {t: FairShare(draw(st.sampled_from([0.5, 1.0, 2.0])), draw(st.sampled_from([{}, {"cpu": 2}])),
                           draw(st.booleans())) for t in labels if draw(st.booleans())}
    return waiting, busy, draw(st.integers(0, 2)), shares


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layouts())
# one worker for two tenants: taking it would put its tenant under its own share
@example(({"t1": (1, 0.0), "t2": (0, 0.0), "t3": (0, 0.0)}, {"t1": 0, "t2": 1, "t3": 0}, 0, {"t1": R}))
# a reserving tenant at its cap, under its entitlement: it stops nothing
@example(({"t1": (2, 0.0), "t2": (1, 0.0), "t3": (0, 0.0)}, {"t1": 2, "t2": 4, "t3": 0}, 0,
          {"t1": FairShare(max_workers={"cpu": 2}, reserve=True)}))
def test_the_script_stops_the_tenants_the_rule_names(redis_url, layout):
    waiting, busy, idle, shares = layout
    ns = f"pe{uuid.uuid4().hex[:10]}"
    d = Dispatch(Settings(redis_url=redis_url, namespace=ns, lease_s=3600.0))
    try:
        owner = lay_out(d, waiting, busy, idle, shares)
        stopped = d.preempt(QUEUE, "cpu", (QUEUE,)).stopped
        # the rule's tenants in the stage's EBF order: by key, then by batch id
        order = sorted(((key, _bid(t, n)), t) for n, (t, (count, key)) in enumerate(waiting.items()) if count)
        want = {t: waiting[t][0] for _, t in order}
        assert sorted(owner[w] for w in stopped) == sorted(preempted(want, shares, busy, busy,
                                                                      sum(busy.values()) + idle, "cpu")), layout
        # of a tenant, the request that started last goes first
        for w in stopped:
            later = [x for x, t in owner.items()
                     if t == owner[w] and int(x.rsplit("w", 1)[1]) < int(w.rsplit("w", 1)[1])]
            assert all(x in stopped for x in later), layout
    finally:
        for key in d.redis.scan_iter(match=f"{ns}*", count=1000):
            d.redis.delete(key)
        d.close()


def test_a_stopped_request_goes_back_to_the_head_of_its_batch_without_counting_a_lost_worker(farm):
    keys = Keys(farm.settings.namespace)
    submit(farm, "t2:flood", 3, 1.0)
    for w in range(2):
        assert farm.pick(QUEUE, f"w{w}", "ebf", f"tok{w}", "cpu", (QUEUE,))[2] == f"r{w}"
    fair_shares.put(farm.redis, farm.settings.namespace, {"t1": R})
    submit(farm, "t1:b", 1, 9.0)
    assert farm.redis.lrange(keys.queue(QUEUE, QueuePart.notice), 0, -1) == ["1"]
    assert farm.preempt(QUEUE, "cpu", (QUEUE,)) == (["w1"], [QUEUE])  # the later of t2's two, put back
    assert farm.redis.lrange(keys.notice("tok1"), 0, -1) == ["1"] and not farm.redis.exists(keys.notice("tok0"))
    assert farm.heartbeat("tok1", "t2:flood") == "lost" and farm.heartbeat("tok0", "t2:flood") == "open"
    assert farm.redis.hget(keys.batch("t2:flood", ":att"), "r1") is None
    assert counters.read(farm.redis, farm.settings.namespace).preempted == {QUEUE: 1}
    # the freed worker serves the reserving tenant; t2's stopped request is next of its batch, before r2
    assert farm.pick(QUEUE, "w1", "ebf", "tok2", "cpu", (QUEUE,))[1:3] == ["t1:b", "r0"]
    assert farm.redis.lrange(keys.pending(QUEUE, "t2:flood"), 0, -1)[0].endswith("|r1")
    assert farm.preempt(QUEUE, "cpu", (QUEUE,)) == ([], [])  # its share served: nothing more is stopped


@pytest.mark.parametrize("own_broker", [True, False], ids=["broker-is-the-farms-redis", "broker-elsewhere"])
def test_a_stopped_request_put_back_has_its_wake_up_token_published_or_named_for_the_caller(farm, own_broker):
    """With the farm's Redis as the broker the script publishes the put-back request's token, as `enqueue` does;
    with another broker it names the queue, and the worker sends it (`StageWorker.requeued`), as for a sweep."""
    d = farm if own_broker else Dispatch(replace(farm.settings, broker_url="amqp://elsewhere//"), farm.redis)
    broker = Keys(farm.settings.namespace).broker(QUEUE)
    submit(d, "t2:flood", 2, 1.0)
    for w in range(2):
        d.pick(QUEUE, f"w{w}", "ebf", f"tok{w}", "cpu", (QUEUE,))
    fair_shares.put(d.redis, d.settings.namespace, {"t1": R})
    submit(d, "t1:b", 1, 9.0)
    before = d.redis.llen(broker)
    assert d.preempt(QUEUE, "cpu", (QUEUE,)) == (["w1"], [QUEUE])
    assert d.redis.llen(broker) - before == (1 if own_broker else 0)


def test_without_a_reserved_share_no_notice_is_left_and_nothing_is_stopped(farm):
    keys = Keys(farm.settings.namespace)
    fair_shares.put(farm.redis, farm.settings.namespace, {"t1": FairShare(2.0)})
    submit(farm, "t2:flood", 2, 1.0)
    for w in range(2):
        farm.pick(QUEUE, f"w{w}", "ebf", f"tok{w}", "cpu", (QUEUE,))
    submit(farm, "t1:b", 1, 9.0)
    assert not farm.redis.exists(keys.queue(QUEUE, QueuePart.notice), keys.reserving)
    assert farm.preempt(QUEUE, "cpu", (QUEUE,)) == ([], [])


def test_the_reserving_flag_follows_the_shares_as_published_and_put(farm):
    keys, ns = Keys(farm.settings.namespace), farm.settings.namespace
    fair_shares.put(farm.redis, ns, {"t1": R})
    assert farm.redis.get(keys.reserving) == "1"
    fair_shares.put(farm.redis, ns, {"t1": FairShare()})
    assert not farm.redis.exists(keys.reserving)
    with fair_shares.held(farm.redis, ns, {"t9": R}):
        assert farm.redis.get(keys.reserving) == "1"
    assert not farm.redis.exists(keys.reserving)


def test_a_batch_submitted_in_bulk_leaves_the_stages_notice_as_one_submitted_request_by_request_does(farm):
    from farm.protocol.calls import submit_many_call
    keys = Keys(farm.settings.namespace)
    fair_shares.put(farm.redis, farm.settings.namespace, {"t1": R})
    synthetic = registry.get("synthetic")
    farm.run(open_call("t", synthetic, 2, "t1:bulk", None, 0.0))
    farm.run(submit_many_call([submit_call(farm.settings, synthetic, "t1:bulk", f"r{n}", {"times": [1, 0]}, None,
                                           time.time()) for n in range(2)]))
    assert farm.redis.lrange(keys.queue(QUEUE, QueuePart.notice), 0, -1) == ["1"]


def test_a_cancel_tells_the_workers_running_its_batch_and_no_other(farm):
    keys = Keys(farm.settings.namespace)
    submit(farm, "t2:a", 1, 1.0)
    submit(farm, "t2:b", 1, 2.0)
    farm.pick(QUEUE, "w0", "ebf", "tok0", "cpu", (QUEUE,))
    farm.pick(QUEUE, "w1", "ebf", "tok1", "cpu", (QUEUE,))
    assert farm.cancel("t2:a") == "cancelled"
    assert farm.redis.lrange(keys.notice("tok0"), 0, -1) == ["1"] and not farm.redis.exists(keys.notice("tok1"))
    assert 0 < farm.redis.ttl(keys.notice("tok0")) <= 600
