"""Where the farm's services are, from the environment; the embedded default when nothing is set."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

from farm.protocol.keys import Keys


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None  # EBF index, leases, results; also the Celery broker unless broker_url is set
    broker_url: str | None = None
    database_url: str | None = None  # history store; SQLite file on the embedded default
    namespace: str = "farm"  # prefixes every Redis key and Celery queue, so farms can share a Redis
    max_payload_bytes: int = 1 << 20
    lease_s: float = 10.0  # a worker's hold on a request lapses this long after its last heartbeat
    data_dir: str = os.path.expanduser("~/.reward-farm")
    reconnect_s: float = 30.0  # how long a trainer client rides through a broker outage before it gives up
    tenant: int | None = None  # a direct client as this tenant: its batches and tasks under `t<id>:` / `t<id>.`

    @property
    def broker(self) -> str | None:
        return self.broker_url or self.redis_url

    def queue(self, stage_queue: str) -> str:
        """The Celery queue of a stage, e.g. `farm.synthetic.compile`."""
        return Keys(self.namespace).broker(stage_queue)

    def with_(self, **changes) -> "Settings":
        return replace(self, **changes)


DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_url(settings: Settings) -> str:
    """The farm's Redis: the configured one, else the default local Redis."""
    return settings.redis_url or DEFAULT_REDIS_URL


# seconds a worker waits before it starts: an artificial cold start (workers.process.startup_delay)
STARTUP_DELAY_ENV = "FARM_WORKER_STARTUP_DELAY_S"
ENDPOINT_FILE = "endpoint.json"  # written by `farm up` so clients on this machine find the embedded farm


def read_endpoint(data_dir: str) -> dict:
    """What a running embedded farm published about itself; {} when none runs."""
    path = os.path.join(os.path.expanduser(data_dir), ENDPOINT_FILE)
    try:
        with open(path) as f:
            endpoint = json.load(f)
        os.kill(int(endpoint["pid"]), 0)  # a farm killed hard leaves its file behind: ignore it then
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return endpoint


def _tenant(value: str | None) -> int | None:
    if not value:
        return None
    if not value.isdigit():
        raise ValueError(f"FARM_TENANT must be a tenant's id (a whole number, `farm tenants list`), not {value!r}")
    return int(value)


def from_env(environ=None) -> Settings:
    """Settings from FARM_* variables; without FARM_REDIS_URL, those of an embedded farm running here."""
    env = os.environ if environ is None else environ
    base = Settings()
    data_dir = env.get("FARM_DATA_DIR", base.data_dir)
    endpoint = {} if env.get("FARM_REDIS_URL") else read_endpoint(data_dir)
    return Settings(
        redis_url=env.get("FARM_REDIS_URL") or endpoint.get("redis_url") or None,
        broker_url=env.get("FARM_BROKER_URL") or None,
        database_url=env.get("FARM_DATABASE_URL") or endpoint.get("database_url") or None,
        namespace=env.get("FARM_NAMESPACE") or endpoint.get("namespace") or base.namespace,
        max_payload_bytes=int(env.get("FARM_MAX_PAYLOAD_BYTES", base.max_payload_bytes)),
        lease_s=float(env.get("FARM_LEASE_S", base.lease_s)),
        reconnect_s=float(env.get("FARM_RECONNECT_S", base.reconnect_s)),
        tenant=_tenant(env.get("FARM_TENANT")),
        data_dir=data_dir,
    )
