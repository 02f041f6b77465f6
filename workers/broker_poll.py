"""An idle worker's broker poll, long while it waits and cut short when the worker shuts down.

kombu's Redis transport waits for work with BRPOP and a timeout (farm.celery_app.BRPOP_TIMEOUT_S); each
timeout wakes the worker's main process and Redis for an empty reply, so a short one is what an idle farm
spends its CPU on. But a warm shutdown closes the channel by reading the outstanding BRPOP's reply
(`Channel.close`), so the timeout is also how long a retired idle worker lingers. Here the shutdown ends the
wait instead: once the channel is closing, `CLIENT UNBLOCK` on the connection that waits (found by its
address in `CLIENT LIST`) makes BRPOP return at once, as a timeout would. Where that cannot be done (a unix
socket, a Redis that refuses CLIENT), the worker goes when its poll times out, as before.

The idle loop's one-second tick goes too (`slow_binding_refresh`).
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
# How often the worker's event loop looks at kombu's binding tables (kombu's own timer: every second).
BINDING_CHECK_S = 30.0


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


def slow_binding_refresh(hub: Any, connection: Any) -> bool:
    """Have kombu check its binding tables every BINDING_CHECK_S rather than every second; whether it did.

    kombu's Redis transport (5.6 and later) keeps the binding tables of the expiring queues a worker consumes
    (the remote-control queue: Celery's `control_queue_expires`) alive from a one-second timer, the only thing
    that wakes an idle worker's event loop every second (the loop otherwise sleeps until its next timer, at
    most 10 s). The check itself acts far less often: a table lives at least an hour
    (`MIN_BINDING_TTL`) and is refreshed every third of that, and overdue tables of stopped consumers are swept
    every minute (`BINDING_SWEEP_INTERVAL`); at 30 s both still happen in time, the sweep at most 30 s later.
    The entry stays where kombu looks for it, so a reconnection cancels it and starts kombu's own again."""
    cycle = getattr(getattr(connection, "transport", None), "cycle", None)
    tref = getattr(cycle, "_binding_expiry_tref", None)
    check = getattr(cycle, "maybe_refresh_binding_expiry", None)
    if hub is None or tref is None or check is None:
        return False
    tref.cancel()
    cycle._binding_expiry_tref = hub.call_repeatedly(BINDING_CHECK_S, check)
    return True
