"""A revoked tenant's work stops (`farm tenants revoke NAME --cancel`): every batch it has open on the farm,
through the gateway or a direct client, is cancelled, so its queued requests never run. The gateways may
still take the tenant's calls for the few seconds their token cache lasts, so the batches opened meanwhile are
cancelled in a second pass after that time.
"""

from __future__ import annotations

import time

from farm.client.sync import RewardClient
from farm.config import Settings
from farm.errors import BatchNotFound
from farm.protocol.keys import Keys, text
from farm.protocol.scope import Scope

SETTLE_S = 5.0  # a gateway's token cache (GatewaySettings.auth_ttl_s): after it, no gateway takes the tenant's calls


def open_batches(redis, namespace: str, tenant_id: int) -> list[str]:
    """The farm's ids of the tenant's open batches."""
    prefix = Scope(tenant_id).batch_prefix
    return [b for b in map(text, redis.zrange(Keys(namespace).batches, 0, -1)) if b.startswith(prefix)]


def cancel_open(settings: Settings, tenant_id: int, settle_s: float | None = None) -> list[str]:
    """Cancel the tenant's open batches now and again after `settle_s` (SETTLE_S); the farm ids of those
    cancelled."""
    settle_s = SETTLE_S if settle_s is None else settle_s
    cancelled: list[str] = []
    with RewardClient(settings, keep_alive=False) as client:
        for second in (False, True):
            if second:
                time.sleep(settle_s)
            for batch_id in open_batches(client.dispatch.redis, settings.namespace, tenant_id):
                try:
                    if client.batch(batch_id).cancel() == "cancelled":
                        cancelled.append(batch_id)
                except BatchNotFound:  # it ended meanwhile
                    pass
    return cancelled
