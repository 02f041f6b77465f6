"""A tenant's limits on a shared farm: batches open at once and requests outstanding (checked in Redis,
so every gateway process counts the same), and one request's payload size (checked before sending).

Requests outstanding are counted twice: here, read before a call is sent, so a call that cannot fit is refused
whole; and by the submit scripts as each new request arrives (farm.protocol.calls.Cap), atomically, so calls
racing each other, on any route and any gateway process, cannot pass the limit together.
"""

from __future__ import annotations

from redis.exceptions import NoScriptError

from farm.errors import InvalidInput, LimitExceeded
from farm.protocol import reads
from farm.protocol.calls import canonical_json
from farm.protocol.keys import Keys
from farm.protocol.live import Progress, parse_progress
from farm.protocol.scripts import ADMIT_BATCH, OUTSTANDING, SOURCES, pipelined, run


class TooLarge(InvalidInput):
    """A payload over the tenant's limit (HTTP 413)."""


class Limits:
    """The checks, for one farm namespace: the scripts `admit_batch.lua` and `outstanding.lua`."""

    def __init__(self, redis, namespace: str) -> None:
        self.namespace = namespace
        self.keys = Keys(namespace)
        self._admit = redis.register_script(SOURCES[ADMIT_BATCH.name])
        self._outstanding = redis.register_script(SOURCES[OUTSTANDING.name])

    async def admit_batch(self, redis, tenant_id: int, farm_batch: str, limit: int) -> bool:
        """True when the batch is counted now, False when it was already (opening it again attaches)."""
        reply = await run(self._admit, self.namespace,
                        ADMIT_BATCH.call(tenant=tenant_id, batch=farm_batch, limit=limit), redis)
        if reply == "full":
            raise LimitExceeded(f"this tenant already has {limit} batches open (its limit): wait for one to "
                                f"complete, or cancel or seal one")
        return reply == "added"

    async def forget_batch(self, redis, tenant_id: int, farm_batch: str) -> None:
        """A batch that could not be opened after all is not counted."""
        await redis.zrem(self.keys.tenant_open(tenant_id), farm_batch)

    async def admit_requests(self, redis, tenant_id: int, count: int, limit: int, farm_id: str) -> Progress:
        """The batch's progress (BatchNotFound first: the batch decides whether there is anything to limit),
        once `count` more requests fit the tenant's limit; read in one round trip (two where Redis lacks the script)."""
        for loaded in (False, True):
            pipe = redis.pipeline(transaction=False)
            reads.progress(pipe, self.keys, farm_id)
            pipelined(self._outstanding, self.namespace, OUTSTANDING.call(tenant=tenant_id), pipe)
            try:
                head, outstanding = await pipe.execute()
                break
            except NoScriptError:
                if loaded:
                    raise
                await redis.script_load(self._outstanding.script)
        progress = parse_progress(farm_id, head)
        if int(outstanding) + count > limit:
            raise LimitExceeded(f"this tenant has {outstanding} requests outstanding and its limit is {limit}: "
                                f"{count} more do not fit; wait for results before submitting more")
        return progress


def check_payload(request_id: str, payload, limit: int) -> None:
    size = len(canonical_json(payload).encode())
    if size > limit:
        raise TooLarge(f"payload of request {request_id!r:.200} is {size} bytes, over this tenant's limit of {limit}")
