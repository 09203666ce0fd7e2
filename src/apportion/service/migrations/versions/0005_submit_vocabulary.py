"""Submission vocabulary: each workload's name, time limit, array, dependencies and the
hosts it may use.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        # NULL: no name given
        t.add_column(sa.Column("name", sa.String(128), nullable=True))
        # seconds; 0: none (runs until it exits)
        t.add_column(sa.Column("time_limit", sa.Double(), nullable=False, server_default="0"))
        # the id of the array's first element; NULL: not in an array
        t.add_column(sa.Column("array_id", sa.String(32), nullable=True))
        t.add_column(sa.Column("array_index", sa.Integer(), nullable=True))
        # elements of the array that may be released and unfinished at once; 0: no limit
        t.add_column(
            sa.Column("array_throttle", sa.Integer(), nullable=False, server_default="0")
        )
        # [[type, workload id], ...] with type afterok | afterany | afternotok; NULL: none
        t.add_column(sa.Column("dependencies", sa.JSON(), nullable=True))
        # {"nodelist": [host, ...], "exclude": [host, ...]}; NULL: any host
        t.add_column(sa.Column("constraints", sa.JSON(), nullable=True))
        t.create_index("ix_workloads_array_id", ["array_id"])


def downgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        t.drop_index("ix_workloads_array_id")
        for column in ("constraints", "dependencies", "array_throttle", "array_index", "array_id",
                       "time_limit", "name"):
            t.drop_column(column)
