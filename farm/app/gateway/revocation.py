"""A revoked tenant's waits end: its long polls, streams and one-sample calls answer 401 within the time a
token's lookup is trusted, not at their own timeout. Each gateway process knows the tenants it has calls
waiting for, and its upkeep asks the store which of those were revoked (`Directory.revoked`).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar

from farm.app.gateway.auth import Unauthenticated

T = TypeVar("T")
REVOKED = "this tenant was revoked: its calls end, and its token no longer works"


class Revocations:
    """The waits in flight, by tenant; `revoke` ends a tenant's."""

    def __init__(self, on_wait: Callable[[], None] | None = None) -> None:
        self._on_wait = on_wait  # told when a call begins to wait (the gateway's upkeep looks for revocations)
        self._waiting: dict[int, tuple[asyncio.Event, int]] = {}  # tenant -> (revoked, calls waiting)
        self._revoked: set[int] = set()

    def waiting(self) -> set[int]:
        """The tenants with calls waiting here (those whose revocation the upkeep looks for)."""
        return set(self._waiting)

    def revoke(self, tenant_id: int) -> None:
        self._revoked.add(tenant_id)
        held = self._waiting.get(tenant_id)
        if held is not None:
            held[0].set()

    async def guard(self, tenant_id: int, work: Awaitable[T]) -> T:
        """`work`'s result, unless the tenant is revoked first: then `work` is cancelled and Unauthenticated
        raised."""
        if tenant_id in self._revoked:
            if asyncio.iscoroutine(work):
                work.close()  # never started
            raise Unauthenticated(REVOKED)
        event, count = self._waiting.get(tenant_id, (asyncio.Event(), 0))
        self._waiting[tenant_id] = (event, count + 1)
        if self._on_wait is not None:
            self._on_wait()
        task, stop = asyncio.ensure_future(work), asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (task, stop):
                if not pending.done():
                    pending.cancel()
            await asyncio.gather(task, stop, return_exceptions=True)
            event, count = self._waiting[tenant_id]
            if count > 1:
                self._waiting[tenant_id] = (event, count - 1)
            else:
                del self._waiting[tenant_id]
        if task.cancelled():
            raise Unauthenticated(REVOKED)
        return task.result()
