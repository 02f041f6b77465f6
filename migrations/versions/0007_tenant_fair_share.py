"""Tenants gain `fair_share`: a tenant's share (weight) of a stage's workers against the other tenants with work
waiting there, and its optional cap of the farm's workers per resource kind (farm.protocol.shares.FairShare's
JSON). Existing tenants get `{}`: a share of 1 and no cap, as every tenant had before.

Revision ID: 0007
Revises: 0006
Create Date: 2027-03-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("fair_share", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:  # batch: SQLite drops a column by copying the table
        batch.drop_column("fair_share")
