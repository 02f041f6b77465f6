"""An idle worker's broker poll, long while it waits and cut short when the worker shuts down.

kombu's Redis transport waits for work with BRPOP and a timeout (farm.celery_app.BRPOP_TIMEOUT_S); each
timeout wakes the worker's main process and Redis for an empty reply, so a short one is what an idle farm
spends its CPU on. But a warm shutdown closes the channel by reading the outstanding BRPOP's reply
(`Channel.close`), so the timeout is also how long a retired idle worker lingers. Here the shutdown ends the
wait instead: once the channel is closing, `CLIENT UNBLOCK` on the connection that waits (found by its
address in `CLIENT LIST`) makes BRPOP return at once, as a timeout would. Where that cannot be done (a unix
socket, a Redis that refuses CLIENT), the worker goes when its poll times out, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

log = logging.getLogger(__name__)
WATCH_S = 10.0  # how long the shutdown is watched for its channel to close
STEP_S = 0.005


def _address(connection: Any) -> str | None:
    """The waiting connection's address as Redis lists it (`ip:port`), None for a unix socket."""
    sock = getattr(connection, "_sock", None)
    try:
        name = sock.getsockname() if sock is not None else None
    except OSError:
        return None
    if not isinstance(name, tuple) or len(name) < 2:
        return None
    host = name[0] if ":" not in name[0] else f"[{name[0]}]"
    return f"{host}:{name[1]}"


def unblock(client: redis.Redis, address: str) -> bool:
    """End the blocking command of the client at `address`; whether one was found."""
    for entry in client.client_list():
        if entry.get("addr") == address:
            return bool(client.client_unblock(int(entry["id"])))
    return False


def cut_short_on_close(channel: Any, redis_url: str) -> threading.Thread | None:
    """Watch `channel` (kombu's Redis channel) from a thread; when it starts closing with a BRPOP outstanding,
    unblock that BRPOP. Returns the thread (None for a channel of another transport)."""
    if channel is None or not hasattr(channel, "_in_poll"):
        return None

    def watch() -> None:
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline and not getattr(channel, "closed", False):
            waiting = channel._in_poll
            if getattr(channel, "_closing", False) and waiting:
                address = _address(waiting)
                if address is None:
                    return
                try:
                    with redis.Redis.from_url(redis_url, socket_timeout=2.0) as client:
                        unblock(client, address)
                except redis.RedisError as exc:
                    log.info("could not cut the broker poll short (%s); the worker leaves when it times out", exc)
                return
            time.sleep(STEP_S)

    thread = threading.Thread(target=watch, name="farm-unblock-poll", daemon=True)
    thread.start()
    return thread
