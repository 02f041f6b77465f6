"""Who is calling: an API token, sent as `Authorization: Bearer <token>` or, for callers that cannot send
a header (OpenRLHF's and verl's HTTP clients post to a bare URL), as the path prefix `/t/<token>/`.

Tokens are looked up in the history store (hashed there) and remembered for `ttl_s`: a revoked token is
refused within that time on every gateway process. An unknown token costs a store lookup each time.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Callable, Collection

from farm.store.tenants import Tenant, authenticate, revoked_among, token_hash

# the error log's backstop (the access log is built from routes: farm.app.gateway.access_log): a token's shape
TOKEN_LIKE = re.compile(r"(?i)(/t/)[^/\s?\"']+|\brf_[A-Za-z0-9_%-]+")


class Unauthenticated(Exception):
    """No token, or one the store does not know (HTTP 401)."""


class Forbidden(Exception):
    """A valid token that may not do this: a tenant's on the farm page, which is for operators (HTTP 403)."""


class Directory:
    """Tenants by token, cached; `lookup` is the store's `authenticate`, `revoked_among` says which of some
    tenants are revoked (both blocking, run in a thread)."""

    def __init__(self, lookup: Callable[[str], Tenant | None], ttl_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic,
                 revoked_among: Callable[[Collection[int]], set[int]] = lambda ids: set()) -> None:
        self.lookup, self.ttl_s, self.clock, self.revoked_among = lookup, ttl_s, clock, revoked_among
        self._cache: dict[str, tuple[float, Tenant | None]] = {}

    @classmethod
    def of_engine(cls, engine: Any, ttl_s: float = 5.0) -> "Directory":
        return cls(lambda token: authenticate(engine, token), ttl_s,
                   revoked_among=lambda ids: revoked_among(engine, ids))

    async def revoked(self, tenant_ids: Collection[int]) -> set[int]:
        """Which of these tenants are revoked; their tokens are forgotten here, so none is trusted any longer."""
        found = await asyncio.to_thread(self.revoked_among, tenant_ids) if tenant_ids else set()
        if found:
            self._cache = {k: v for k, v in self._cache.items() if v[1] is None or v[1].id not in found}
        return found

    async def tenant(self, token: str | None) -> Tenant:
        if not token:
            raise Unauthenticated("no API token: send `Authorization: Bearer <token>` or call /t/<token>/...")
        key = token_hash(token)  # the cache keeps no token either
        hit = self._cache.get(key)
        now = self.clock()
        if hit is not None and now - hit[0] < self.ttl_s:
            tenant = hit[1]
        else:
            tenant = await asyncio.to_thread(self.lookup, token)
            if len(self._cache) > 10_000:  # a caller trying tokens must not grow the cache without bound
                self._cache.clear()
            self._cache[key] = (now, tenant)
        if tenant is None or not tenant.active:
            raise Unauthenticated("this API token is not valid (unknown or revoked)")
        return tenant


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def redact(text: str) -> str:
    return TOKEN_LIKE.sub(lambda m: (m.group(1) or "") + "***", text)
