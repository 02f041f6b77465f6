"""Preemption with real stage workers: a tenant whose share is reserved is served at once though another
tenant's long requests hold every worker, and the stopped request runs again later, its worker not counted lost."""

from __future__ import annotations

import time

import pytest
import redis

from farm.app import fair_shares
from farm.protocol import counters
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import Keys
from farm.protocol.shares import FairShare

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

QUEUE = "synthetic.compile"


def wait_running(d: Dispatch, n: int) -> None:
    deadline = time.monotonic() + 20
    while len(d.inspect().stages[QUEUE].running) < n:
        assert time.monotonic() < deadline, "the workers never took the long requests"
        time.sleep(0.05)


def test_a_reserving_tenant_is_served_at_once_though_another_holds_every_worker(settings, reward_client,
                                                                                start_workers):
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    fair_shares.put(r, settings.namespace, {"t1": FairShare(reserve=True)})
    start_workers(QUEUE, 2)
    d = Dispatch(settings)
    flood = reward_client.open_batch("t2.t", "synthetic", 3, "t2:flood")
    for n in range(3):
        flood.submit(f"long{n}", {"times": [30, 0]})
    wait_running(d, 2)
    started = time.monotonic()
    mine = reward_client.open_batch("t1.t", "synthetic", 1, "t1:b")
    mine.submit("short", {"times": [0.05, 0]})
    [result] = mine.gather(timeout=20)  # without the stop it waits 30 s for a long request to end
    waited = time.monotonic() - started
    assert result.ok and waited < 10, waited
    assert counters.read(r, settings.namespace).preempted == {QUEUE: 1}
    # the stopped request is back, first of its batch's waiting ones, and no lost worker is counted against it
    wait_running(d, 2)
    assert {w.id for w in d.inspect().stages[QUEUE].running} == {"long0", "long1"}
    assert not r.hgetall(Keys(settings.namespace).batch("t2:flood", ":att"))
    flood.cancel()
