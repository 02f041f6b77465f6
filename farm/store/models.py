"""The history store's tables: what the farm did, batch by batch, request by request, worker by worker.

Times are epoch seconds (double precision), the unit of the history events and of the planner, so the
metrics of docs/design.md are plain arithmetic on columns. Stages are named by their queue,
`<pipeline>.<stage>`, the same key the knobs and the worker pools use.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Double, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Batch and request ids, tasks and groups are the client's: any length (a GRPO group is naturally its prompt,
# many kB). The ids and tasks key rows, and a PostgreSQL btree row holds ~2.7 kB at most, so the recorder takes
# keys of up to farm.store.ingest.MAX_KEY_BYTES each; a group is no key and has no index. SQLite enforces
# no declared length at all: its tables keep the type of migration 0001 (and are not rebuilt for nothing).
ID = Text().with_variant(String(200), "sqlite")


class Base(DeclarativeBase):
    pass


class Task(Base):
    """A tenant: one training job with one pipeline."""

    __tablename__ = "tasks"

    name: Mapped[str] = mapped_column(ID, primary_key=True)
    pipeline: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Double)


class Batch(Base):
    """The B requests of one rollout step. `earliest_at` is T from the actual r_i and s_ij, `extra_delay_s` is d."""

    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    # nullable: an event about a batch can reach the recorder before (or without) its batch_opened
    task: Mapped[str | None] = mapped_column(ID, ForeignKey("tasks.name", ondelete="CASCADE"))
    size: Mapped[int | None] = mapped_column(Integer)
    opened_at: Mapped[float | None] = mapped_column(Double)
    first_arrival_at: Mapped[float | None] = mapped_column(Double)
    completed_at: Mapped[float | None] = mapped_column(Double)
    cancelled_at: Mapped[float | None] = mapped_column(Double)
    # set with cancelled_at when the farm, not the trainer, cancelled it: its trainer went silent (abandon_after_s)
    abandoned_at: Mapped[float | None] = mapped_column(Double)
    estimated_at: Mapped[float | None] = mapped_column(Double)  # the planner's latest estimate (the EBF key)
    earliest_at: Mapped[float | None] = mapped_column(Double)  # T
    extra_delay_s: Mapped[float | None] = mapped_column(Double)  # d = completed_at - T, >= 0

    __table_args__ = (
        Index("ix_batches_task_completed_at", "task", "completed_at"),
        Index("ix_batches_completed_at", "completed_at"),
    )


class Request(Base):
    """One reward request of a batch; `stages` are the stage names it visits, in pipeline order."""

    __tablename__ = "requests"

    batch_id: Mapped[str] = mapped_column(ID, ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True)
    request_id: Mapped[str] = mapped_column(ID, primary_key=True)
    group: Mapped[str | None] = mapped_column(ID)
    arrived_at: Mapped[float | None] = mapped_column(Double)
    stages: Mapped[list[str] | None] = mapped_column(JSON)
    status: Mapped[str | None] = mapped_column(String(32))
    reward: Mapped[float | None] = mapped_column(Double)
    outcome: Mapped[str | None] = mapped_column(String(32))
    finished_at: Mapped[float | None] = mapped_column(Double)
    message: Mapped[str | None] = mapped_column(Text)


class RequestStage(Base):
    """One request at one stage: when it entered the queue, ran, finished, and on which worker."""

    __tablename__ = "request_stages"

    batch_id: Mapped[str] = mapped_column(ID, primary_key=True)
    request_id: Mapped[str] = mapped_column(ID, primary_key=True)
    stage: Mapped[str] = mapped_column(String(130), primary_key=True)
    queued_at: Mapped[float | None] = mapped_column(Double)
    started_at: Mapped[float | None] = mapped_column(Double)
    finished_at: Mapped[float | None] = mapped_column(Double)
    status: Mapped[str | None] = mapped_column(String(32))
    worker: Mapped[str | None] = mapped_column(String(200))

    __table_args__ = (
        # no FK to requests: a stage can be recorded before its request_arrived; the recorder adds the request row
        Index("ix_request_stages_stage_started_at", "stage", "started_at"),
        Index("ix_request_stages_batch_id", "batch_id"),
    )


class Worker(Base):
    """One life of a stage worker: spawned (asked for), placed (on a machine), ready (taking requests),
    retired (gone). Backends that place at once (local, docker) place at spawn."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    stage: Mapped[str] = mapped_column(String(130))
    backend: Mapped[str | None] = mapped_column(String(32))
    spawned_at: Mapped[float] = mapped_column(Double)
    # on a machine, holding its resources (allocated from here); None: still pending, or never placed
    placed_at: Mapped[float | None] = mapped_column(Double)
    ready_at: Mapped[float | None] = mapped_column(Double)
    retired_at: Mapped[float | None] = mapped_column(Double)

    __table_args__ = (
        UniqueConstraint("name", "spawned_at", name="uq_workers_name_spawned_at"),
        Index("ix_workers_stage_spawned_at", "stage", "spawned_at"),
        Index("ix_workers_retired_at", "retired_at"),
    )


class Decision(Base):
    """One planner decision: why, under which policy, the pools it chose, how long it took, each batch's T."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Double, index=True)
    reason: Mapped[str] = mapped_column(String(64))
    policy: Mapped[str] = mapped_column(String(64))
    workers: Mapped[dict[str, int]] = mapped_column(JSON)  # by stage queue
    runtime_s: Mapped[float] = mapped_column(Double)
    estimates: Mapped[dict[str, float]] = mapped_column(JSON)  # batch id -> estimated completion time
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class KnobsVersion(Base):
    """Every saved version of the operator's knobs; the latest is in force."""

    __tablename__ = "knobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    saved_at: Mapped[float] = mapped_column(Double)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class RecorderOffset(Base):
    """The last history-stream entry written to the store, committed with the writes (exactly-once)."""

    __tablename__ = "recorder_offsets"

    stream: Mapped[str] = mapped_column(String(200), primary_key=True)
    last_id: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[float] = mapped_column(Double)


class Tenant(Base):
    """A caller of the gateway: its API token's hash (never the token), limits and protocol configuration."""

    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64))  # sha256 hex; a call is authenticated by looking it up
    token_prefix: Mapped[str] = mapped_column(String(16))  # the token's first characters, to recognise it
    created_at: Mapped[float] = mapped_column(Double)
    revoked_at: Mapped[float | None] = mapped_column(Double)
    limits: Mapped[dict[str, Any]] = mapped_column(JSON)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # an object the gateway reads (per-protocol batching)
    # an operator's token opens the farm page (`/ui`): every tenant's batches, the pools, costs and knobs
    operator: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # its share of the stages' workers and caps per resource kind (farm.protocol.shares.FairShare.to_dict); `{}`:
    # a share of 1 and no cap. What the pick reads is the copy published to Redis (farm.app.fair_shares)
    fair_share: Mapped[dict[str, Any]] = mapped_column(JSON, server_default="{}")

    __table_args__ = (
        UniqueConstraint("name", name="uq_tenants_name"),
        UniqueConstraint("token_hash", name="uq_tenants_token_hash"),  # its index serves the lookup
    )
