"""Umask: the file mode creation mask the submitter had, which the work runs with.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        # NULL: none sent (a client or a submission from before this revision): the
        # executors' default, 022
        t.add_column(sa.Column("umask", sa.Integer(), nullable=True))


def downgrade() -> None:
    # a plain ALTER, not a batch copy of the table: SQLite (3.35 and later) drops a column
    # in place, and a copy would DROP the workloads table, which the attempts' foreign
    # keys refuse once any attempt exists
    op.execute("ALTER TABLE workloads DROP COLUMN umask")
