"""Rolling batches for callers that send one sample per call and show no step (OpenRLHF's remote reward,
SandboxFusion's /run_code): samples join the tenant's current batch of that protocol until it holds
`batch_size` of them, or until no sample came for `rollover_s`, when it is sealed and the next sample
opens the next batch. The planner sees every batch's size at its first sample: the rollout hint.

The decision is one Lua script on the farm's Redis (farm/protocol/lua/roll_join.lua), so any number of
gateway processes agree on it. A sample is known by a key of its content: a retried call (or an identical
sample) joins the batch it joined before and maps to the same request, whatever gateway process it reaches,
for an hour (`KEY_TTL_S`). `runs_again` says when it must not: a result the farm caused is never replayed, nor
any finished one for a tenant whose config turns replay off.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from farm.errors import LimitExceeded
from farm.protocol.keys import ROLL, Keys
from farm.protocol.scripts import ROLL_IDLE, ROLL_JOIN, ROLL_LEAVE, ROLL_PAST, SOURCES, run
from farm.results import Result, Status

KEY_TTL_S = 3600  # how long a retried sample still finds its request (OpenRLHF gives up after 5 tries of 180 s)
FARM_CAUSED = frozenset({Status.INFRA_ERROR, Status.CANCELLED})  # what befell the sample, not what it is


@dataclass(frozen=True)
class Rolling:
    """How one tenant's samples of one protocol form batches (the tenant's configuration)."""

    task: str
    pipeline: str
    batch_size: int
    rollover_s: float

    def batch_id(self, protocol: str, epoch: str, index: int) -> str:
        return f"{protocol}-{epoch}-{index}"


def sample_key(*parts: Any) -> str:
    """A sample's identity: the hash of what it is, so a retry is the same request."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def runs_again(stored: Result | None, replay: bool) -> bool:
    """Whether a call that found its sample's request already finished (`stored`; None: still running, and the
    call waits on it) runs the sample again rather than answer with that result."""
    return stored is not None and (not replay or stored.status in FARM_CAUSED)


def rerun_id(request_id: str) -> str:
    """The request of a sample's next run: `<key>-r1`, `<key>-r2`, ... after the first, `<key>`."""
    key, _, run_no = request_id.partition("-r")
    return f"{key}-r{int(run_no or 0) + 1}"


@dataclass(frozen=True)
class Joined:
    batch_id: str  # the tenant's name of the batch (not yet scoped)
    request_id: str
    seal: str | None  # a batch this sample closed by arriving after an idle gap: seal it
    seen: bool = False  # the sample had joined before (a retry, or an identical call): its request may be done
    value: str = ""  # what the sample is joined as, for `join(stale=...)`
    epoch: str = ""  # the batch's place among the tenant's rolling batches, for `roll_past`
    index: int = 0


class Roller:
    """Runs the scripts (`roll_join.lua`, `roll_idle.lua`) for one farm namespace."""

    def __init__(self, redis, namespace: str) -> None:
        self.namespace = namespace
        self.keys = Keys(namespace)
        self._join = redis.register_script(SOURCES[ROLL_JOIN.name])
        self._leave = redis.register_script(SOURCES[ROLL_LEAVE.name])
        self._idle = redis.register_script(SOURCES[ROLL_IDLE.name])
        self._past = redis.register_script(SOURCES[ROLL_PAST.name])

    def state_key(self, tenant_id: int, protocol: str) -> str:
        return self.keys.roll(tenant_id, protocol)

    async def join(self, redis, tenant_id: int, protocol: str, rolling: Rolling, key: str, now: float,
                   stale: Joined | None = None, most: int | None = None) -> Joined:
        """The sample's batch and request; `stale`: what it joined before, whose result is not to be replayed
        (it joins afresh, as that request's rerun, unless a concurrent call did so first). LimitExceeded, with
        nothing stored, when it would join as a new request while the tenant has `most` requests outstanding."""
        epoch = str(int(now * 1000))
        reply = await run(self._join, self.namespace, ROLL_JOIN.call(
            tenant=tenant_id, protocol=protocol, sample=key, at=repr(now), size=rolling.batch_size,
            rollover=repr(rolling.rollover_s), ttl=KEY_TTL_S, epoch=epoch,
            request=key[:32] if stale is None else rerun_id(stale.request_id),
            stale=stale.value if stale is not None else "", most_outstanding="" if most is None else most), redis)
        if reply[0] in ("limit", b"limit"):
            raise LimitExceeded(f"this tenant has {reply[1]} requests outstanding and its limit is {most}: wait for "
                                f"results before sending more")
        index, epoch, seal, request, value, seen = reply
        sealed = rolling.batch_id(protocol, epoch, int(seal)) if int(seal) >= 0 else None
        return Joined(rolling.batch_id(protocol, epoch, int(index)), request, sealed, bool(int(seen)), value, epoch,
                      int(index))

    async def roll_past(self, redis, tenant_id: int, protocol: str, joined: Joined) -> bool:
        """The sample's batch ended without it (cancelled, abandoned): if it is still the tenant's current one,
        the next sample opens the next (else every sample would join a batch that takes none)."""
        return bool(await run(self._past, self.namespace, ROLL_PAST.call(
            tenant=tenant_id, protocol=protocol, epoch=joined.epoch, index=joined.index), redis))

    async def leave(self, redis, tenant_id: int, protocol: str, rolling: Rolling, key: str, joined: Joined
                    ) -> str | None:
        """A joined sample the farm refused (a limit) leaves its batch; the tenant's name of a batch to seal
        now that it waits for no one (farm/protocol/lua/roll_leave.lua), or None."""
        seal = await run(self._leave, self.namespace, ROLL_LEAVE.call(
            tenant=tenant_id, protocol=protocol, sample=key, epoch=joined.epoch, index=joined.index), redis)
        return rolling.batch_id(protocol, joined.epoch, int(seal)) if int(seal) >= 0 else None

    async def forget(self, redis, tenant_id: int, protocol: str, key: str) -> None:
        """The sample's batch ended without it: it is new again, for the current batch to take."""
        await redis.delete(self.keys.roll_sample(tenant_id, protocol, key))

    async def states(self, redis) -> set[str]:
        """The state keys of every tenant's rolling batches (what `idle` looks at)."""
        return await redis.smembers(self.keys.rolls)

    def parse_state_key(self, state: str) -> tuple[int, str] | None:
        """(tenant id, protocol) of a state key; None for a key that is not one."""
        found = ROLL.parse(self.namespace, state)
        return (int(found[0]), found[1]) if found and found[0].isdigit() else None

    async def idle(self, redis, state: str, now: float) -> tuple[int, str] | None:
        """(tenant id, the tenant's name of a batch) to seal because its samples stopped coming, or None."""
        found = self.parse_state_key(state)
        if found is None:
            return None
        tenant, protocol = found
        call = ROLL_IDLE.call(tenant=tenant, protocol=protocol, at=repr(now))
        index, epoch = await run(self._idle, self.namespace, call, redis)
        if int(index) < 0:
            return None
        return tenant, f"{protocol}-{epoch}-{int(index)}"
