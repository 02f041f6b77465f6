"""The Python gateway client (`farm.client.http_sync`, `farm.client.http_aio`): a tenant's trainer with only
the gateway's URL and its token, the batch API of the Redis client, against a real gateway and workers."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis

from farm.client.http_aio import AsyncGatewayClient
from farm.client.http_sync import GatewayClient
from farm.errors import BatchAbandoned, BatchClosed, BatchNotFound, InvalidInput, LimitReached, Unauthorized
from farm.knobs import Knobs, redis_key
from farm.results import Status
from farm.store.tenants import TenantLimits, create_tenant
from tests.integration.gateway_support import running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

QUICK = {"times": [0.05, 0]}


@pytest.fixture
def gateway(settings, engine, start_workers):
    start_workers("synthetic.compile")
    with running_gateway(settings, engine) as base:
        yield base


@pytest.fixture
def token(engine):
    return create_tenant(engine, "trainer", now=time.time())[1]


def test_a_batch_through_the_gateway_gathers_in_submission_order(gateway, token):
    with GatewayClient(gateway, token) as farm:
        batch = farm.open_batch("math", "synthetic", 4)
        kinds = batch.submit_many([(f"r{i}", {"times": [0.05 * (4 - i), 0]}) for i in range(4)])
        assert kinds == ["queued"] * 4
        results = batch.gather(timeout=30)
    assert [r.request_id for r in results] == ["r0", "r1", "r2", "r3"]
    assert all(r.status is Status.OK and r.batch_id == batch.id for r in results)


def test_a_bulk_submit_beyond_one_call_goes_in_chunks(gateway, token):
    with GatewayClient(gateway, token) as farm:
        batch = farm.open_batch("t", "synthetic", 1200)
        assert batch.submit_many([(f"r{i}", {"times": [0, 0]}) for i in range(1200)]) == ["finished"] * 1200
        assert len(batch.gather(timeout=30)) == 1200


def test_groups_come_whole(gateway, token):
    with GatewayClient(gateway, token) as farm:
        batch = farm.open_batch("t", "synthetic", 4, group_size=2)
        batch.submit_many([(f"r{i}", QUICK, i // 2) for i in range(4)])
        groups = dict(batch.completed_groups(timeout=30))
    assert sorted(groups) == ["0", "1"] and all(len(rs) == 2 for rs in groups.values())


def test_the_farms_refusals_come_back_as_the_farms_errors(gateway, token):
    with GatewayClient(gateway, token) as farm:
        with pytest.raises(BatchNotFound, match="no batch 'ghost'"):
            farm.batch("ghost")
        with pytest.raises(InvalidInput, match="no-such"):
            farm.open_batch("t", "no-such", 1)
        batch = farm.open_batch("t", "synthetic", 2)
        batch.submit("r0", {"times": [3, 0]})  # still running when r1 comes: the batch is sealed, not completed
        batch.seal()
        with pytest.raises(BatchClosed, match="sealed"):
            batch.submit("r1", QUICK)


def test_a_bad_token_is_unauthorized(gateway):
    with GatewayClient(gateway, "rf_wrong") as farm, pytest.raises(Unauthorized):
        farm.open_batch("t", "synthetic", 1)


def test_a_tenant_limit_is_waited_out_then_raised(gateway, engine):
    _, token = create_tenant(engine, "tight", limits=TenantLimits(open_batches=1), now=time.time())
    with GatewayClient(gateway, token, reconnect_s=0.5) as farm:
        farm.open_batch("t", "synthetic", 1, "first")
        started = time.monotonic()
        with pytest.raises(LimitReached, match="1 batches open"):
            farm.open_batch("t", "synthetic", 1, "second")
        assert time.monotonic() - started >= 0.4


def test_a_batch_cancelled_in_a_failing_block_leaves_nothing_queued(gateway, token):
    with GatewayClient(gateway, token) as farm:
        with pytest.raises(RuntimeError), farm.open_batch("t", "synthetic", 3, "doomed") as batch:
            batch.submit("r0", {"times": [5, 0]})
            raise RuntimeError("the trainer failed")
        assert farm.progress("doomed").state == "cancelled"


def test_a_gateway_that_is_not_there_is_farm_unavailable_after_the_budget():
    from farm.errors import FarmUnavailable
    with GatewayClient("http://127.0.0.1:9", "rf_x", reconnect_s=0.3) as farm, pytest.raises(FarmUnavailable):
        farm.progress("x")


def test_the_async_client_does_the_same_on_any_event_loop(gateway, token):
    client = AsyncGatewayClient(gateway, token)

    async def step(tag: str):
        batch = await client.open_batch("t", "synthetic", 3, tag)
        await batch.submit_many([(f"r{i}", QUICK) for i in range(3)])
        return [r.request_id for r in await batch.gather(timeout=30)]

    assert asyncio.run(step("one")) == ["r0", "r1", "r2"]
    assert asyncio.run(step("two")) == ["r0", "r1", "r2"]  # a second loop gets its own connections

    async def close():
        await client.close()
    asyncio.run(close())


def test_a_silent_tenants_batch_is_abandoned_while_its_heartbeats_keep_another_alive(gateway, token, settings):
    redis.Redis.from_url(settings.redis_url).set(redis_key(settings.namespace),
                                                 json.dumps(Knobs(abandon_after_s=1.5).to_dict()))
    with GatewayClient(gateway, token) as farm:
        kept, left = farm.open_batch("kept", "synthetic", 2), farm.open_batch("left", "synthetic", 2)
        left.submit("r0", QUICK)
        deadline = time.monotonic() + 15
        while left.progress().state == "open":  # the worker's sweeps abandon it once it is 1.5 s silent
            assert time.monotonic() < deadline, "the silent batch was never abandoned"
            assert kept.heartbeat() == "open"
            time.sleep(0.5)
        assert left.progress().state == "abandoned" and kept.heartbeat() == "open"
        with pytest.raises(BatchAbandoned, match="abandoned by the farm"):
            left.heartbeat()
        with pytest.raises(BatchAbandoned, match="abandoned by the farm"):
            left.submit("r1", QUICK)
