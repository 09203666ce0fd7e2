"""Pools: each host's cluster and GPU kind, each workload's accepted kinds and cluster.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as t:
        # "": the config's default cluster and kind ([pools]), which older hosts are in
        t.add_column(sa.Column("cluster", sa.String(64), nullable=False, server_default=""))
        t.add_column(sa.Column("kind", sa.String(64), nullable=False, server_default=""))
    with op.batch_alter_table("workloads") as t:
        # the GPU kinds it accepts, in its owner's order; NULL: any (every older workload)
        t.add_column(sa.Column("gpu_kinds", sa.JSON(), nullable=True))
        # the cluster it must run in; "": any
        t.add_column(sa.Column("cluster", sa.String(64), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        t.drop_column("cluster")
        t.drop_column("gpu_kinds")
    with op.batch_alter_table("hosts") as t:
        t.drop_column("kind")
        t.drop_column("cluster")
