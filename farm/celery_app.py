"""The farm's Celery app and its wake-up tokens.

A stage's Celery queue carries only tokens: each says "one more request is pending in this stage",
and the worker that takes it picks the most urgent one from the EBF index (farm.protocol). Workers
serve one request at a time, prefetch one and ack late; nothing is stored in a Celery result backend
(results go to the batch's own Redis hash, exactly once).
"""

from __future__ import annotations

from celery import Celery

from farm import broker_client
from farm.config import Settings, redis_url
from farm.protocol.tokens import hard_limit, task_name

broker_client.install()  # every process that talks to the broker imports this module

# How long an idle worker's broker poll blocks. A token pushed meanwhile ends it at once, so it costs no pick-up
# time; it is how often an idle worker and Redis wake for an empty reply, and how long a retired worker would
# linger, but workers.broker_poll ends the poll at a shutdown (CLIENT UNBLOCK, found by the connection's
# address). On a unix socket, which it cannot find, the poll stays short (BRPOP_UNIX_TIMEOUT_S). At 30 s it wakes
# an idle worker a third as often as its Celery heartbeat (10 s); what grows with it is how long a half-open broker
# connection goes unnoticed (kombu drops a BRPOP with no reply after the timeout plus its 25 s health-check
# interval: 55 s), where a Redis restart or a closed socket ends the connection at once anyway.
BRPOP_TIMEOUT_S = 30.0
BRPOP_UNIX_TIMEOUT_S = 2.0


def broker_url(settings: Settings) -> str:
    """The Celery broker; a redis-py unix socket URL (`unix:///path?db=0`, as the embedded Redis gives)
    is spelled the way kombu wants it (`redis+socket:///path?virtual_host=0`)."""
    url = settings.broker or redis_url(settings)
    if url.startswith("unix://"):
        url = "redis+socket://" + url[len("unix://"):].replace("db=", "virtual_host=")
    return url


def brpop_timeout(url: str) -> float:
    """The broker poll's timeout for a broker at `url` (kombu's spelling, as broker_url gives)."""
    return BRPOP_UNIX_TIMEOUT_S if url.startswith(("redis+socket:", "socket:")) else BRPOP_TIMEOUT_S


def make_app(settings: Settings, *, send_events: bool = False) -> Celery:
    url = broker_url(settings)
    app = Celery(f"farm-{settings.namespace}", broker=url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=settings.queue("default"),
        broker_connection_retry_on_startup=True,
        worker_send_task_events=send_events,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        # the farm's leases, not the broker's visibility timeout, recover work from dead workers.
        # polling_interval is the Redis transport's BRPOP timeout: each one wakes an idle worker and Redis
        # for an empty reply (at a quarter second, four a second: most of an idle farm's CPU). A worker's warm
        # shutdown waits for its outstanding BRPOP to return, which workers.broker_poll makes at once.
        # (kombu also drops a BRPOP that got no reply for the timeout plus 25 s: a half-open connection.)
        # No ack emulation: kombu's would copy every token into an `unacked` hash as it is taken and delete it
        # at the ack, two transactions per token, only so that a token a dead worker held comes back after the
        # visibility timeout, an hour later. Leases recover the requests, and a lost token is re-sent by an
        # idle worker (workers.stage.StageWorker.wake_if_pending); a warm shutdown still puts the token it had
        # taken back in its queue (kombu's in-memory QoS restores it).
        broker_transport_options={"visibility_timeout": 3600, "polling_interval": brpop_timeout(url),
                                  "ack_emulation": False},
    )
    return app


class Tokens:
    """Sends wake-up tokens to stage queues."""

    def __init__(self, app: Celery, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    def send(self, stage_queue: str, timeout_s: float, count: int = 1) -> None:
        if count <= 0:
            return
        name = task_name(stage_queue)
        queue = self.settings.queue(stage_queue)
        limit = hard_limit(timeout_s)
        with self.app.producer_or_acquire() as producer:
            for _ in range(count):
                self.app.send_task(name, queue=queue, routing_key=queue, time_limit=limit, producer=producer)
