"""The farm's Redis runs with a memory bound in every deployment we ship (the embedded redis-server of `farm up`
and `farm demo`, docker/compose.yaml; docs/gateway.md asks the same of a Redis brought along), and the metrics
say how near it is (`farm_redis_memory_*`, the alert FarmRedisMemoryHigh at 80%).

Why `noeviction`: the farm's Redis holds state, not a cache. An evicted key is a batch, a lease, a queue or a
result lost without a word (a batch that never completes, a request run twice or never); the `volatile-*`
policies would evict the closed batches' results a trainer has yet to read. With `noeviction` a write past the
bound is refused with an error its caller sees (a script refused so makes none of its writes) while reads go on
and expiring batches free room: the farm stops, loudly, rather than forgetting some of what it holds. The alert
comes first, at 80%, while there is time to raise the bound or find the tenant that fills it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

POLICY = "noeviction"
MAXMEMORY_ENV = "FARM_REDIS_MAXMEMORY"  # Redis's own syntax: bytes, or with kb, mb, gb
HIGH = 0.8  # the share of the bound at which FarmRedisMemoryHigh fires (docker/monitoring/alerts.yml)
_SIZE = re.compile(r"[1-9][0-9]*(?:[kmg]b?)?", re.IGNORECASE)
_FLOOR = 256 << 20


def default_maxmemory(total_bytes: int | None = None) -> int:
    """A quarter of the machine's memory (at least 256 MiB): the embedded farm shares its machine with the
    workers it starts."""
    if total_bytes is None:
        total_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(_FLOOR, total_bytes // 4)


def maxmemory(environ: Mapping[str, str] | None = None) -> str:
    """The embedded Redis's bound: FARM_REDIS_MAXMEMORY when set (checked), else `default_maxmemory()`."""
    value = (os.environ if environ is None else environ).get(MAXMEMORY_ENV, "").strip()
    if not value:
        return str(default_maxmemory())
    if not _SIZE.fullmatch(value):
        raise ValueError(f"{MAXMEMORY_ENV} must be a size Redis reads (bytes, or a number with kb, mb or gb, "
                         f"e.g. 4gb), not {value!r:.100}")
    return value


def config_lines(environ: Mapping[str, str] | None = None) -> list[str]:
    """The redis.conf lines of the bound and its policy."""
    return [f"maxmemory {maxmemory(environ)}", f"maxmemory-policy {POLICY}"]


@dataclass(frozen=True)
class Memory:
    """What a Redis says of its memory: bytes used, its bound (0: none) and what it does at the bound."""

    used: int
    bound: int
    policy: str

    @property
    def share(self) -> float | None:
        """The share of the bound in use; None when there is no bound."""
        return self.used / self.bound if self.bound else None


def read(redis: Any) -> Memory:
    """From INFO (which managed Redis services answer where CONFIG is refused)."""
    info = redis.info("memory")
    return Memory(int(info.get("used_memory", 0)), int(info.get("maxmemory", 0)),
                  str(info.get("maxmemory_policy", "")))
