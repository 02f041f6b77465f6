"""One redis-py client per kombu channel, not one per broker command.

kombu's Redis channel hands each command outside its poll (a token's LPUSH, a task event's PUBLISH, a queue's
LLEN) a new `redis.Redis` built on the channel's connection pool (`Channel.conn_or_acquire` ->
`_create_client`). redis-py 8 builds a case-insensitive table of ~170 response callbacks for every client, so
each of those commands cost about a millisecond of CPU before it was sent: three task events per request in a
worker's main process, a token per request wherever requests are submitted (the gateway, a trainer's client).
A client is a thin, thread-safe handle on its pool (each command takes a connection from the pool and gives it
back), so the channel keeps the one it built and hands it out again while its pool is the same.

`install()` patches kombu's class once per process (farm.celery_app calls it: every process that talks to the
broker imports it). The asynchronous client (the poll's, `Channel.client`) kombu already keeps per channel.
"""

from __future__ import annotations

import threading
from typing import Any

from kombu.transport import redis as kombu_redis

_ATTR = "_farm_sync_client"
_lock = threading.Lock()
_installed = False


def install() -> None:
    """Make `kombu.transport.redis.Channel` reuse its synchronous client; idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        create = kombu_redis.Channel._create_client

        def _create_client(self: Any, asynchronous: bool = False) -> Any:
            if asynchronous:
                return create(self, asynchronous=True)
            pool = self.pool
            client = self.__dict__.get(_ATTR)
            # a channel whose pool was replaced (closed and opened again) gets a client of the new pool
            if client is None or client.connection_pool is not pool:
                client = create(self)
                self.__dict__[_ATTR] = client
            return client

        _create_client.__doc__ = create.__doc__
        kombu_redis.Channel._create_client = _create_client
        _installed = True
