"""A batch read back outside the scripts, written once for every reader (the clients, the gateway, the planner).

Each function sends its command on the redis-py client or pipeline it is given, sync or asyncio, and returns
what that returns: the reply, a coroutine to await, or the pipeline with the read queued. The replies'
meaning is elsewhere: `live.parse_progress` for a batch's head, the client core for its done stream and
groups, `state.RequestState` for the request states.
"""

from __future__ import annotations

from typing import Any

from farm.protocol.keys import Keys, Part


def progress(redis: Any, keys: Keys, batch_id: str) -> Any:
    """The batch's head (`live.parse_progress`): task, pipeline, size, state, arrived and done counts."""
    return redis.hgetall(keys.batch(batch_id))


def results_after(redis: Any, keys: Keys, batch_id: str, after: str, count: int, block_ms: int | None = None) -> Any:
    """Up to `count` entries of the batch's done stream after the cursor `after` (results, then the end marker),
    waiting up to `block_ms` for the first one when given."""
    return redis.xread({keys.batch(batch_id, Part.done): after}, count=count, block=block_ms)


def all_results(redis: Any, keys: Keys, batch_id: str) -> Any:
    """The batch's whole done stream."""
    return redis.xrange(keys.batch(batch_id, Part.done))


def groups(redis: Any, keys: Keys, batch_id: str) -> Any:
    """Group -> how many of its requests arrived."""
    return redis.hgetall(keys.batch(batch_id, Part.groups))


def request_states(redis: Any, keys: Keys, batch_id: str) -> Any:
    """Request -> its state between stages (`state.RequestState`), for every request that arrived."""
    return redis.hgetall(keys.batch(batch_id, Part.req))


def stored_result(redis: Any, keys: Keys, batch_id: str, request_id: str) -> Any:
    """One finished request's result JSON (None while it is not finished)."""
    return redis.hget(keys.batch(batch_id, Part.res), request_id)


def stored_results(redis: Any, keys: Keys, batch_id: str) -> Any:
    """Request -> its result's JSON, for every request finished."""
    return redis.hgetall(keys.batch(batch_id, Part.res))
