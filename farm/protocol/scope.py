"""A tenant's view of the farm: its batch ids and tasks live under a prefix of its own, so another tenant's
batch is not hidden by a check that could be forgotten but simply does not exist under this tenant's names.

Pure functions of the tenant's id; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from farm.protocol.calls import new_batch_id
from farm.protocol.ids import BATCH, MAX_BATCH_ID, MAX_TASK, TASK, TENANT_PREFIX, check_batch_name


def tenant_label(tenant_id: int | None) -> str:
    """How the farm's reports name a tenant: `t<id>`, the prefix of its names; `-` for batches opened directly
    on the farm, outside any tenant's."""
    return "-" if tenant_id is None else f"t{tenant_id}"


def batch_tenant(farm_batch: str) -> str:
    """The report label (`tenant_label`) of the tenant whose batch this farm id is."""
    return tenant_label(tenant_of(farm_batch))


@dataclass(frozen=True)
class Scope:
    """One tenant's names on the farm: batch `x` is `t<id>:x` there, task `math` is `t<id>.math`."""

    tenant_id: int

    @property
    def batch_prefix(self) -> str:
        return f"{tenant_label(self.tenant_id)}:"

    @property
    def task_prefix(self) -> str:
        return f"{tenant_label(self.tenant_id)}."

    def batch(self, batch_id: str | None) -> str:
        """The farm's id of the tenant's batch (a fresh one when None); InvalidInput for a malformed id."""
        if batch_id is None:
            batch_id = new_batch_id()
        return self.batch_prefix + check_batch_name(BATCH.check(batch_id, MAX_BATCH_ID - len(self.batch_prefix)))

    def task(self, task: str) -> str:
        return self.task_prefix + TASK.check(task, MAX_TASK - len(self.task_prefix))

    def adopt_batch(self, batch_id: str | None) -> str:
        """For a client that works in the farm's names (the direct client): an id already under the prefix
        is the farm's own, any other is the tenant's name for one."""
        if isinstance(batch_id, str) and batch_id.startswith(self.batch_prefix):
            return self.batch(batch_id[len(self.batch_prefix):])
        return self.batch(batch_id)

    def adopt_task(self, task: str) -> str:
        if isinstance(task, str) and task.startswith(self.task_prefix) and len(task) > len(self.task_prefix):
            return self.task(task[len(self.task_prefix):])
        return self.task(task)

    def owns_batch(self, farm_id: str) -> bool:
        return farm_id.startswith(self.batch_prefix)

    def own_batch(self, farm_id: str) -> str:
        """The tenant's name for one of its batches."""
        return farm_id[len(self.batch_prefix):] if self.owns_batch(farm_id) else farm_id

    def own_task(self, farm_task: str) -> str:
        return farm_task[len(self.task_prefix):] if farm_task.startswith(self.task_prefix) else farm_task

    def message(self, text: str) -> str:
        """An error message of the farm's in the tenant's names (the farm quotes its own ids)."""
        return text.replace(f"'{self.batch_prefix}", "'").replace(f"'{self.task_prefix}", "'")


def tenant_of(farm_batch: str) -> int | None:
    """The tenant whose batch this farm id is (its `t<id>:` prefix); None for a batch opened directly on the
    farm, outside any tenant's names."""
    found = TENANT_PREFIX.match(farm_batch)
    return int(found.group(1)) if found else None
