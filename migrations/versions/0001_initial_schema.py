"""The initial history store: tasks, batches, requests, request stages, workers, decisions, knobs, recorder offsets.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.String(length=200)


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("name", ID, nullable=False),
        sa.Column("pipeline", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "batches",
        sa.Column("id", ID, nullable=False),
        sa.Column("task", ID, nullable=True),
        sa.Column("size", sa.Integer(), nullable=True),
        sa.Column("opened_at", sa.Double(), nullable=True),
        sa.Column("first_arrival_at", sa.Double(), nullable=True),
        sa.Column("completed_at", sa.Double(), nullable=True),
        sa.Column("cancelled_at", sa.Double(), nullable=True),
        sa.Column("estimated_at", sa.Double(), nullable=True),
        sa.Column("earliest_at", sa.Double(), nullable=True),
        sa.Column("extra_delay_s", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["task"], ["tasks.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_batches_completed_at", "batches", ["completed_at"])
    op.create_index("ix_batches_task_completed_at", "batches", ["task", "completed_at"])
    op.create_table(
        "requests",
        sa.Column("batch_id", ID, nullable=False),
        sa.Column("request_id", ID, nullable=False),
        sa.Column("group", ID, nullable=True),
        sa.Column("arrived_at", sa.Double(), nullable=True),
        sa.Column("stages", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=True),
        sa.Column("reward", sa.Double(), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["batch_id"], ["batches.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("batch_id", "request_id"),
    )
    op.create_table(
        "request_stages",
        sa.Column("batch_id", ID, nullable=False),
        sa.Column("request_id", ID, nullable=False),
        sa.Column("stage", sa.String(length=130), nullable=False),
        sa.Column("queued_at", sa.Double(), nullable=True),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=True),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("batch_id", "request_id", "stage"),
    )
    op.create_index("ix_request_stages_batch_id", "request_stages", ["batch_id"])
    op.create_index("ix_request_stages_stage_started_at", "request_stages", ["stage", "started_at"])
    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("stage", sa.String(length=130), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=True),
        sa.Column("spawned_at", sa.Double(), nullable=False),
        sa.Column("ready_at", sa.Double(), nullable=True),
        sa.Column("retired_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "spawned_at", name="uq_workers_name_spawned_at"),
    )
    op.create_index("ix_workers_retired_at", "workers", ["retired_at"])
    op.create_index("ix_workers_stage_spawned_at", "workers", ["stage", "spawned_at"])
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("policy", sa.String(length=64), nullable=False),
        sa.Column("workers", sa.JSON(), nullable=False),
        sa.Column("runtime_s", sa.Double(), nullable=False),
        sa.Column("estimates", sa.JSON(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_decisions_at", "decisions", ["at"])
    op.create_table(
        "knobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("saved_at", sa.Double(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "recorder_offsets",
        sa.Column("stream", sa.String(length=200), nullable=False),
        sa.Column("last_id", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("stream"),
    )


def downgrade() -> None:
    op.drop_table("recorder_offsets")
    op.drop_table("knobs")
    op.drop_index("ix_decisions_at", table_name="decisions")
    op.drop_table("decisions")
    op.drop_index("ix_workers_stage_spawned_at", table_name="workers")
    op.drop_index("ix_workers_retired_at", table_name="workers")
    op.drop_table("workers")
    op.drop_index("ix_request_stages_stage_started_at", table_name="request_stages")
    op.drop_index("ix_request_stages_batch_id", table_name="request_stages")
    op.drop_table("request_stages")
    op.drop_table("requests")
    op.drop_index("ix_batches_task_completed_at", table_name="batches")
    op.drop_index("ix_batches_completed_at", table_name="batches")
    op.drop_table("batches")
    op.drop_table("tasks")
