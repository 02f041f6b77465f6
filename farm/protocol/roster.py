"""A stage's roster of workers in Redis (`Keys.queue(q, QueuePart.seen)`): a worker enters when Celery says it
is ready, stays by its heartbeat and leaves when it shuts down, or when its backend saw it die (`lapse.lua`);
`live.inspect` reads it back (a worker serves while its last beat is younger than `fresh_s`) and the backends learn
from it which workers take requests.

Functions of a redis-py client; the workers and the backends call them, so the roster is written here only
(the scripts also note a worker seen when it picks, renews its lease (a busy worker's beat, `Dispatch.heartbeat`)
or completes, and `Dispatch.forget_worker` drops a retired one).
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from farm import events
from farm.protocol import stream
from farm.protocol.keys import Keys, QueuePart

# An entry counts its worker as serving for this many leases after its last beat: three of the beats an idle worker
# sends on an idle farm, where it beats once a lease (workers.stage.beat_intervals) rather than three times.
FRESH_LEASES = 3


def fresh_s(lease_s: float) -> float:
    """How long after its last beat a worker still counts as serving its stage (here, in `live` and in the
    scripts' fair shares, `stage_workers`); a worker that died unseen by its backend is counted this long."""
    return FRESH_LEASES * lease_s


# An entry this many freshness horizons old is dropped when another worker of its stage announces itself: its worker
# died unseen by any backend (one its backend saw die leaves at once, `lapse.lua`). A worker that was only stuck that
# long comes back with its next beat.
PRUNE_FRESH = 10


def prune_s(lease_s: float) -> float:
    """How long after its last beat a worker's entry may be dropped from the roster (`announce`)."""
    return PRUNE_FRESH * fresh_s(lease_s)


def announce(redis: Any, keys: Keys, queue: str, worker: str, now: float, lease_s: float) -> list[str]:
    """A worker ready to take the stage's requests: its stage is known, it is on the roster and in the history
    (`worker_ready`), in one round trip. Workers replace workers, so this is when the roster sheds the entries
    of those that died unseen (`prune_s`), which would otherwise stay for good (a second round trip, only then):
    returns their names."""
    seen = keys.queue(queue, QueuePart.seen)
    pipe = redis.pipeline(transaction=False)
    pipe.sadd(keys.queues, queue)
    pipe.hset(seen, worker, repr(now))
    stream.append(pipe, keys, events.encode("worker_ready", worker=worker, stage=queue, at=now))
    pipe.hgetall(seen)
    entries = pipe.execute()[-1]
    # a beat that does not parse is as old as can be: that entry tells nothing of a live worker
    gone = sorted(name for name, beat in entries.items() if now - _beat_at(beat) >= prune_s(lease_s))
    if gone:
        leave(redis, keys, queue, *gone)
    return gone


def _beat_at(raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return float("-inf")


class Beat(NamedTuple):
    """What an idle worker's beat learnt: whether a sweep could find anything (`Dispatch.sweep`: it gives back
    lapsed leases, which are all in `leases`, and abandons silent batches, all open ones in `seen`, so with both
    empty, an idle farm, it has nothing to do), and how many batches wait at the worker's stage."""

    sweepable: bool
    waiting: int


def beat(redis: Any, keys: Keys, queue: str, worker: str, now: float) -> Beat:
    """The worker is alive at `now`; and what `Beat` tells, in the same round trip."""
    pipe = redis.pipeline(transaction=False)
    pipe.hset(keys.queue(queue, QueuePart.seen), worker, repr(now))
    pipe.exists(keys.leases, keys.seen)
    pipe.zcard(keys.queue(queue, QueuePart.ebf))
    _, sweepable, waiting = pipe.execute()
    return Beat(bool(sweepable), int(waiting))


def retiring(redis: Any, keys: Keys, queue: str, worker: str, now: float) -> None:
    """The worker's warm shutdown began: it takes no more requests, so the stage's fair shares no longer count
    it among the workers to divide (pick.lua), though its heartbeat keeps it on the roster until it is gone."""
    redis.hset(keys.queue(queue, QueuePart.leaving), worker, repr(now))


def leave(redis: Any, keys: Keys, queue: str, *workers: str) -> None:
    """The workers are off the stage's roster, their warm shutdown's mark with them; one round trip."""
    pipe = redis.pipeline(transaction=False)
    pipe.hdel(keys.queue(queue, QueuePart.seen), *workers)
    pipe.hdel(keys.queue(queue, QueuePart.leaving), *workers)
    pipe.execute()


def last_beats(redis: Any, keys: Keys, workers: Iterable[tuple[str, str]]) -> list[str | None]:
    """Each (worker, stage queue)'s last beat as stored (epoch seconds), None for one not on the roster; one
    round trip."""
    pipe = redis.pipeline(transaction=False)
    for worker, queue in workers:
        pipe.hget(keys.queue(queue, QueuePart.seen), worker)
    return pipe.execute()
