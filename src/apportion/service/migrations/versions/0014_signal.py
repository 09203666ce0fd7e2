"""Signals before the time limit: ``workloads.signal`` (sbatch's ``--signal``, canonical
text such as ``B:USR1@120``) and ``attempts.signal_sent_at`` (when it was sent to that
attempt), so that a restarted server neither forgets nor repeats it.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        # NULL: no signal (every workload stored before this revision)
        t.add_column(sa.Column("signal", sa.String(32), nullable=True))
    with op.batch_alter_table("attempts") as t:
        # NULL: not sent (yet, or there is none to send)
        t.add_column(sa.Column("signal_sent_at", sa.Double(), nullable=True))


def downgrade() -> None:
    # plain ALTERs, as 0011's: SQLite (3.35 and later) drops a column in place, and a
    # batch copy of workloads would be refused by the attempts' foreign keys
    op.execute("ALTER TABLE attempts DROP COLUMN signal_sent_at")
    op.execute("ALTER TABLE workloads DROP COLUMN signal")
