"""Batch and request ids, tasks and groups of any length: text instead of varchar(200) on PostgreSQL.

The recorder dropped the history of a request whose id or group was longer than 200 characters (a GRPO
group is naturally its prompt). SQLite enforces no declared length, so its tables stay as they are: the
models declare the old type there (farm.store.models.ID).

Revision ID: 0002
Revises: 0001
Create Date: 2027-01-18
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# (table, column) in an order PostgreSQL accepts with the foreign keys in place: the referenced column first
COLUMNS = [("tasks", "name"), ("batches", "id"), ("batches", "task"), ("requests", "batch_id"),
           ("requests", "request_id"), ("requests", "group"), ("request_stages", "batch_id"),
           ("request_stages", "request_id")]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, column in COLUMNS:
        op.alter_column(table, column, type_=sa.Text(), existing_type=sa.String(length=200))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    # a value over 200 characters would not fit: it is cut there, which loses its end but keeps its row (two
    # ids alike in their first 200 characters then collide, and the downgrade stops with the database's error)
    for table, column in reversed(COLUMNS):
        op.alter_column(table, column, type_=sa.String(length=200), existing_type=sa.Text(),
                        postgresql_using=f'left("{column}", 200)')
