"""Databases for the service tests: a fresh SQLite file, or a freshly emptied PostgreSQL
database from APPORTION_TEST_PG_URL (set by scripts/with-services.sh)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from apportion.service.store import Store

PG_ENV = "APPORTION_TEST_PG_URL"
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def pg_url() -> str:
    """The test PostgreSQL URL; fails (never skips) when the server was not provided."""
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.fail(
            f"{PG_ENV} is not set: run the PostgreSQL tests through scripts/with-services.sh, "
            "e.g. scripts/with-services.sh .venv/bin/pytest tests/service -q"
        )
    return url


def reset_pg(url: str) -> None:
    """Drop every table so each test migrates an empty database."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def db_url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'apportion.db'}"
    url = pg_url()
    reset_pg(url)
    return url


def open_store(backend: str, tmp_path: Path) -> Store:
    store = Store(db_url(backend, tmp_path))
    store.migrate()
    return store
