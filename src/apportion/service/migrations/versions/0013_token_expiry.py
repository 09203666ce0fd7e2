"""Tokens with a lifetime: ``tokens.expires_at``, the moment a token stops being accepted.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as t:
        # NULL: never expires (every token made before this revision, and those made
        # without a lifetime where [auth] max_token_lifetime is not set)
        t.add_column(sa.Column("expires_at", sa.Double(), nullable=True))


def downgrade() -> None:
    # a plain ALTER, as 0011's: SQLite (3.35 and later) drops a column in place
    op.execute("ALTER TABLE tokens DROP COLUMN expires_at")
