"""Tenants gain `operator`: an operator's token opens the gateway's farm page (`/ui`) and its JSON, which show
every tenant's batches and the farm's pools, costs and knobs; a tenant's token is refused there (403). Existing
tenants are not operators.

Revision ID: 0006
Revises: 0005
Create Date: 2027-03-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("operator", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:  # batch: SQLite drops a column by copying the table
        batch.drop_column("operator")
