"""Serving on: a worker that finished a request takes the next waiting request's wake-up token from the broker's
list itself and serves it in the same Celery task, while the token's hard limit leaves room (workers.stage). One
token is still one pick; a token some worker holds is never served twice. Real Redis, the stage worker's own code,
no Celery worker (the test plays Celery's delivery of the first token)."""

from __future__ import annotations

import pytest

from farm.celery_app import make_app
from farm.config import Settings
from farm.protocol import roster
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import Keys
from farm.protocol.tokens import hard_limit
from workers.stage import StageWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
QUEUE = "synthetic.compile"
ROOMY_S = 3600.0  # a hard limit far above any request here
FOREIGN = '{"headers": {"task": "farm.stage.other.stage"}}'  # a message for another stage's task


@pytest.fixture
def worker(settings):
    w = StageWorker(make_app(settings), settings, QUEUE, "server")
    yield w
    w.dispatch.close()


def submitted(reward_client, n: int):
    batch = reward_client.open_batch("t", "synthetic", n)
    batch.submit_many([(f"r{i}", {"times": [0.001, 0]}) for i in range(n)])  # the compile stage only
    return batch


def tokens(settings: Settings) -> list[str]:
    return Dispatch(settings).redis.lrange(Keys(settings.namespace).broker(QUEUE), 0, -1)


def delivered(settings: Settings, n: int = 1) -> None:
    """What Celery does for a worker: take a token off the list."""
    for _ in range(n):
        assert Dispatch(settings).redis.rpop(Keys(settings.namespace).broker(QUEUE)) is not None


def test_a_worker_serves_on_the_requests_whose_tokens_no_worker_has_taken(settings, reward_client, worker):
    batch = submitted(reward_client, 3)
    delivered(settings)
    line = worker.serve(ROOMY_S)
    assert batch.progress().done == 3
    assert tokens(settings) == []  # each request's token taken once: none left to cost an empty pick
    assert "served on 2 more (ok 2)" in line


def test_with_no_token_waiting_at_the_hand_on_no_pick_is_spent_looking_for_one(settings, reward_client, worker):
    batch = submitted(reward_client, 1)
    delivered(settings)
    picks = []
    pick = worker.dispatch.pick
    worker.dispatch.pick = lambda *args: picks.append(args) or pick(*args)
    worker.serve(ROOMY_S)
    assert batch.progress().done == 1 and len(picks) == 1


def test_a_hand_on_counts_the_tokens_even_when_redis_lost_the_script(settings, reward_client, worker):
    batch = submitted(reward_client, 2)
    delivered(settings)
    worker.dispatch._scripts["complete"].sha = "0" * 40  # as after a Redis restart: the first EVALSHA finds nothing
    line = worker.serve(ROOMY_S)
    assert batch.progress().done == 2 and "served on 1 more" in line


def test_a_request_whose_token_another_worker_holds_is_left_to_that_worker(settings, reward_client, worker):
    batch = submitted(reward_client, 2)
    delivered(settings, 2)  # both tokens delivered: the second is another worker's
    line = worker.serve(ROOMY_S)
    assert batch.progress().done == 1 and "served on" not in line


def test_a_token_celery_itself_published_is_taken_as_one_the_scripts_published(settings, reward_client, worker):
    batch = submitted(reward_client, 2)
    delivered(settings, 2)
    worker.tokens.send(QUEUE, 60.0)  # kombu's own encoding of the message, as `wake_if_pending` sends it
    line = worker.serve(ROOMY_S)
    assert batch.progress().done == 2 and tokens(settings) == [] and "served on 1 more" in line


def test_a_retiring_worker_does_not_serve_on(settings, reward_client, worker):
    batch = submitted(reward_client, 3)
    delivered(settings)
    roster.retiring(worker.dispatch.redis, worker.keys, QUEUE, worker.name, 0.0)
    worker.serve(ROOMY_S)
    assert batch.progress().done == 1 and len(tokens(settings)) == 2


def test_a_hard_limit_with_no_room_for_another_whole_timeout_serves_only_the_tokens_request(settings, reward_client,
                                                                                            worker):
    batch = submitted(reward_client, 3)
    delivered(settings)
    timeout = worker.dispatch.knobs().timeout_of(worker.stage)
    worker.serve(timeout + (hard_limit(timeout) - timeout) / 2 - 0.001)
    assert batch.progress().done == 1 and len(tokens(settings)) == 2


def test_a_token_with_no_hard_limit_serves_only_its_request(settings, reward_client, worker):
    batch = submitted(reward_client, 2)
    delivered(settings)
    worker.serve(None)
    assert batch.progress().done == 1


def test_with_the_broker_elsewhere_no_token_is_taken_back(redis_url, namespace, tmp_path, reward_client):
    # the same Redis under another URL: the farm cannot tell it is its own, so the scripts publish no tokens
    elsewhere = Settings(redis_url=redis_url, broker_url=redis_url.replace("127.0.0.1", "localhost"),
                         namespace=namespace, lease_s=2.0, data_dir=str(tmp_path))
    w = StageWorker(make_app(elsewhere), elsewhere, QUEUE, "server")
    batch = submitted(reward_client, 2)
    w.dispatch.redis.delete(w.keys.broker(QUEUE))  # the tokens the client's scripts published
    w.serve(ROOMY_S)
    assert batch.progress().done == 1
    w.dispatch.close()


def test_a_message_on_the_list_that_is_not_this_stages_token_is_put_back_and_nothing_picked(settings, reward_client,
                                                                                           worker):
    batch = submitted(reward_client, 2)
    delivered(settings, 2)
    r = worker.dispatch.redis
    r.lpush(worker.keys.broker(QUEUE), FOREIGN)
    line = worker.serve(ROOMY_S)
    assert batch.progress().done == 1 and "served on" not in line
    assert tokens(settings) == [FOREIGN]
