"""Checkpoints: whether a workload checkpoints when told to stop (SIGTERM).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        # workloads stored before this revision did not say: they do not
        t.add_column(sa.Column(
            "checkpoint_on_term", sa.Boolean(), nullable=False, server_default=sa.false()
        ))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        t.drop_column("checkpoint_on_term")
