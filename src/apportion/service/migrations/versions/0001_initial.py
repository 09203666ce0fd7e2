"""Initial schema: budgets, users, tokens, workloads, attempts, hosts, audit.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("path", sa.String(255), primary_key=True),
        sa.Column("parent", sa.String(255), sa.ForeignKey("budgets.path"), nullable=True),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("managers", sa.JSON(), nullable=False),
        sa.Column("members", sa.JSON(), nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("hash", sa.String(64), primary_key=True),
        sa.Column("user", sa.String(128), sa.ForeignKey("users.name"), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
    )
    op.create_table(
        "workloads",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=True, unique=True),
        sa.Column("budget", sa.String(255), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("min_runtime", sa.Double(), nullable=False),
        sa.Column("resumable", sa.Boolean(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("checkpoint_interval", sa.Double(), nullable=False),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("submit_time", sa.Double(), nullable=False),
        sa.Column("queued_at", sa.Double(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("attempts_count", sa.Integer(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("end_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
    )
    op.create_index("ix_workloads_status", "workloads", ["status"])
    op.create_table(
        "attempts",
        sa.Column(
            "workload_id", sa.String(32), sa.ForeignKey("workloads.id"), primary_key=True
        ),
        sa.Column("n", sa.Integer(), primary_key=True),
        sa.Column("placement", sa.JSON(), nullable=False),
        sa.Column("gpus_held", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.Column("handle", sa.String(255), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("end_reason", sa.Text(), nullable=True),
        sa.Column("gpu_seconds", sa.Double(), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
    )
    op.create_index("ix_attempts_ended_at", "attempts", ["ended_at"])
    op.create_table(
        "hosts",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("changed_at", sa.Double(), nullable=False),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("old", sa.JSON(), nullable=True),
        sa.Column("new", sa.JSON(), nullable=True),
    )


def downgrade() -> None:
    for table in ("audit", "hosts", "attempts", "workloads", "tokens", "users", "budgets"):
        op.drop_table(table)
