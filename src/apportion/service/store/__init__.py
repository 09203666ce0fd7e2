"""Durable state of the live service (SQLAlchemy 2; schema by Alembic migrations)."""

from .rows import (
    TOKEN_KINDS,
    AlreadySubmitted,
    AttemptRow,
    AuditRow,
    BudgetRow,
    Conflict,
    HostRow,
    NotFound,
    PlacementEntry,
    StoreError,
    TokenRow,
    UsageInterval,
    UserRow,
    WorkloadRow,
)
from .store import ACTIVE, Store, default_sqlite_url, make_engine

__all__ = [
    "ACTIVE",
    "TOKEN_KINDS",
    "AlreadySubmitted",
    "AttemptRow",
    "AuditRow",
    "BudgetRow",
    "Conflict",
    "HostRow",
    "NotFound",
    "PlacementEntry",
    "Store",
    "StoreError",
    "TokenRow",
    "UsageInterval",
    "UserRow",
    "WorkloadRow",
    "default_sqlite_url",
    "make_engine",
]
