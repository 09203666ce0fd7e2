"""Durable state of the live service (SQLAlchemy 2; schema by Alembic migrations)."""

from .rows import (
    AttemptRow,
    AuditRow,
    BudgetRow,
    Conflict,
    HostRow,
    NotFound,
    PlacementEntry,
    StoreError,
    UsageInterval,
    UserRow,
    WorkloadRow,
)
from .store import ACTIVE, Store, default_sqlite_url, make_engine

__all__ = [
    "ACTIVE",
    "AttemptRow",
    "AuditRow",
    "BudgetRow",
    "Conflict",
    "HostRow",
    "NotFound",
    "PlacementEntry",
    "Store",
    "StoreError",
    "UsageInterval",
    "UserRow",
    "WorkloadRow",
    "default_sqlite_url",
    "make_engine",
]
