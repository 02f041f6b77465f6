"""With a broker other than the farm's Redis, wake-up tokens go through Celery's own publish
(`send_task`) instead of the scripts: the same behaviour, by the other path."""

from __future__ import annotations

import time

import pytest

from farm.config import Settings
from farm.protocol.dispatch import Dispatch
from farm.protocol.scripts import lua_tokens

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def settings(redis_url, namespace, tmp_path) -> Settings:
    # the same Redis under another URL: the farm cannot tell it is its own, so Python sends the tokens
    broker = redis_url.replace("127.0.0.1", "localhost")
    assert broker != redis_url
    return Settings(redis_url=redis_url, broker_url=broker, namespace=namespace, lease_s=2.0, data_dir=str(tmp_path))


def test_tokens_are_sent_by_python_when_the_broker_is_elsewhere(settings):
    assert not lua_tokens(settings) and lua_tokens(settings.with_(broker_url=None))


def test_a_request_moves_through_both_stages(settings, reward_client, start_workers):
    start_workers("synthetic.compile")
    start_workers("synthetic.execute")
    batch = reward_client.open_batch("t", "synthetic", 2)
    batch.submit("both", {"times": [0.01, 0.01]})
    batch.submit("execute-only", {"times": [0, 0.01]})
    results = {r.request_id: r for r in batch.gather(timeout=20)}
    assert [s.name for s in results["both"].stages] == ["compile", "execute"] and results["both"].ok


def test_a_killed_workers_request_finishes_on_another_worker_exactly_once(settings, reward_client, start_workers):
    workers = {w.name: w for w in start_workers("synthetic.compile", count=2)}
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", {"times": [1.0, 0]})
    d = Dispatch(settings)
    deadline = time.monotonic() + 10
    while not (running := d.inspect(["synthetic.compile"]).stages["synthetic.compile"].running):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    victim = running[0].worker
    workers[victim].kill()
    [result] = batch.gather(timeout=30)
    assert result.ok and [s.worker for s in result.stages] == list(set(workers) - {victim})
    assert batch.progress().done == 1
