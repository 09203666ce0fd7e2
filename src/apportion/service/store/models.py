"""SQLAlchemy 2 table models of the service's store.

The schema itself is owned by the Alembic migrations in ``apportion/service/migrations``;
these models must match them (a test compares the two). Times are float seconds on the
caller's clock, like everywhere else in apportion; JSON columns hold small lists.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base of every store table."""


class BudgetModel(Base):
    __tablename__ = "budgets"

    path: Mapped[str] = mapped_column(String(255), primary_key=True)
    # parent path; NULL for a top-level node (the implicit root has no row)
    parent: Mapped[str | None] = mapped_column(
        String(255), ForeignKey("budgets.path"), nullable=True
    )
    weight: Mapped[float] = mapped_column(Double, nullable=False)
    managers: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    members: Mapped[list[str]] = mapped_column(JSON, nullable=False)


class UserModel(Base):
    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    admin: Mapped[bool] = mapped_column(Boolean, nullable=False)
    # the Unix account the user's work runs as; NULL: the account of the same name
    unix_user: Mapped[str | None] = mapped_column(String(32), nullable=True)


class MetaModel(Base):
    """Facts about the database itself (``db_id``: random, created by migration 0003)."""

    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text, nullable=False)


class TokenModel(Base):
    __tablename__ = "tokens"

    hash: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 hex
    user: Mapped[str] = mapped_column(String(128), ForeignKey("users.name"), nullable=False)
    created_at: Mapped[float] = mapped_column(Double, nullable=False)
    # "t-" and the first 12 hex digits of the hash: how people name a token (never secret)
    id: Mapped[str | None] = mapped_column(String(16), nullable=True)
    label: Mapped[str] = mapped_column(String(255), nullable=False, server_default="")
    kind: Mapped[str] = mapped_column(String(16), nullable=False, server_default="user")
    revoked_at: Mapped[float | None] = mapped_column(Double, nullable=True)
    # refused from this moment on, on the service's clock; NULL: never expires (0013)
    expires_at: Mapped[float | None] = mapped_column(Double, nullable=True)

    __table_args__ = (Index("ix_tokens_id", "id", unique=True),)


class WorkloadModel(Base):
    __tablename__ = "workloads"

    # the autoincrement key gives the public id ("w-000123"), written in the same transaction
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str | None] = mapped_column(String(32), unique=True, nullable=True)
    budget: Mapped[str] = mapped_column(String(255), nullable=False)
    user: Mapped[str] = mapped_column(String(128), nullable=False)
    gpus: Mapped[int] = mapped_column(Integer, nullable=False)
    min_runtime: Mapped[float] = mapped_column(Double, nullable=False)
    resumable: Mapped[bool] = mapped_column(Boolean, nullable=False)
    priority: Mapped[int] = mapped_column(Integer, nullable=False)
    checkpoint_interval: Mapped[float] = mapped_column(Double, nullable=False)
    # checkpoints when told to stop (SIGTERM) within the grace period (0006)
    checkpoint_on_term: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=false()
    )
    command: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    chdir: Mapped[str | None] = mapped_column(Text, nullable=True)  # working directory
    env: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)  # exported vars
    # the submitter's file mode creation mask (0011); None: none sent, the executors' 022
    umask: Mapped[int | None] = mapped_column(Integer, nullable=True)
    submit_time: Mapped[float] = mapped_column(Double, nullable=False)
    queued_at: Mapped[float] = mapped_column(Double, nullable=False)
    # held work (dependencies, array throttle): when it joined the queue (0008)
    released_at: Mapped[float | None] = mapped_column(Double, nullable=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, nullable=False)
    attempts_count: Mapped[int] = mapped_column(Integer, nullable=False)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    end_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Double, nullable=False)
    name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    time_limit: Mapped[float] = mapped_column(Double, nullable=False, server_default="0")
    # arrays: the first element's id, this element's index, the throttle (0: none)
    array_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    array_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    array_throttle: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    # [[afterok | afterany | afternotok, workload id], ...]
    dependencies: Mapped[list[list[str]] | None] = mapped_column(JSON, nullable=True)
    # {"nodelist": [...], "exclude": [...]}: the hosts it may run on
    constraints: Mapped[dict[str, list[str]] | None] = mapped_column(JSON, nullable=True)
    # the GPU kinds it accepts, in its owner's order (NULL: any), and its cluster ("": any)
    gpu_kinds: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    cluster: Mapped[str] = mapped_column(String(64), nullable=False, server_default="")
    # sbatch's --signal, canonical ("B:USR1@120", warn_signal.py); NULL: none (0014)
    signal: Mapped[str | None] = mapped_column(String(32), nullable=True)

    # the submitter's Idempotency-Key, unique per user, and the digest of that request
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    request_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)

    __table_args__ = (
        Index("ix_workloads_status", "status"),
        Index("ix_workloads_array_id", "array_id"),
        UniqueConstraint("user", "idempotency_key", name="uq_workloads_user_idempotency_key"),
    )


class AttemptModel(Base):
    __tablename__ = "attempts"

    workload_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("workloads.id"), primary_key=True
    )
    n: Mapped[int] = mapped_column(Integer, primary_key=True)  # 1-based
    placement: Mapped[list[Any]] = mapped_column(JSON, nullable=False)  # [[host, gpus, [idx]]]
    gpus_held: Mapped[int] = mapped_column(Integer, nullable=False)
    started_at: Mapped[float] = mapped_column(Double, nullable=False)
    ended_at: Mapped[float | None] = mapped_column(Double, nullable=True)
    handle: Mapped[str | None] = mapped_column(String(255), nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    end_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    gpu_seconds: Mapped[float | None] = mapped_column(Double, nullable=True)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the stop the scheduler issued (NULL: none): its reason ("preempted: rebalance",
    # "timeout: ...", "cancelled") and its time, on the scheduler's clock (0009)
    stop_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    stop_issued_at: Mapped[float | None] = mapped_column(Double, nullable=True)
    # when the workload's --signal was sent to this attempt, on the scheduler's clock
    # (NULL: not yet, or none to send), so that a restart does not send it twice (0014)
    signal_sent_at: Mapped[float | None] = mapped_column(Double, nullable=True)

    __table_args__ = (Index("ix_attempts_ended_at", "ended_at"),)


class HostModel(Base):
    __tablename__ = "hosts"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer, nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    changed_at: Mapped[float] = mapped_column(Double, nullable=False)
    # its pool; "": the config's default cluster and kind ([pools]) (0007)
    cluster: Mapped[str] = mapped_column(String(64), nullable=False, server_default="")
    kind: Mapped[str] = mapped_column(String(64), nullable=False, server_default="")


class AuditModel(Base):
    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Double, nullable=False)
    actor: Mapped[str] = mapped_column(String(128), nullable=False)
    action: Mapped[str] = mapped_column(String(64), nullable=False)
    target: Mapped[str] = mapped_column(String(255), nullable=False)
    old: Mapped[Any] = mapped_column(JSON, nullable=True)
    new: Mapped[Any] = mapped_column(JSON, nullable=True)

    # a usage report's cancellations in its period, and every host entry (0012)
    __table_args__ = (Index("ix_audit_action_at", "action", "at"),)
