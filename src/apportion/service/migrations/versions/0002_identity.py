"""Identity: each user's Unix account; each workload's directory and exported environment.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as t:
        # NULL: the Unix account of the same name
        t.add_column(sa.Column("unix_user", sa.String(32), nullable=True))
    with op.batch_alter_table("workloads") as t:
        # NULL: not given (workloads stored before this revision)
        t.add_column(sa.Column("chdir", sa.Text(), nullable=True))
        # the environment the submitter exported: {name: value}; NULL: none
        t.add_column(sa.Column("env", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        t.drop_column("env")
        t.drop_column("chdir")
    with op.batch_alter_table("users") as t:
        t.drop_column("unix_user")
