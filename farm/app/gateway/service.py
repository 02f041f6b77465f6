"""What the gateway does for a tenant, whatever protocol it speaks: open, submit, read, cancel and seal,
in the tenant's names and within its limits. The HTTP routes only translate to and from these calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, Iterable

from farm.app.gateway.auth import Directory
from farm.app.gateway.bell import ResultsBell, stream_id
from farm.app.gateway.config import GatewaySettings, TenantProtocols, protocols
from farm.app.gateway.hub import ResultHub
from farm.app.gateway.limits import Limits, check_payload
from farm.app.gateway.revocation import Revocations
from farm.app.gateway.rolling import Joined, Roller, Rolling, runs_again
from farm.app.gateway.waiting import WaitingSlots
from farm.client.aio import AsyncBatch, AsyncRewardClient
from farm.client.core import BatchInfo, GroupTracker, arrivals, done_entries
from farm.errors import BatchClosed, BatchNotFound, FarmError, InvalidInput, LimitExceeded
from farm.protocol import reads
from farm.protocol.calls import Cap
from farm.protocol.ids import check_cursor
from farm.protocol.live import Progress
from farm.protocol.scope import Scope
from farm.protocol.silence import Touched
from farm.results import Result
from farm.store.tenants import Tenant

log = logging.getLogger(__name__)
# How often an idle gateway's upkeep looks for rolling batches anyway, with no sample joined and no call waiting
# here: a partly filled batch another gateway process opened and left (it died) is sealed this much later than
# its rollover. Everything else it does is for samples and calls of its own, which wake it.
IDLE_UPKEEP_S = 30.0
# Rolling batches whose fields (pipeline, size) a gateway process keeps: a batch's fields never change once it is
# open, so its samples after the first need not read them (a batch the farm lost since is restored by the submit)
KNOWN_BATCHES = 1024


@dataclass(frozen=True)
class Caller:
    """An authenticated tenant and its names on the farm."""

    tenant: Tenant
    scope: Scope

    @property
    def protocols(self) -> TenantProtocols:
        return protocols(self.tenant.config)


@dataclass(frozen=True)
class Page:
    results: list[Result]
    cursor: str
    complete: bool


class Gateway:
    def __init__(self, client: AsyncRewardClient, directory: Directory, settings: GatewaySettings) -> None:
        if client.keep_alive is not None:  # a tenant's batch lives by the tenant's own calls, not by this process
            client.keep_alive.close()
            client.keep_alive = None
        self.client, self.directory, self.settings = client, directory, settings
        self.bell = ResultsBell(client.settings.redis_url, client.session.keys,
                                lambda conn_id: client.redis.client_unblock(conn_id))
        self.waiting = WaitingSlots()
        self.hub = ResultHub(client, self.bell)
        self.revocations = Revocations(on_wait=self.stir)  # a revoked tenant's waits end (farm.app.gateway.revocation)
        self._stirred = asyncio.Event()  # a sample joined or a call began to wait: the upkeep has work again
        self._limits: Limits | None = None
        self._roller: Roller | None = None
        self._known: dict[str, BatchInfo] = {}  # farm id -> a rolling batch's fields, oldest first

    # Scripts are made on first use (the client's Redis needs a running loop) and serve every loop: each call
    # passes the loop's connection, which also loads the script there when Redis lacks it.
    @property
    def limits(self) -> Limits:
        if self._limits is None:
            self._limits = Limits(self.client.redis, self.client.settings.namespace)
        return self._limits

    @property
    def roller(self) -> Roller:
        if self._roller is None:
            self._roller = Roller(self.client.redis, self.client.settings.namespace)
        return self._roller

    async def caller(self, token: str | None) -> Caller:
        tenant = await self.directory.tenant(token)
        return Caller(tenant, Scope(tenant.id))

    # -- batches

    async def open(self, caller: Caller, task: str, pipeline: str, size: int, batch_id: str | None,
                   group_size: int | None) -> Progress:
        farm_id, farm_task = caller.scope.batch(batch_id), caller.scope.task(task)
        limits = caller.tenant.limits
        added = await self.client.call(lambda r: self.limits.admit_batch(r, caller.tenant.id, farm_id,
                                                                         limits.open_batches))
        try:
            batch = await self.client.open_batch(farm_task, pipeline, size, farm_id, group_size=group_size)
        except InvalidInput:
            if added:  # refused (a bad size, a conflict with another batch of that id): it is not open
                await self.client.call(lambda r: self.limits.forget_batch(r, caller.tenant.id, farm_id))
            raise
        return await batch.progress()

    async def progress(self, caller: Caller, batch_id: str) -> Progress:
        return await self.client.progress(caller.scope.batch(batch_id))

    async def submit(self, caller: Caller, batch_id: str, items: list[tuple[str, Any, Any]]) -> list[str]:
        """Submit `(request id, payload, group)` items; their kinds in order."""
        limits = caller.tenant.limits
        for request_id, payload, _ in items:
            check_payload(request_id, payload, limits.payload_bytes)
        farm_id = caller.scope.batch(batch_id)
        progress = await self.client.call(lambda r: self.limits.admit_requests(
            r, caller.tenant.id, len(items), limits.queued_requests, farm_id))
        return await AsyncBatch(self.client, BatchInfo.of(progress, cap_of(caller))).submit_many(items)

    async def cancel(self, caller: Caller, batch_id: str) -> str:
        batch = await self.client.batch(caller.scope.batch(batch_id))
        return await batch.cancel()

    async def heartbeat(self, caller: Caller, batch_id: str) -> str:
        """A sign of life from the tenant's trainer (farm.protocol.silence): the batch's state; BatchAbandoned
        once the farm abandoned it."""
        return (await self._touch(caller.scope.batch(batch_id))).state_or_raise()

    async def _touch(self, farm_id: str) -> Touched:
        """A tenant reading or waiting on its batch is alive; BatchNotFound when there is no such batch."""
        [touched] = await self.client.touch([farm_id])
        if touched.state == "unknown":
            raise BatchNotFound(f"no batch {farm_id!r}")  # not this tenant's, never opened, or expired
        return touched

    async def seal(self, caller: Caller, batch_id: str) -> str:
        batch = await self.client.batch(caller.scope.batch(batch_id))
        return await batch.seal()

    # -- results

    async def results(self, caller: Caller, batch_id: str, cursor: str, wait_s: float, limit: int,
                      hold: bool = True) -> Page:
        """Results after `cursor`, waiting up to `wait_s` for the first one (Unauthenticated once the tenant
        is revoked). A wait takes one of the tenant's waiting calls (unless the caller holds one already:
        `hold=False`) and no pooled connection."""
        return await self.revocations.guard(caller.tenant.id,
                                            self._results(caller, batch_id, cursor, wait_s, limit, hold))

    async def _results(self, caller: Caller, batch_id: str, cursor: str, wait_s: float, limit: int,
                       hold: bool) -> Page:
        check_cursor(cursor)
        farm_id = caller.scope.batch(batch_id)
        await self._touch(farm_id)  # the batch's existence, and a sign of life from its trainer
        page = await self._page(farm_id, cursor, limit)
        deadline = time.monotonic() + min(max(wait_s, 0.0), self.settings.max_wait_s)
        if page is None and deadline > time.monotonic():
            with self.waiting.hold(caller.tenant) if hold else nullcontext():
                async with self.bell.waiting_on(farm_id, cursor) as waiter:
                    # read again once registered: what arrived between the first read and now rang no bell
                    while (page := await self._page(farm_id, cursor, limit)) is None:
                        if not await waiter.wait(deadline - time.monotonic()):
                            break
        if page is None:  # nothing after the cursor: complete if the batch has ended
            return Page([], cursor, (await self.client.progress(farm_id)).finished)
        return page

    async def _page(self, farm_id: str, cursor: str, limit: int) -> Page | None:
        """The results after `cursor` read now, or None when there are none yet (nor the end marker)."""
        keys = self.client.session.keys
        reply = await self.client.call(lambda r: reads.results_after(r, keys, farm_id, cursor, limit))
        out, complete = [], False  # the end marker follows the last result: complete once it is read
        for _, entries in reply or ():
            for cursor, result in done_entries(entries):
                if result is None:
                    complete = True
                else:
                    out.append(result)
        return Page(out, cursor, complete) if out or complete else None

    async def groups(self, caller: Caller, batch_id: str, after: int, wait_s: float
                     ) -> tuple[list[tuple[str, list[Result]]], bool]:
        """Every group completed so far, in the order they completed (stable across calls), waiting up to
        `wait_s` for more than `after` of them; and whether the batch has ended."""
        return await self.revocations.guard(caller.tenant.id, self._groups(caller, batch_id, after, wait_s))

    async def _groups(self, caller: Caller, batch_id: str, after: int, wait_s: float
                      ) -> tuple[list[tuple[str, list[Result]]], bool]:
        deadline = time.monotonic() + min(max(wait_s, 0.0), self.settings.max_wait_s)
        farm_id = caller.scope.batch(batch_id)
        await self._touch(farm_id)
        done, ended, last = await self._completed_groups(farm_id)
        if len(done) > after or ended or deadline <= time.monotonic():
            return done, ended
        with self.waiting.hold(caller.tenant):
            async with self.bell.waiting_on(farm_id, last) as waiter:
                while True:
                    done, ended, last = await self._completed_groups(farm_id)
                    if len(done) > after or ended:
                        return done, ended
                    waiter.cursor = stream_id(last)  # only a result after those read can complete a group
                    if not await waiter.wait(deadline - time.monotonic()):
                        return done, ended

    async def _completed_groups(self, farm_id: str) -> tuple[list[tuple[str, list[Result]]], bool, str]:
        """The completed groups, whether the batch ended, and the id of the last entry read."""
        keys = self.client.session.keys

        async def read(r):
            pipe = r.pipeline(transaction=False)
            reads.progress(pipe, keys, farm_id)
            reads.groups(pipe, keys, farm_id)
            reads.all_results(pipe, keys, farm_id)
            return await pipe.execute()
        head, group_counts, entries = await self.client.call(read)
        if not head:
            raise BatchNotFound(f"no batch {farm_id!r}")
        size = int(head["size"])
        arrived = arrivals(head.get("arrived"), group_counts, size)
        tracker, done, ended = GroupTracker(int(head["group_size"]) if head.get("group_size") else None), [], False
        last = "0-0"
        for last, result in done_entries(entries):
            if result is None:
                ended = True
            elif tracker.add(result):
                done += tracker.ready(arrived)
        if ended:
            done += tracker.rest()
        return done, ended, last

    # -- one sample per call (OpenRLHF, SandboxFusion)

    async def one(self, caller: Caller, protocol: str, rolling: Rolling, key: str, payload: Any,
                  wait_s: float, replay: bool = True, again: bool = True) -> Result:
        """Join the tenant's rolling batch of `protocol` with one request and wait for its result (a
        retried call finds the same request; `rolling.runs_again` says when it runs it again instead);
        TimeoutError after `wait_s`, Unauthenticated once the tenant is revoked."""
        try:
            return await self.revocations.guard(caller.tenant.id,
                                                self._one(caller, protocol, rolling, key, payload, wait_s, replay))
        except LookupError as exc:
            # its batch was sealed between its joining and its submit, or cancelled, and ended without it: it
            # joins the current batch (once: a second time means something else is wrong)
            if not again:
                raise FarmError(f"the request was not taken by its batch: {exc}") from exc
            await self.client.call(lambda r: self.roller.forget(r, caller.tenant.id, protocol, key))
            return await self.one(caller, protocol, rolling, key, payload, wait_s, replay, again=False)

    async def _one(self, caller: Caller, protocol: str, rolling: Rolling, key: str, payload: Any,
                   wait_s: float, replay: bool) -> Result:
        check_payload(key[:32], payload, caller.tenant.limits.payload_bytes)  # before it joins: it leaves nothing
        joined = await self._join(caller, protocol, rolling, key)
        if joined.seen and runs_again(await self._stored(caller, joined), replay):
            joined = await self._join(caller, protocol, rolling, key, stale=joined)
        if joined.seal is not None:
            await self._seal_quietly(caller.scope.batch(joined.seal))
        farm_id = caller.scope.batch(joined.batch_id)
        try:
            info = await self._info(caller, rolling, joined, farm_id)
            try:  # a retried sample is a duplicate: a no-op
                await AsyncBatch(self.client, replace(info, cap=cap_of(caller))).submit(joined.request_id, payload)
            except BatchClosed:
                pass  # sealed after this sample joined it (it arrived before, as a retry does): its result is there
        except LimitExceeded:  # refused (open batches or requests outstanding): the sample leaves its batch
            seal = await self.client.call(lambda r: self.roller.leave(r, caller.tenant.id, protocol, rolling, key,
                                                                      joined))
            if seal is not None:
                await self._seal_quietly(caller.scope.batch(seal))
            raise
        try:
            return await self.hub.wait(farm_id, joined.request_id, wait_s)
        except LookupError:  # its batch ended without it: samples to come must not join that batch
            await self.client.call(lambda r: self.roller.roll_past(r, caller.tenant.id, protocol, joined))
            raise

    async def _info(self, caller: Caller, rolling: Rolling, joined: Joined, farm_id: str) -> BatchInfo:
        """The sample's batch's fields: known from an earlier sample, else read (and the batch opened when it is not
        yet: concurrent openers attach). Known only for a new sample, which the join put in the tenant's current
        batch: a retry may name a batch that ended since, which must be opened again within the tenant's limits."""
        info = None if joined.seen else self._known.get(farm_id)
        if info is not None:
            return info
        try:
            info = (await self.client.batch(farm_id)).info
        except BatchNotFound:
            info = BatchInfo.of(await self.open(caller, rolling.task, rolling.pipeline, rolling.batch_size,
                                                joined.batch_id, None))
        self._known[farm_id] = info
        while len(self._known) > KNOWN_BATCHES:
            del self._known[next(iter(self._known))]
        return info

    async def _join(self, caller: Caller, protocol: str, rolling: Rolling, key: str,
                    stale: Joined | None = None) -> Joined:
        """The sample's batch and request; LimitExceeded before it joins as a new request past the tenant's limit."""
        most = caller.tenant.limits.queued_requests
        joined = await self.client.call(lambda r: self.roller.join(r, caller.tenant.id, protocol, rolling, key,
                                                                   time.time(), stale, most))
        self.stir()  # a rolling batch to seal once its samples stop
        return joined

    async def _stored(self, caller: Caller, joined: Joined) -> Result | None:
        """The result the sample's request already has, if it finished."""
        farm_id, keys = caller.scope.batch(joined.batch_id), self.client.session.keys
        stored = await self.client.call(lambda r: reads.stored_result(r, keys, farm_id, joined.request_id))
        return None if stored is None else Result.from_dict(json.loads(stored))

    async def _seal_quietly(self, farm_id: str) -> None:
        try:
            batch = await self.client.batch(farm_id)
            await batch.seal()
        except BatchNotFound:
            pass

    # -- upkeep, run in the background of every gateway process

    async def seal_idle(self) -> int:
        """Seal the rolling batches whose samples stopped coming."""
        return (await self._seal_idle())[0]

    async def _seal_idle(self) -> tuple[int, int]:
        """Seal the rolling batches whose samples stopped coming; how many it sealed, and how many tenants'
        rolling batches it looked at."""
        sealed = 0
        roller = self.roller
        states = await self.client.call(roller.states)
        for state in states:
            found = await self.client.call(lambda r: roller.idle(r, state, time.time()))
            if found is not None:
                tenant_id, name = found
                await self._seal_quietly(Scope(tenant_id).batch(name))
                sealed += 1
        return sealed, len(states)

    async def end_revoked(self) -> set[int]:
        """End the waits of tenants revoked since they began; those tenants."""
        revoked = await self.directory.revoked(self.revocations.waiting())
        for tenant_id in revoked:
            self.revocations.revoke(tenant_id)
        return revoked

    def stir(self) -> None:
        """Something for the upkeep to watch has begun here (a sample joined a rolling batch, a call waits)."""
        self._stirred.set()

    async def upkeep(self) -> None:
        """The background round of every gateway process: every `roll_check_s` while it has something to watch,
        rolling batches (sealed once their samples stop) or calls waiting here (revoked tenants' end within
        `auth_ttl_s`; lapsed leases are given back every `sweep_s` while they wait). With neither, nothing is due
        until a sample joins or a call waits here, which wakes it (`stir`): an idle gateway does not wake every
        second. It still looks every IDLE_UPKEEP_S, for the rolling batches of another gateway process."""
        last_sweep = last_revoked = 0.0
        while True:
            self._stirred.clear()  # what stirs from here on is seen by this round or wakes the next wait
            watching = True
            try:  # first: it needs the store only, not the farm
                if time.monotonic() - last_revoked >= self.settings.auth_ttl_s:  # as often as lookups renew
                    await self.end_revoked()
                    last_revoked = time.monotonic()
                _, rolling = await self._seal_idle()
                if time.monotonic() - last_sweep >= self.settings.sweep_s:
                    await self.client.sweep()  # leases of workers that died return to the queues
                    last_sweep = time.monotonic()
                watching = bool(rolling or self.revocations.waiting())
            except Exception as exc:  # keep going: the next round may find the farm back
                log.warning("gateway upkeep failed: %s", exc)
            if watching:
                await asyncio.sleep(self.settings.roll_check_s)
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stirred.wait(), IDLE_UPKEEP_S)
            last_sweep = last_revoked = 0.0  # after a quiet spell the next round does all it does

    async def close(self) -> None:
        await self.hub.close()
        await self.bell.close()
        await self.client.close()


def cap_of(caller: Caller) -> Cap:
    """The tenant's limit on requests outstanding, as the submit scripts check it."""
    return Cap(caller.tenant.id, caller.tenant.limits.queued_requests)


def unscoped(caller: Caller, result: Result) -> dict[str, Any]:
    d = result.to_dict()
    d["batch_id"] = caller.scope.own_batch(result.batch_id)
    return d


def items_of(requests: Iterable[Any]) -> list[tuple[str, Any, Any]]:
    return [(r.request_id, r.payload, r.group) for r in requests]
