"""The failures a client rides through (a broker that restarts, a connection that drops) as opposed to
answers it must pass on. Kept apart so the sans-I/O core needs no network library."""

from __future__ import annotations

import kombu.exceptions
import redis.exceptions

# BusyLoadingError (a restarted Redis still loading its data) is a ConnectionError; kombu's
# OperationalError covers wake-up tokens sent to a separate broker
TRANSIENT: tuple[type[BaseException], ...] = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                                              kombu.exceptions.OperationalError)
