"""Migration 0013 (token lifetimes) on a database written before it, on SQLite and
PostgreSQL: the tokens it holds get no expiry (NULL: never) and keep working."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text
from store_db import BACKENDS, db_url

from apportion.service.store import Store
from apportion.service.store.store import MIGRATIONS


@pytest.mark.parametrize("backend", BACKENDS)
def test_upgrade_from_0012_gives_existing_tokens_no_expiry(tmp_path: Path,
                                                           backend: str) -> None:
    """A user token and a revoked one of revision 0012 survive the upgrade: ``expires_at``
    NULL, the valid one still valid at any time, the revoked one still revoked."""
    store = Store(db_url(backend, tmp_path))
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0012")
        conn.execute(text("INSERT INTO users (name, admin) VALUES ('alice', true)"))
        conn.execute(text(
            "INSERT INTO tokens (hash, \"user\", created_at, id, label, kind, revoked_at) "
            "VALUES (:a, 'alice', 1.0, :ia, 'laptop', 'user', NULL), "
            "(:b, 'alice', 2.0, :ib, '', 'user', 3.0)"),
            {"a": "ab" * 32, "ia": "t-" + "ab" * 6, "b": "cd" * 32, "ib": "t-" + "cd" * 6})
    store.migrate()
    try:
        assert [(t.id, t.label, t.revoked_at, t.expires_at) for t in store.tokens()] == [
            ("t-" + "ab" * 6, "laptop", None, None), ("t-" + "cd" * 6, "", 3.0, None)]
        assert store.user_for_token("ab" * 32, now=1e12) is not None
        assert store.user_for_token("cd" * 32) is None
    finally:
        store.close()
