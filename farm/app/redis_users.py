"""Redis users for tenants' direct clients: a tenant whose trainer talks to the farm's Redis (the Python
client, not the gateway) logs in as a user of its own, whose password is its API token (Redis keeps only the
token's SHA-256, as the store does) and whose keys are its own batches.

What such a user may do: run the client's scripts and reads on its own batches (`<ns>:b:t<id>:*`) and their
pending requests in the stage queues; add to the shared indexes, counters, history stream, the stage
queues' orders of batches and their notices the scripts write to, without reading them; read the knobs and
whether some share is reserved. Every pattern is a key
of farm.protocol.keys. What it may not: read, cancel or submit into another tenant's batch or its pending
requests (their keys are not the user's), read the history stream or the queues, touch another namespace, or run
administrative or destructive commands. The shared indexes stay writable, so a hostile direct client could
still disturb the schedule: direct Redis access is for tenants the operator trusts not to attack the farm
(their own teams); others go through the gateway, which needs no Redis access at all (docs/gateway.md).
"""

from __future__ import annotations

import re

from farm.protocol.keys import Keys, QueuePart
from farm.protocol.scope import Scope


def username(namespace: str, tenant_id: int) -> str:
    return f"{namespace}-t{tenant_id}"


def _glob(text: str) -> str:
    """`text` matched literally in an ACL key or channel pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def rules(namespace: str, tenant_id: int, token_sha256: str) -> list[str]:
    """The ACL SETUSER rules of the tenant's user, from nothing (`reset`). Every pattern is a key of
    farm.protocol.keys, its namespace and the tenant's batch prefix matched literally."""
    k, own = Keys(_glob(namespace)), _glob(Scope(tenant_id).batch_prefix)
    return [
        "reset", "on", f"#{token_sha256}", "resetchannels", f"&{k.epochs}",
        # its own batches (every Part follows the batch's key), and their pending-request lists in the stage queues
        f"~{k.batch(own)}*", f"~{k.pending('*', own)}*",
        # shared state the scripts write to: written, never read (of a stage queue, only its orders of batches:
        # another tenant's pending requests are not this user's)
        f"%W~{k.queue('*', QueuePart.ebf)}", f"%W~{k.queue('*', QueuePart.fcfs)}", f"%W~{k.events}",
        f"%W~{k.batches}", f"%W~{k.seen}", f"%W~{k.queues}", f"%W~{k.broker('*')}",
        # a stage's notice to its busy workers (preempt.lua), left while some tenant reserves its share; the
        # notices that tell a worker its request's batch ended (a cancel: the tokens are in its own batch's keys)
        f"%W~{k.queue('*', QueuePart.notice)}", f"%R~{k.reserving}", f"%W~{k.notice('*')}",
        # counters and the task -> pipeline index (a task keeps one pipeline): read to be updated; the wake-up
        # tokens fair-share picks held, which a batch that ends hands back (common.lua's release_held)
        f"~{k.seq}", f"~{k.tokens}", f"~{k.limits}", f"~{k.tasks}", f"~{k.held}",
        f"%R~{k.knobs}",
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
