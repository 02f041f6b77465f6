"""Batches gain abandoned_at: the farm cancels a batch whose trainer went silent for the knob abandon_after_s, and
the history keeps that apart from a trainer's own cancel. Such a batch has cancelled_at as well, so whatever
leaves cancelled batches out (the planner's history, the extra delays) leaves it out too. Existing batches were
never abandoned.

Revision ID: 0005
Revises: 0004
Create Date: 2027-03-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batches", sa.Column("abandoned_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:  # batch: SQLite drops a column by copying the table
        batch.drop_column("abandoned_at")
