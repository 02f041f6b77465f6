"""What a waiting call may hold: per tenant, a bounded number of long polls and result streams at once (429
past the tenant's `waiting_calls` limit), and none of them outliving its caller (a caller that hangs up ends
its wait at once, instead of at `wait_s`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import contextmanager
from typing import Awaitable, Iterator, TypeVar

from starlette.requests import Request

from farm.errors import LimitExceeded
from farm.store.tenants import Tenant

T = TypeVar("T")
CLIENT_GONE = 499  # nginx's "client closed request": what the access log shows for a wait whose caller left


class CallerGone(Exception):
    """The caller hung up while its call waited; nobody reads the answer."""


class WaitingSlots:
    """Waiting calls held now, per tenant, in this gateway process (uvicorn serves the gateway in one)."""

    def __init__(self) -> None:
        self._held: Counter[int] = Counter()

    @contextmanager
    def hold(self, tenant: Tenant) -> Iterator[None]:
        limit = tenant.limits.waiting_calls
        if self._held[tenant.id] >= limit:
            raise LimitExceeded(f"this tenant already has {limit} calls waiting for results (its limit): "
                                f"wait for one of them to answer before opening another")
        self._held[tenant.id] += 1
        try:
            yield
        finally:
            self._held[tenant.id] -= 1
            if not self._held[tenant.id]:
                del self._held[tenant.id]


async def _hung_up(request: Request) -> None:
    """Returns once the caller disconnects (the request's body, if any, was read before the wait)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """`work`'s answer, or CallerGone as soon as the caller hangs up (`work` is then cancelled)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_hung_up(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # its answer has nobody to go to
        pass
    raise CallerGone("the caller hung up while its call waited")
