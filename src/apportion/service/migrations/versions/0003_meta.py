"""Meta: facts about the database itself, starting with its random ``db_id``.

The local executor keeps each database's run and exit files under ``run/<db_id>/``, so the
files of another database (a fresh one, or a restored backup of another) sharing the data
directory are never read as this one's.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    meta = op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.bulk_insert(meta, [{"key": "db_id", "value": uuid.uuid4().hex}])


def downgrade() -> None:
    op.drop_table("meta")
