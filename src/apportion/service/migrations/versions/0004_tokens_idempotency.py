"""Tokens get an id, a label, a kind and a revocation time; submissions an idempotency key.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as t:
        # the public name of a token ("t-" and the first 12 hex digits of its hash)
        t.add_column(sa.Column("id", sa.String(16), nullable=True))
        t.add_column(sa.Column("label", sa.String(255), nullable=False, server_default=""))
        # "user": acts as its user; "scrape": reads only (Prometheus)
        t.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="user"))
        t.add_column(sa.Column("revoked_at", sa.Double(), nullable=True))
    op.execute("UPDATE tokens SET id = 't-' || substr(hash, 1, 12)")
    op.create_index("ix_tokens_id", "tokens", ["id"], unique=True)
    # weights are now bounded (apportion.core.tree.MIN_WEIGHT..MAX_WEIGHT): bring weights
    # stored before into range, or the tree they make would be refused
    op.execute("UPDATE budgets SET weight = 1e-6 WHERE NOT (weight >= 1e-6)")
    op.execute("UPDATE budgets SET weight = 1e6 WHERE weight > 1e6")
    with op.batch_alter_table("workloads") as t:
        # the client's Idempotency-Key and the digest of its request; NULL: none sent
        t.add_column(sa.Column("idempotency_key", sa.String(255), nullable=True))
        t.add_column(sa.Column("request_digest", sa.String(64), nullable=True))
        t.create_unique_constraint("uq_workloads_user_idempotency_key",
                                   ["user", "idempotency_key"])


def downgrade() -> None:
    with op.batch_alter_table("workloads") as t:
        t.drop_constraint("uq_workloads_user_idempotency_key", type_="unique")
        t.drop_column("request_digest")
        t.drop_column("idempotency_key")
    op.drop_index("ix_tokens_id", "tokens")
    with op.batch_alter_table("tokens") as t:
        t.drop_column("revoked_at")
        t.drop_column("kind")
        t.drop_column("label")
        t.drop_column("id")
