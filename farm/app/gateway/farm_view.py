"""What the farm page (`/ui`) reads, kept light: one computation of each view serves every page open on this
gateway for a while (`live` for `LIVE_S`, `cost` for `COST_S`), so a page view costs the farm a few Redis and
SQL reads per second however many operators watch; each view says the CPU its computation took.

- `live`: `farm status --json`'s report (farm.app.cli.status.status_report: the same numbers), the knobs,
  each tenant's name and limits, and the latest pool sample (a page asks for `pools` whole only rarely).
- `pools`: per stage, samples of its pool (workers running, starting, pending, the planner's target, busy
  workers, queue depth) every `SAMPLE_S` over the last hour, taken by this gateway from the first page view
  on (two Redis round trips and the planner's heartbeat a sample). Before that, and over any gap of more than
  `GAP_S` between two samples, the same grid is filled from the history store (farm.store.pool_history: three
  SQL reads and the requests queued or running now), those samples marked `"backfilled": true`: an operator
  opening the page after an incident sees the hour before it.
- `cost`: per tenant and resource kind, the worker-seconds allocated over the last hour against what zero
  queueing would have held for the same batches and the seconds they ran, the floor (farm.app.cost).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import asdict
from typing import Any, Callable

import redis as redis_lib

from farm.app import fair_shares
from farm.app.cli.status import status_report
from farm.app.cost import tenant_cost
from farm.config import Settings, redis_url
from farm.protocol import heartbeat
from farm.protocol.keys import Keys
from farm.protocol.live import LiveState, depths, inspect
from farm.protocol.live_knobs import knobs_now
from farm.protocol.scope import tenant_label
from farm.store.pool_history import StagePool, StageVisit, pool_rows, pools_at
from farm.store.tenants import list_tenants

log = logging.getLogger(__name__)
LIVE_S = 2.0  # a live view serves every page for this long (a page asks every 8 s)
COST_S = 30.0  # the cost over the last hour moves slowly; its four SQL reads run this often at most
SAMPLE_S = 10.0  # a pool sample this often
GAP_S = 3 * SAMPLE_S  # a longer gap between two samples (or none yet) is filled from the history
WINDOW_S = 3600.0  # the pools' and the cost's window
MAX_BATCHES = 500  # the live view's batches, the latest first (the counts per tenant cover all)


class _Cached:
    """A view computed in a thread at most once per `ttl_s`, as JSON; concurrent readers share one computation."""

    def __init__(self, compute: Callable[[], Any], ttl_s: float) -> None:
        self.compute, self.ttl_s = compute, ttl_s
        self.value: Any = None
        self.at = float("-inf")
        self.lock = asyncio.Lock()

    async def get(self) -> bytes:
        async with self.lock:
            if time.monotonic() - self.at >= self.ttl_s:
                self.value = await asyncio.to_thread(_timed, self.compute)
                self.at = time.monotonic()
            return self.value


def _timed(compute: Callable[[], dict]) -> bytes:
    """The view as JSON, with the CPU seconds its computation took in this thread (the page's cost to the
    gateway); encoded once here for every page that reads it (FastAPI's own encoding of a dict costs more
    than the reads)."""
    cpu = time.thread_time()
    out = compute()
    out["cpu_s"] = round(time.thread_time() - cpu, 6)
    return json.dumps(out, separators=(",", ":")).encode()


class FarmView:
    def __init__(self, settings: Settings, engine: Any = None) -> None:
        self.settings, self.engine = settings, engine
        self.keys = Keys(settings.namespace)
        self.redis = redis_lib.Redis.from_url(redis_url(settings), decode_responses=True)
        self.samples: deque[dict[str, Any]] = deque(maxlen=int(WINDOW_S / SAMPLE_S) + 1)
        self.live = _Cached(self._live, LIVE_S)
        self.cost = _Cached(self._cost, COST_S)
        self._tenants: dict[str, Any] = {}
        self._tenants_at = float("-inf")
        self._sampler: asyncio.Task | None = None
        self._starting = asyncio.Lock()  # two first page views start one sampler
        self._pools_json: bytes | None = None

    # -- views

    def _live(self) -> dict[str, Any]:
        now = time.time()
        knobs = knobs_now(self.redis, self.keys)
        live = inspect(self.redis, self.settings, now=now, knobs=knobs)
        report = status_report(live, knobs, heartbeat.read(self.redis, self.settings.namespace),
                               shares=fair_shares.read(self.redis, self.settings.namespace))
        report["batch_count"] = len(report["batches"])
        report["batches"] = report["batches"][:MAX_BATCHES]
        report["knobs"] = knobs.to_dict()
        report["tenant_info"] = self._tenant_info()
        # the latest pool sample rides along: a page keeps its own hour of them and asks for all rarely
        report["pool_sample"] = self.samples[-1] if self.samples else None
        return report

    def _tenant_info(self) -> dict[str, Any]:
        """Each active tenant's name and limits, read from the store at most once per `COST_S`."""
        if self.engine is None:
            return {}
        if time.monotonic() - self._tenants_at >= COST_S:
            self._tenants = {tenant_label(t.id): {"name": t.name, "operator": t.operator, "limits": t.limits.to_dict()}
                             for t in list_tenants(self.engine, include_revoked=False)}
            self._tenants_at = time.monotonic()
        return self._tenants

    def _cost(self) -> dict[str, Any]:
        now = time.time()
        if self.engine is None:
            return {"now": now, "window_s": WINDOW_S, "tenants": {}, "store": False}
        knobs = knobs_now(self.redis, self.keys)
        tenants: dict[str, dict[str, dict[str, float]]] = {}
        for c in tenant_cost(self.engine, now - WINDOW_S, now, knobs):
            tenants.setdefault(c.tenant, {})[c.resource] = {"allocated_s": round(c.allocated_s, 3),
                                                            "zero_queue_s": round(c.zero_queue_s, 3),
                                                            "busy_s": round(c.busy_s, 3)}
        return {"now": now, "window_s": WINDOW_S, "tenants": tenants, "store": True}

    # -- the pools' samples

    def sample(self) -> dict[str, Any]:
        """One sample of every stage's pool (two round trips for the queues, one for the planner's heartbeat);
        the first one, or one after a gap, fills the samples it follows from the history first."""
        now = time.time()
        counted = depths(self.redis, self.settings, now)
        beat = heartbeat.read(self.redis, self.settings.namespace)
        pools, targets = (beat.pools, beat.targets) if beat else ({}, {})
        stages = {}
        for q in sorted(set(counted) | set(pools)):
            d, pool = counted.get(q), pools.get(q)
            stages[q] = asdict(StagePool(
                # registered workers serving it: the backend's running count where a planner reports one
                running=pool.running if pool else (d.workers if d else 0),
                starting=pool.starting if pool else 0, pending=pool.pending if pool else 0,
                target=targets.get(q), busy=d.running if d else 0, queued=d.pending if d else 0))
        point = {"at": now, "stages": stages, "backfilled": False}
        previous = self.samples[-1]["at"] if self.samples else None
        filled: list[dict[str, Any]] = []
        if self.engine is not None and (previous is None or now - previous > GAP_S):
            try:
                filled = self._backfill(previous, now)
            except Exception as exc:  # the live samples go on without the history's
                log.warning("farm page: the pools' history could not be read: %s", exc)
        if filled:  # one new deque, the live sample last: a reader never sees a backfilled one as the latest
            self.samples = deque(sorted([*self.samples, *filled], key=lambda s: s["at"]) + [point],
                                 maxlen=self.samples.maxlen)
        else:
            self.samples.append(point)
        self._pools_json = None  # encoded again at the next read, once for every page
        return point

    def _backfill(self, since: float | None, until: float) -> list[dict[str, Any]]:
        """The samples after `since` (None: the window's start) and before the live one at `until`, from the
        history store, on the live samples' grid (`until` - k `SAMPLE_S`), marked `backfilled`; none where the
        history holds no stage at all."""
        first = until - WINDOW_S if since is None else max(since + SAMPLE_S / 2, until - WINDOW_S)  # no twin at a seam
        times = [until - k * SAMPLE_S for k in range(int((until - first) / SAMPLE_S + 1e-6), 0, -1)]
        if not times:
            return []
        try:  # the requests queued or running now: the history has them only once they finish a stage
            open_visits = _open_visits(inspect(self.redis, self.settings, now=until))
        except Exception as exc:
            log.warning("farm page: the pools' history goes without the requests in flight: %s", exc)
            open_visits = []
        counted = pools_at(pool_rows(self.engine, times[0], until), times, open_visits)
        if not any(counted):
            return []
        return [{"at": t, "stages": {q: asdict(p) for q, p in pools.items()}, "backfilled": True}
                for t, pools in zip(times, counted)]

    async def pools(self) -> bytes:
        """The samples of the last hour, as JSON; the first call starts the sampling (and takes one at once,
        after the hour before it from the history)."""
        async with self._starting:
            if self._sampler is None or self._sampler.done():
                await asyncio.to_thread(self.sample)
                self._sampler = asyncio.create_task(self._sample_forever())
        if self._pools_json is None:
            cutoff = time.time() - WINDOW_S
            self._pools_json = json.dumps({"sample_s": SAMPLE_S, "window_s": WINDOW_S,
                                           "samples": [s for s in self.samples if s["at"] >= cutoff]},
                                          separators=(",", ":")).encode()
        return self._pools_json

    async def _sample_forever(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            try:
                await asyncio.to_thread(self.sample)
            except Exception as exc:  # keep sampling: the next one may find Redis back
                log.warning("farm page: a pool sample failed: %s", exc)

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        self.redis.close()


def _open_visits(live: LiveState) -> list[StageVisit]:
    """The requests waiting or running at each stage now, as visits not finished yet."""
    out = []
    for q, state in live.stages.items():
        out += [StageVisit(p.batch, p.id, q, p.enqueued_at, None, None) for p in state.pending]
        # its queue time is not in the busy record: a running request counts as queued never
        out += [StageVisit(r.batch, r.id, q, None, r.started_at, None) for r in state.running]
    return out
