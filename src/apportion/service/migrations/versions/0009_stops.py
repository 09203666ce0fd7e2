"""Stops: why and when an attempt was told to stop, so that a restart carries its stop on.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as t:
        # NULL: never told to stop (and every attempt stopped before this revision: a
        # restarted server takes it as preempted, or as timed out once past its time
        # limit, and gives it a whole grace period again)
        t.add_column(sa.Column("stop_reason", sa.Text(), nullable=True))
        t.add_column(sa.Column("stop_issued_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as t:
        t.drop_column("stop_issued_at")
        t.drop_column("stop_reason")
