"""Worker lives gain placed_at: a worker asked of a cluster may wait for room (pending); it is
allocated only once placed. Existing lives were placed at spawn.

Revision ID: 0004
Revises: 0003
Create Date: 2027-02-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("placed_at", sa.Double(), nullable=True))
    op.execute("UPDATE workers SET placed_at = spawned_at")


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:  # batch: SQLite drops a column by copying the table
        batch.drop_column("placed_at")
