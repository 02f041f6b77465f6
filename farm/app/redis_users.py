"""Redis users for tenants' direct clients: a tenant whose trainer talks to the farm's Redis (the Python
client, not the gateway) logs in as a user of its own, whose password is its API token (Redis keeps only the
token's SHA-256, as the store does) and whose keys are its own batches.

What such a user may do: run the client's scripts and reads on its own batches (`<ns>:b:t<id>:*`) and their
queues; add to the shared indexes, counters, history stream and stage queues the scripts write to, without
reading them; read the knobs. What it may not: read, cancel or submit into another tenant's batch (its keys
are not the user's), read the history stream or what waits in the queues, touch another namespace, or run
administrative or destructive commands. The shared indexes stay writable, so a hostile direct client could
still disturb the schedule: direct Redis access is for tenants the operator trusts not to attack the farm
(their own teams); others go through the gateway, which needs no Redis access at all (docs/gateway.md).
"""

from __future__ import annotations

import re

from farm.protocol.scope import Scope


def username(namespace: str, tenant_id: int) -> str:
    return f"{namespace}-t{tenant_id}"


def _glob(text: str) -> str:
    """`text` matched literally in an ACL key or channel pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def rules(namespace: str, tenant_id: int, token_sha256: str) -> list[str]:
    """The ACL SETUSER rules of the tenant's user, from nothing (`reset`)."""
    ns, own = _glob(namespace), _glob(Scope(tenant_id).batch_prefix)
    return [
        "reset", "on", f"#{token_sha256}", "resetchannels", f"&{ns}:epochs",
        # its own batches, and their pending-request lists in the stage queues
        f"~{ns}:b:{own}*", f"~{ns}:q:*:l:{own}*",
        # shared state the scripts write to: written, never read
        f"%W~{ns}:q:*", f"%W~{ns}:events", f"%W~{ns}:batches", f"%W~{ns}:seen", f"%W~{ns}:queues", f"%W~{ns}.*",
        # counters and the task -> pipeline index (a task keeps one pipeline): read to be updated
        f"~{ns}:seq", f"~{ns}:tokens", f"~{ns}:limits", f"~{ns}:tasks",
        f"%R~{ns}:knobs",
        # TIME: the scripts date a trainer's signs of life by Redis' clock (farm.protocol.silence)
        "-@all", "+@read", "+@write", "+@scripting", "+@connection", "+@transaction", "+publish", "+time",
        "-@dangerous",
    ]


def grant(redis, namespace: str, tenant_id: int, token_sha256: str) -> str:
    """Create the tenant's user, or set its rules and password afresh; returns its name."""
    name = username(namespace, tenant_id)
    redis.execute_command("ACL", "SETUSER", name, *rules(namespace, tenant_id, token_sha256))
    return name


def withdraw(redis, namespace: str, tenant_id: int) -> bool:
    """Delete the tenant's user (its open connections are closed by Redis); False if there was none."""
    return bool(redis.execute_command("ACL", "DELUSER", username(namespace, tenant_id)))


def exists(redis, namespace: str, tenant_id: int) -> bool:
    return username(namespace, tenant_id) in [u.decode() if isinstance(u, bytes) else u
                                              for u in redis.execute_command("ACL", "USERS")]
