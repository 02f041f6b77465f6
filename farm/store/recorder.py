"""The recorder: drains the history stream (`farm.events`) into the store in bulk, off the hot path.

Exactly-once by construction: the id of the last entry written is stored in the same transaction as
the rows (table `recorder_offsets`, row locked while a chunk is written), so a restart resumes after
it and neither loses nor duplicates; the writes are idempotent upserts besides. What is committed is
then trimmed from the stream. A bad entry is logged and skipped, never retried forever.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis as redis_lib
from sqlalchemy import Engine, select, update
from sqlalchemy.exc import DBAPIError, OperationalError, StatementError

from farm.config import Settings
from farm.events import decode, stream_key
from farm.store.engine import StoreError
from farm.store.ingest import BadEvent, _insert, apply_events, clean
from farm.store.models import RecorderOffset

log = logging.getLogger(__name__)

START = "0-0"


def next_id(entry_id: str) -> str:
    """The smallest stream id after `entry_id` (XTRIM MINID keeps ids >= it)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
        block_ms: int = 1000,
        trim: bool = True,
    ) -> None:
        self._owns_redis = redis is None
        if redis is None:
            if not settings.redis_url:
                raise StoreError("the recorder needs the farm's Redis: set FARM_REDIS_URL or pass a client")
            redis = redis_lib.Redis.from_url(settings.redis_url)
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, not {chunk}")
        self.redis = redis
        self.engine = engine
        self.stream = stream_key(settings.namespace)
        self.chunk = chunk
        self.block_ms = block_ms
        self.trim = trim
        self.consumed = 0  # entries taken off the stream, skipped ones included
        self.skipped = 0
        self._last: str | None = None  # the committed offset, once this recorder has seen it

    # ------------------------------------------------------------ offsets

    def last_id(self) -> str:
        """The id of the last entry recorded (`0-0` before the first)."""
        with self.engine.connect() as conn:
            found = conn.execute(select(RecorderOffset.last_id).where(RecorderOffset.stream == self.stream)).scalar()
        return found or START

    def _lock_offset(self, conn) -> str:
        stmt = _insert(conn, RecorderOffset).values(stream=self.stream, last_id=START, updated_at=time.time())
        conn.execute(stmt.on_conflict_do_nothing(index_elements=["stream"]))
        # FOR UPDATE: a second recorder on the same namespace waits instead of writing the same chunk twice
        return conn.execute(
            select(RecorderOffset.last_id).where(RecorderOffset.stream == self.stream).with_for_update()
        ).scalar_one()

    def _save_offset(self, conn, last_id: str) -> None:
        conn.execute(update(RecorderOffset).where(RecorderOffset.stream == self.stream)
                     .values(last_id=last_id, updated_at=time.time()))

    # ------------------------------------------------------------ draining

    def _decode(self, entries) -> list[tuple[str, dict[str, Any]]]:
        """(id, clean event) of the good entries; the bad ones are counted and logged."""
        good = []
        for entry_id, fields in entries:
            try:
                good.append((_str(entry_id), clean(decode(fields))))
            except (BadEvent, ValueError, TypeError, AttributeError) as exc:
                self.skipped += 1
                log.warning("history entry %s of %s skipped: %s", _str(entry_id), self.stream, exc)
        return good

    def _write_one_by_one(self, events: list[tuple[str, dict[str, Any]]], last: str) -> None:
        """After a chunk failed in the database: write its events singly, skipping the ones that fail."""
        for entry_id, event in events:
            try:
                with self.engine.begin() as conn:
                    self._lock_offset(conn)
                    apply_events(conn, [event])
                    self._save_offset(conn, entry_id)
            except OperationalError:
                raise
            except (StatementError, DBAPIError) as exc:
                self.skipped += 1
                log.warning("history entry %s of %s skipped: the store refused it: %s", entry_id, self.stream, exc)
        with self.engine.begin() as conn:
            self._lock_offset(conn)
            self._save_offset(conn, last)

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
                apply_events(conn, [event for _, event in events])
                last = _str(entries[-1][0])
                self._save_offset(conn, last)
        except OperationalError:
            raise
        except (StatementError, DBAPIError) as exc:
            if not entries:
                raise
            log.warning("a chunk of %s failed in the store (%s); writing its entries one by one", self.stream, exc)
            last = _str(entries[-1][0])
            self._write_one_by_one(events, last)
        self._last = last
        self.consumed += len(entries)
        if self.trim:
            self.redis.xtrim(self.stream, minid=next_id(last), approximate=False)
        return len(entries)

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
            try:
                if pending and self.drain_chunk() >= self.chunk:
                    continue
                # drained: wait for the next entry without taking it, and touch the store only then
                after = self._last or self.last_id()
                pending = bool(self.redis.xread({self.stream: after}, count=1, block=self.block_ms))
            except (OperationalError, redis_lib.RedisError) as exc:
                log.warning("recorder of %s: %s; retrying in %.0f s", self.stream, exc, retry_s)
                pending = True
                stop.wait(retry_s)

    def close(self) -> None:
        """Close the Redis client if the recorder made it (a client passed in stays open)."""
        if self._owns_redis:
            self.redis.close()
