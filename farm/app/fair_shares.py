"""The tenants' fair shares, from the store (where `farm tenants` keeps them) to the Redis hash the pick reads
(`Keys.shares`: tenant label -> `FairShare.encode()`), and back for the reports.

The hash is rewritten whole, in one transaction, so a pick never reads half of an update and a revoked
tenant's entry goes with it. `farm tenants create/set/revoke` publish at once when they are given the farm's
Redis; the planner's process publishes every `EVERY_S` as well (`keep_published`), so a Redis that restarted
empty, or a change made without naming Redis, counts within that time. A tenant missing from the hash is
served as `farm.protocol.shares.DEFAULT` (a share of 1, no cap).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from farm.protocol.keys import Keys, text
from farm.protocol.scope import tenant_label
from farm.protocol.shares import FairShare, ShareError

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from farm.store.tenants import Tenant

log = logging.getLogger(__name__)

EVERY_S = 30.0  # the planner's process republishes this often
HOLD_EVERY_S = 0.25  # `held` puts its entries back this often (the gap after a republish that dropped them)


def publish(redis: Any, namespace: str, tenants: Iterable[Tenant]) -> dict[str, str]:
    """Replace the hash with every active tenant's share, atomically (MULTI: DEL, then one HSET); what was
    written, label -> encoded share."""
    active = [t for t in tenants if t.active]
    entries = {tenant_label(t.id): t.fair_share.encode() for t in active}
    keys = Keys(namespace)
    pipe = redis.pipeline(transaction=True)
    pipe.delete(keys.shares)
    if entries:
        pipe.hset(keys.shares, mapping=entries)
    _flag(pipe, keys, any(t.fair_share.reserve for t in active))
    pipe.execute()
    return entries


def _flag(pipe: Any, keys: Keys, reserving: bool) -> None:
    """`Keys.reserving`, which tells the submit scripts to leave notices for preemption (preempt.lua), as the
    shares say: set while one of them is reserved."""
    if reserving:
        pipe.set(keys.reserving, "1")
    else:
        pipe.delete(keys.reserving)


def sync_reserving(redis: Any, namespace: str) -> None:
    """Set `Keys.reserving` from the hash as it is (after a change of some entries only); an entry that does not
    decode counts as the default, as the pick reads it."""
    keys = Keys(namespace)
    reserving = False
    for raw in redis.hvals(keys.shares):
        try:
            reserving = reserving or FairShare.decode(raw).reserve
        except (ShareError, ValueError, TypeError, AttributeError):
            pass
    pipe = redis.pipeline(transaction=False)
    _flag(pipe, keys, reserving)
    pipe.execute()


def put(redis: Any, namespace: str, shares: Mapping[str, FairShare]) -> dict[str, str]:
    """Set these tenants' entries (label -> share) and leave the others' as they are; what was written."""
    entries = {label: share.encode() for label, share in shares.items()}
    if entries:
        redis.hset(Keys(namespace).shares, mapping=entries)
        sync_reserving(redis, namespace)
    return entries


@contextmanager
def held(redis: Any, namespace: str, shares: Mapping[str, FairShare],
         every_s: float = HOLD_EVERY_S) -> Iterator[dict[str, str]]:
    """Shares that no tenant of the store holds (a replay's tenants) in force while the block runs: `put` now
    and every `every_s`, since the planner's process replaces the hash whole from the store every `EVERY_S`
    (so an entry may be missing for up to `every_s` after that); afterwards those labels' entries as they were
    before (none where there was none)."""
    key = Keys(namespace).shares
    labels = list(shares)
    before = dict(zip(labels, redis.hmget(key, labels))) if labels else {}
    written = put(redis, namespace, shares)
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(every_s):
            try:
                put(redis, namespace, shares)
            except Exception:  # Redis restarting: the next round puts them back
                log.warning("fair shares: could not put the replay's shares back", exc_info=True)

    thread = threading.Thread(target=keep, name="fair-shares-held", daemon=True) if labels else None
    if thread is not None:
        thread.start()
    try:
        yield written
    finally:
        stop.set()
        if thread is not None:
            thread.join(5)
        if labels:
            pipe = redis.pipeline(transaction=True)
            for label, raw in before.items():
                pipe.hdel(key, label) if raw is None else pipe.hset(key, label, raw)
            pipe.execute()
            sync_reserving(redis, namespace)


def publish_from_store(engine: Engine, redis: Any, namespace: str) -> dict[str, str]:
    """Publish the shares of the tenants the store holds now."""
    # imported here: `farm status` reads the hash through this module and loads no SQL
    from farm.store.tenants import list_tenants

    return publish(redis, namespace, list_tenants(engine, include_revoked=False))


def read(redis: Any, namespace: str) -> dict[str, FairShare]:
    """The shares in force (what the pick reads), by tenant label; an entry that cannot be read is left out
    with a warning (the pick serves that tenant as the default too)."""
    out: dict[str, FairShare] = {}
    for label, raw in sorted(redis.hgetall(Keys(namespace).shares).items()):
        try:
            out[text(label)] = FairShare.decode(raw)
        except (ShareError, ValueError, TypeError, AttributeError) as exc:
            log.warning("fair shares: the entry of %s is not a fair share (%s): %.200r", text(label), exc, raw)
    return out


def keep_published(engine: Engine | None, redis: Any, namespace: str, stop: threading.Event,
                   every_s: float = EVERY_S) -> None:
    """Publish now and every `every_s` until `stop` is set; a failure is logged and tried again next time.
    Without a store (`engine` None) there is nothing to publish: return at once."""
    if engine is None:
        return
    while True:
        try:
            publish_from_store(engine, redis, namespace)
        except Exception:  # a store or Redis down, whatever it is: the planner goes on, the next round retries
            log.warning("fair shares: could not publish the tenants' shares to Redis", exc_info=True)
        if stop.wait(every_s):
            return


def start_publishing(engine: Engine | None, redis: Any, namespace: str,
                     every_s: float = EVERY_S) -> tuple[threading.Event, threading.Thread | None]:
    """`keep_published` in a daemon thread; set the event to stop it (None: no store, no thread)."""
    stop = threading.Event()
    if engine is None:
        return stop, None
    thread = threading.Thread(target=keep_published, args=(engine, redis, namespace, stop, every_s),
                              name="fair-shares", daemon=True)
    thread.start()
    return stop, thread
