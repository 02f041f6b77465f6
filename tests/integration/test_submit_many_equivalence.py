"""One bulk submit leaves the farm exactly as the same submits one at a time would, on real Redis: the bulk
script's fast path (one call per key) must not differ from submit.lua run request by request."""

from __future__ import annotations

import re
import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm.config import Settings
from farm.knobs import Knobs
from farm.protocol.calls import Cap, admit, admitted_calls, open_call, submit_many_call
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import Keys
from farm.protocol.scripts import SEAL, Call
from tests.conftest import REDIS_URL
from workers.pipelines import synthetic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PIPELINE = synthetic.pipeline
PATHS = {"compile": [1, 0], "execute": [0, 1], "both": [1, 1], "none": [0, 0]}
TOKEN_ID = re.compile(r"NS-token-\d+")  # token ids number a queue's tokens in another order: any id will do

request = st.tuples(st.sampled_from(["r0", "r1", "r2", "r3", "r4", "r5"]),  # few ids: duplicates and conflicts
                    st.sampled_from(["compile", "execute", "both"] * 3 + ["none"]),  # mostly the bulk fast path
                    st.none() | st.sampled_from(["g0", "g1"]),
                    st.integers(0, 1))  # a second payload variant: the same id with another payload conflicts


def calls_for(requests, now: float, knobs: Knobs, cap: Cap | None = None) -> list[Call]:
    admitted = [admit(Settings(), PIPELINE, rid, {"times": PATHS[path], "reward": variant}, group)
                for rid, path, group, variant in requests]
    return admitted_calls(PIPELINE, "b0", admitted, now, knobs, cap)


def snapshot(r: redis.Redis, namespace: str) -> dict:
    """Every key of the namespace (and its stage queues' broker lists) with its value, ids made comparable."""
    out = {}
    for key in sorted(r.scan_iter(match=f"{namespace}*", count=1000)):
        kind = r.type(key)
        if kind == "hash":
            value = sorted(r.hgetall(key).items())  # a hash keeps no order
        elif kind == "list":
            value = r.lrange(key, 0, -1)
        elif kind == "zset" and key.endswith(":seen"):
            value = r.zrange(key, 0, -1)  # scored by Redis' clock at each call (farm.protocol.silence)
        elif kind == "zset":
            value = r.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(r.smembers(key))
        elif kind == "stream":
            value = [fields for _, fields in r.xrange(key)]
        else:
            value = r.get(key)
        out[key.replace(namespace, "NS")] = TOKEN_ID.sub("TOKEN", repr(value).replace(namespace, "NS"))
    return out


def farm_after(before, now_requests, size: int, sealed: bool, bulk: bool, lua_tokens: bool,
               most: int | None = None) -> tuple[dict, list]:
    """`most`: the batch is tenant 1's, whose limit on requests outstanding the submits carry."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    farm = Dispatch(Settings(redis_url=REDIS_URL, namespace=namespace,
                             broker_url=None if lua_tokens else "redis://127.0.0.1:6379/15"))
    r = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        knobs = Knobs()
        farm.run(open_call("t", PIPELINE, size, "b0", None, 100.0))
        if most is not None:
            r.zadd(Keys(namespace).tenant_open(1), {"b0": 100.0})
        for call in calls_for(before, 100.5, knobs):
            farm.run(call)
        if sealed:
            farm.run(SEAL.call(batch="b0", at="100.7"))
        calls = calls_for(now_requests, 101.0, knobs, None if most is None else Cap(1, most))
        replies = farm.run(submit_many_call(calls)) if bulk else [farm.run(c) for c in calls]
        return snapshot(r, namespace), replies
    finally:
        for key in r.scan_iter(match=f"{namespace}*", count=1000):
            r.delete(key)
        r.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.lists(request, max_size=3), now_requests=st.lists(request, min_size=2, max_size=10),
       size=st.integers(1, 14), sealed=st.booleans(), lua_tokens=st.booleans(), most=st.none() | st.integers(0, 8))
def test_a_bulk_submit_leaves_the_farm_as_the_same_submits_one_at_a_time(before, now_requests, size, sealed,
                                                                        lua_tokens, most):
    one = farm_after(before, now_requests, size, sealed, bulk=False, lua_tokens=lua_tokens, most=most)
    many = farm_after(before, now_requests, size, sealed, bulk=True, lua_tokens=lua_tokens, most=most)
    assert many[1] == one[1]
    assert many[0] == one[0]


def test_the_usual_bulk_submit_takes_the_fast_path_and_still_matches():
    # an open batch with room for all, every request queued, a duplicate and a conflict among them
    before = [("r0", "compile", "g0", 0)]
    now_requests = [("r1", "compile", "g0", 0), ("r2", "execute", None, 0), ("r0", "compile", "g0", 0),
                    ("r3", "both", "g1", 0), ("r3", "both", "g1", 1), ("r4", "compile", "g1", 0)]
    one = farm_after(before, now_requests, 10, False, bulk=False, lua_tokens=True)
    many = farm_after(before, now_requests, 10, False, bulk=True, lua_tokens=True)
    assert [r[0] for r in many[1]] == ["queued", "queued", "duplicate", "queued", "conflict", "queued"]
    assert many == one


def test_a_bulk_over_the_tenants_limit_takes_what_fits_in_turn_as_one_at_a_time_would():
    now_requests = [("r1", "compile", None, 0), ("r2", "execute", None, 0), ("r3", "none", None, 0),
                    ("r1", "compile", None, 0), ("r4", "both", None, 0)]
    one = farm_after([("r0", "compile", None, 0)], now_requests, 10, False, bulk=False, lua_tokens=True, most=2)
    many = farm_after([("r0", "compile", None, 0)], now_requests, 10, False, bulk=True, lua_tokens=True, most=2)
    assert [r[0] for r in many[1]] == ["queued", "limit", "finished", "duplicate", "limit"]
    assert many == one
