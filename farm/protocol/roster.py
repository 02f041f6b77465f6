"""A stage's roster of workers in Redis (`Keys.queue(q, QueuePart.seen)`): a worker enters when Celery says it
is ready, stays by its heartbeat and leaves when it shuts down; `live.inspect` reads it back (a worker serves
while its last beat is younger than the lease) and the backends learn from it which workers take requests.

Functions of a redis-py client; the workers and the backends call them, so the roster is written here only
(the scripts also note a worker seen when it picks, renews its lease (a busy worker's beat, `Dispatch.heartbeat`)
or completes, and `Dispatch.forget_worker` drops a retired one).
"""

from __future__ import annotations

from typing import Any, Iterable

from farm import events
from farm.protocol import stream
from farm.protocol.keys import Keys, QueuePart


def announce(redis: Any, keys: Keys, queue: str, worker: str, now: float) -> None:
    """A worker ready to take the stage's requests: its stage is known, it is on the roster and in the history
    (`worker_ready`), in one round trip."""
    pipe = redis.pipeline(transaction=False)
    pipe.sadd(keys.queues, queue)
    pipe.hset(keys.queue(queue, QueuePart.seen), worker, repr(now))
    stream.append(pipe, keys, events.encode("worker_ready", worker=worker, stage=queue, at=now))
    pipe.execute()


def beat(redis: Any, keys: Keys, queue: str, worker: str, now: float) -> bool:
    """The worker is alive at `now`; and whether a sweep could find anything (`Dispatch.sweep`), in the same
    round trip: it gives back lapsed leases, which are all in `leases`, and abandons silent batches, all open
    ones in `seen`, so with both empty (an idle farm) it has nothing to do."""
    pipe = redis.pipeline(transaction=False)
    pipe.hset(keys.queue(queue, QueuePart.seen), worker, repr(now))
    pipe.exists(keys.leases, keys.seen)
    return bool(pipe.execute()[1])


def retiring(redis: Any, keys: Keys, queue: str, worker: str, now: float) -> None:
    """The worker's warm shutdown began: it takes no more requests, so the stage's fair shares no longer count
    it among the workers to divide (pick.lua), though its heartbeat keeps it on the roster until it is gone."""
    redis.hset(keys.queue(queue, QueuePart.leaving), worker, repr(now))


def leave(redis: Any, keys: Keys, queue: str, worker: str) -> None:
    pipe = redis.pipeline(transaction=False)
    pipe.hdel(keys.queue(queue, QueuePart.seen), worker)
    pipe.hdel(keys.queue(queue, QueuePart.leaving), worker)
    pipe.execute()


def waiting(redis: Any, keys: Keys, queue: str) -> int:
    """How many batches have requests waiting in the stage (both of its orders hold the same batches)."""
    return int(redis.zcard(keys.queue(queue, QueuePart.ebf)))


def last_beats(redis: Any, keys: Keys, workers: Iterable[tuple[str, str]]) -> list[str | None]:
    """Each (worker, stage queue)'s last beat as stored (epoch seconds), None for one not on the roster; one
    round trip."""
    pipe = redis.pipeline(transaction=False)
    for worker, queue in workers:
        pipe.hget(keys.queue(queue, QueuePart.seen), worker)
    return pipe.execute()
