"""An index on the audit's (action, at): a usage report finds the cancellations in its period
(and the host entries) without reading the whole audit log.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_audit_action_at", "audit", ["action", "at"])


def downgrade() -> None:
    op.drop_index("ix_audit_action_at", "audit")
