"""A trainer's client against a farm Redis that goes away: it rides through a short outage, gives the
farm's own error after its budget, and restores a batch the farm lost, so no request is lost or doubled."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from farm.client.sync import RewardClient
from farm.errors import FarmUnavailable
from tests.integration.conftest import spawn_worker, wait_ready
from tests.support.redis_server import redis_server  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

QUICK = {"times": [0.05, 0]}


def restart_later(server, after_s: float) -> threading.Thread:
    """Stop the server now and start it again `after_s` later, in the background."""
    server.stop()
    thread = threading.Thread(target=lambda: (time.sleep(after_s), server.start()), daemon=True)
    thread.start()
    return thread


def test_a_submit_rides_through_a_short_broker_restart(settings, redis_server):
    server = redis_server(persistent=True)
    with RewardClient(settings.with_(redis_url=server.url)) as client:
        batch = client.open_batch("t", "synthetic", 2)
        assert batch.submit("r0", QUICK) == "queued"
        restart_later(server, 1.0)
        assert batch.submit("r1", QUICK) == "queued"
        assert client.outages == 1
        assert batch.progress().arrived == 2


def test_a_farm_gone_longer_than_the_reconnect_budget_is_the_farm_s_own_error(settings, redis_server):
    server = redis_server()
    with RewardClient(settings.with_(redis_url=server.url, reconnect_s=0.5)) as client:
        batch = client.open_batch("t", "synthetic", 1)
        server.stop()
        started = time.monotonic()
        with pytest.raises(FarmUnavailable, match=rf"127\.0\.0\.1:{server.port}.*did not answer for 0.5 s"):
            batch.submit("r0", QUICK)
        assert time.monotonic() - started < 5


def test_a_batch_lost_in_a_restart_without_persistence_is_restored_when_the_trainer_submits(settings, redis_server,
                                                                                              tmp_path):
    server = redis_server(persistent=False)
    farm = settings.with_(redis_url=server.url)
    with RewardClient(farm) as client:
        batch = client.open_batch("t", "synthetic", 3)
        batch.submit("r0", QUICK)
        batch.submit("r1", QUICK)
        restart_later(server, 0.3).join()
        assert batch.submit("r2", QUICK) == "queued"  # the farm had forgotten the batch: opened again first
        worker = spawn_worker(farm, "synthetic.compile", "w0", tmp_path / "w0.log")
        try:
            wait_ready(farm, [worker])
            results = batch.gather(timeout=30)
        finally:
            worker.kill()
    assert [(r.request_id, r.status.value) for r in results] == [("r0", "ok"), ("r1", "ok"), ("r2", "ok")]


def test_a_batch_lost_while_the_trainer_waits_is_restored_and_every_result_comes_once(settings, redis_server,
                                                                                       tmp_path):
    server = redis_server(persistent=False)
    farm = settings.with_(redis_url=server.url)
    with RewardClient(farm) as client:
        batch = client.open_batch("t", "synthetic", 3)
        batch.submit_many([("r0", {"times": [0, 0]}), ("r1", QUICK), ("r2", QUICK)])  # r0 finishes on arrival
        results = batch.as_completed(timeout=60)
        assert next(results).request_id == "r0"
        restart_later(server, 0.3).join()
        worker = spawn_worker(farm, "synthetic.compile", "w0", tmp_path / "w0.log")
        try:
            wait_ready(farm, [worker])
            rest = sorted(r.request_id for r in results)
        finally:
            worker.kill()
    assert rest == ["r1", "r2"]


def test_a_trainer_reading_through_a_restart_rides_it_out_and_gets_the_restored_batch_s_results(settings, redis_server,
                                                                                                 tmp_path):
    server = redis_server(persistent=False)
    farm = settings.with_(redis_url=server.url)
    workers = []
    with RewardClient(farm) as client:
        batch = client.open_batch("t", "synthetic", 2)
        batch.submit_many([("r0", QUICK), ("r1", QUICK)])
        restart = restart_later(server, 0.5)
        threading.Thread(target=lambda: (restart.join(), workers.append(
            spawn_worker(farm, "synthetic.compile", "w0", tmp_path / "w0.log"))), daemon=True).start()
        try:
            results = batch.gather(timeout=60)
        finally:
            for w in workers:
                w.kill()
        assert client.outages >= 1
    assert [r.request_id for r in results] == ["r0", "r1"]


def test_the_async_client_restores_a_lost_batch_and_rides_through_the_restart(settings, redis_server, tmp_path):
    from farm.client.aio import AsyncRewardClient

    server = redis_server(persistent=False)
    farm = settings.with_(redis_url=server.url)
    workers = []

    async def scenario() -> list[str]:
        async with AsyncRewardClient(farm) as client:
            batch = await client.open_batch("t", "synthetic", 3)
            await batch.submit_many([("r0", QUICK), ("r1", QUICK)])
            restart_later(server, 0.3).join()
            assert await batch.submit("r2", QUICK) == "queued"
            workers.append(spawn_worker(farm, "synthetic.compile", "w0", tmp_path / "w0.log"))
            return [r.request_id for r in await batch.gather(timeout=60)]

    try:
        assert asyncio.run(scenario()) == ["r0", "r1", "r2"]
    finally:
        for w in workers:
            w.kill()
