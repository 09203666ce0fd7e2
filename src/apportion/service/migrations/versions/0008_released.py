"""Held work: when a workload held by a dependency or an array throttle joined the queue.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        # NULL: never held, or still held (and every workload stored before this revision:
        # a held one is released again by the first pass after the upgrade)
        t.add_column(sa.Column("released_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        t.drop_column("released_at")
