"""The recorder: drains the history stream (`farm.events`) into the store in bulk, off the hot path.

Exactly-once by construction: the id of the last entry written is stored in the same transaction as
the rows (table `recorder_offsets`, row locked while a chunk is written), so a restart resumes after
it and neither loses nor duplicates; the writes are idempotent upserts besides. What is committed is
then trimmed from the stream. A bad entry is logged and skipped, never retried forever.

Batched by time: a chunk's cost is mostly per transaction (the offset's lock and save, a statement per table,
the batches' refresh, the trim), so once an idle recorder is woken by a new entry it lets `gather_s` pass
before it drains, and what arrived meanwhile is written in one transaction: a few events per chunk instead of
one, at the price of history landing in the store up to `gather_s` later.

While the store is down the stream buffers; the recorder says how far behind it is, warns from half the
stream's cap and, once the cap drops entries it had not recorded, logs an error and counts the overflow
(`farm.protocol.counters`) for `farm status` and the metrics. After a commit, `on_recorded` sees the events
written (the metrics count them there, once each).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import redis as redis_lib
from sqlalchemy import Engine, bindparam, select, update
from sqlalchemy.exc import DBAPIError, OperationalError, StatementError

from farm.config import Settings
from farm.events import decode, stream_key
from farm.protocol import counters
from farm.protocol.keys import text
from farm.protocol.scripts import EVENTS_MAXLEN
from farm.protocol.stream import WARN_FILL, StreamHealth, health
from farm.store.engine import StoreError
from farm.store.ingest import BadEvent, _insert, apply_events, clean
from farm.store.models import RecorderOffset

log = logging.getLogger(__name__)

START = "0-0"
CHECK_EVERY_S = 5.0  # how often the stream's fill is looked at (and, when high, logged)
GATHER_S = 0.25  # after a wake-up, how long entries are let in before they are drained in one chunk
# How long a drained recorder's wait for the next entry blocks. An entry ends it at once, and a stop does too
# (`wake`: CLIENT UNBLOCK of the waiting connection), so it is only how often an idle recorder and its Redis wake
# for nothing (at 1 s, most of the recorder's idle CPU), and how late a stop is seen where the unblock fails. The
# waiting connection's socket timeout outlasts it by WAIT_SLACK_S (redis-py's default, 5 s, would end it first).
BLOCK_MS = 30_000
WAIT_SLACK_S = 5.0


# built once: every chunk runs them, and building a statement costs more than its cached compile
_OFFSET_FOR_UPDATE = select(RecorderOffset.last_id).where(RecorderOffset.stream == bindparam("s")).with_for_update()
_SAVE_OFFSET = (update(RecorderOffset).where(RecorderOffset.stream == bindparam("s"))
                .values(last_id=bindparam("last_id"), updated_at=bindparam("updated_at")))


def next_id(entry_id: str) -> str:
    """The smallest stream id after `entry_id` (XTRIM MINID keeps ids >= it)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def waiting_client(redis: redis_lib.Redis, socket_timeout_s: float) -> redis_lib.Redis:
    """A client of one connection to `redis`'s server, as `redis` connects (address, credentials, TLS), whose
    replies may take `socket_timeout_s`: a blocking read's, which the pool's own timeout would cut short."""
    pool = redis.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items()
              if k != "maint_notifications_pool_handler"}  # bound to the pool it came from
    kwargs["socket_timeout"] = socket_timeout_s
    if "orig_socket_timeout" in kwargs:  # what redis-py restores the timeout to after a maintenance window
        kwargs["orig_socket_timeout"] = socket_timeout_s
    return redis_lib.Redis(connection_pool=redis_lib.ConnectionPool(connection_class=pool.connection_class, **kwargs),
                           single_connection_client=True)


class Recorder:
    """Writes the events of one farm namespace into the store.

    `run_once()` drains what the stream holds now (tests, `farm recorder --once`); `run_forever(stop)`
    keeps draining, waiting on the stream between chunks, until `stop` is set.
    """

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        *,
        redis: redis_lib.Redis | None = None,
        chunk: int = 2000,
        block_ms: int = BLOCK_MS,
        trim: bool = True,
        on_recorded: Callable[[list[dict[str, Any]]], Any] | None = None,
        cap: int = EVENTS_MAXLEN,
        gather_s: float = GATHER_S,
    ) -> None:
        self._owns_redis = redis is None
        if redis is None:
            if not settings.redis_url:
                raise StoreError("the recorder needs the farm's Redis: set FARM_REDIS_URL or pass a client")
            redis = redis_lib.Redis.from_url(settings.redis_url)
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, not {chunk}")
        if not gather_s >= 0:
            raise ValueError(f"gather_s must be >= 0, not {gather_s}")
        self.redis = redis
        # the wait for the next entry has a connection of its own (made at the first wait), so that `wake` can
        # name it to Redis
        self._waiter: redis_lib.Redis | None = None
        self._waiter_id: int | None = None
        self._stopping = False  # `wake` was called: no new wait begins
        self.engine = engine
        self.stream = stream_key(settings.namespace)
        self.chunk = chunk
        self.block_ms = block_ms
        self.gather_s = gather_s
        self.trim = trim
        self.on_recorded = on_recorded
        self.cap = cap  # the stream's cap, as the farm's emitters trim it
        self.namespace = settings.namespace
        self.consumed = 0  # entries taken off the stream, skipped ones included
        self.skipped = 0
        self._last: str | None = None  # the committed offset, once this recorder has seen it
        self._checked_at = float("-inf")
        self._overflowing = False  # an overflow episode is under way (counted once, at its start)
        self.stream_health: StreamHealth | None = None  # as last checked

    # ------------------------------------------------------------ offsets

    def last_id(self) -> str:
        """The id of the last entry recorded (`0-0` before the first)."""
        with self.engine.connect() as conn:
            found = conn.execute(select(RecorderOffset.last_id).where(RecorderOffset.stream == self.stream)).scalar()
        return found or START

    def _lock_offset(self, conn) -> str:
        # FOR UPDATE: a second recorder on the same namespace waits instead of writing the same chunk twice.
        # The row is made only where it is missing (the first chunk of a stream): one statement per chunk.
        locked = self._offset_for_update(conn)
        if locked is None:
            stmt = _insert(conn, RecorderOffset).values(stream=self.stream, last_id=START, updated_at=time.time())
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["stream"]))
            locked = self._offset_for_update(conn)
        return locked

    def _offset_for_update(self, conn) -> str | None:
        return conn.execute(_OFFSET_FOR_UPDATE, {"s": self.stream}).scalar()

    def _save_offset(self, conn, last_id: str) -> None:
        conn.execute(_SAVE_OFFSET, {"s": self.stream, "last_id": last_id, "updated_at": time.time()})

    # ------------------------------------------------------------ draining

    def _decode(self, entries) -> list[tuple[str, dict[str, Any]]]:
        """(id, clean event) of the good entries; the bad ones are counted and logged."""
        good = []
        for entry_id, fields in entries:
            try:
                good.append((text(entry_id), clean(decode(fields))))
            except (BadEvent, ValueError, TypeError, AttributeError) as exc:
                self.skipped += 1
                log.warning("history entry %s of %s skipped: %s", text(entry_id), self.stream, exc)
        return good

    def _write_one_by_one(self, events: list[tuple[str, dict[str, Any]]], last: str) -> list[dict[str, Any]]:
        """After a chunk failed in the database: write its events singly, skipping the ones that fail; the
        events written."""
        written = []
        for entry_id, event in events:
            try:
                with self.engine.begin() as conn:
                    self._lock_offset(conn)
                    apply_events(conn, [event])
                    self._save_offset(conn, entry_id)
                written.append(event)
            except OperationalError:
                raise
            except (StatementError, DBAPIError) as exc:
                self.skipped += 1
                log.warning("history entry %s of %s skipped: the store refused it: %s", entry_id, self.stream, exc)
        with self.engine.begin() as conn:
            self._lock_offset(conn)
            self._save_offset(conn, last)
        return written

    def drain_chunk(self) -> int:
        """Record up to `chunk` entries after the saved offset; the number taken off the stream."""
        entries, events = None, []
        try:
            with self.engine.begin() as conn:
                after = self._lock_offset(conn)
                entries = self.redis.xrange(self.stream, min=f"({after}", count=self.chunk)
                if not entries:
                    self._last = after
                    return 0
                events = self._decode(entries)
                written = [event for _, event in events]
                apply_events(conn, written)
                last = text(entries[-1][0])
                self._save_offset(conn, last)
        except OperationalError:
            raise
        except (StatementError, DBAPIError) as exc:
            if not entries:
                raise
            log.warning("a chunk of %s failed in the store (%s); writing its entries one by one", self.stream, exc)
            last = text(entries[-1][0])
            written = self._write_one_by_one(events, last)
        self._last = last
        self.consumed += len(entries)
        self._recorded(written)
        if self.trim:
            self.redis.xtrim(self.stream, minid=next_id(last), approximate=False)
        return len(entries)

    def _recorded(self, events: list[dict[str, Any]]) -> None:
        if self.on_recorded is None or not events:
            return
        try:
            self.on_recorded(events)
        except Exception:  # what watches the history never stops it being written
            log.warning("the recorder's on_recorded hook failed", exc_info=True)

    def check_stream(self, now: float | None = None) -> StreamHealth:
        """Look at the stream's fill; warn when it is high, and loudly when the cap drops unrecorded entries
        (an error every check while it lasts, one overflow counted per episode)."""
        now = time.time() if now is None else now
        found = health(self.redis, self.namespace, now=now, cap=self.cap)
        self.stream_health, self._checked_at = found, now
        if found.at_cap:
            lost = f"after {self._last} " if self._last else ""
            if not self._overflowing:
                counters.record_overflow(self.redis, self.namespace, at=now,
                                         lost_before=found.oldest_id, lost_after=self._last)
            log.error("history LOST: %s is at its cap of %d entries while the recorder is behind (oldest %.0f s old): "
                      "unrecorded entries %sbefore %s were dropped, and more go with every new one. Bring the history "
                      "store back (or start the recorder) so the stream drains.", self.stream, found.cap,
                      found.oldest_age_s, lost, found.oldest_id)
        elif found.fill >= WARN_FILL:
            log.warning("the recorder is behind: %s holds %d of at most %d entries (oldest %.0f s old); past the "
                        "cap the oldest are lost", self.stream, found.length, found.cap, found.oldest_age_s)
        self._overflowing = found.at_cap
        return found

    def _maybe_check(self) -> None:
        if time.time() - self._checked_at >= CHECK_EVERY_S:
            try:
                self.check_stream()
            except redis_lib.RedisError as exc:
                log.warning("could not read the fill of %s: %s", self.stream, exc)

    def run_once(self) -> int:
        """Drain everything in the stream now; the number of entries taken."""
        total = 0
        while True:
            n = self.drain_chunk()
            total += n
            if n < self.chunk:
                return total

    def run_forever(self, stop: threading.Event, *, retry_s: float = 2.0) -> None:
        """Drain until `stop` is set; a store or Redis outage is logged and retried, never fatal."""
        pending = True
        while not stop.is_set():
            if pending:  # a wait that ended empty added nothing to the stream: its fill is as last looked at
                self._maybe_check()
            try:
                if pending and self.drain_chunk() >= self.chunk:
                    continue
                # drained: wait for the next entry without taking it, and touch the store only then
                after = self._last or self.last_id()
                pending = bool(self._wait(after))
                if pending and self.gather_s:
                    stop.wait(self.gather_s)  # let the entries that follow this one in: one chunk for them all
            except (OperationalError, redis_lib.RedisError) as exc:
                behind = self.stream_health
                lag = f" ({behind.length} entries waiting in the stream)" if behind is not None else ""
                log.warning("recorder of %s: %s; retrying in %.0f s%s", self.stream, exc, retry_s, lag)
                pending = True
                self._waiter_id = None  # its connection may be a new one now
                stop.wait(retry_s)

    def _wait(self, after: str) -> Any:
        """The next entry after `after` (without taking it), or nothing once `block_ms` passed or `wake` ended it."""
        if self._waiter is None:
            self._waiter = waiting_client(self.redis, self.block_ms / 1000 + WAIT_SLACK_S)
        if self._waiter_id is None:
            self._waiter_id = int(self._waiter.client_id())
        if self._stopping:
            return None
        return self._waiter.xread({self.stream: after}, count=1, block=self.block_ms)

    def wake(self) -> None:
        """End the wait for the next entry now: `run_forever`'s stop was set, and it is seen at once rather than
        after `block_ms`. Safe from any thread but a signal handler; where the unblock fails (the waiting
        connection was replaced unseen, Redis refuses CLIENT), the wait ends by its timeout."""
        self._stopping = True
        waiter = self._waiter_id
        if waiter is None:
            return
        try:
            self.redis.client_unblock(waiter)
        except redis_lib.RedisError as exc:
            log.info("could not cut the recorder's wait short (%s); it ends within %d ms", exc, self.block_ms)

    def close(self) -> None:
        """Close the Redis client if the recorder made it (a client passed in stays open)."""
        if self._waiter is not None:
            self._waiter.close()
            self._waiter.connection_pool.disconnect()  # its own pool (waiting_client): no one else closes it
        if self._owns_redis:
            self.redis.close()
