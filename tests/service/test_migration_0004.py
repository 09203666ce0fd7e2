"""Migration 0004 on a database written before it (at revision 0003), on SQLite and
PostgreSQL: old tokens get their ids and keep working as ``user`` tokens, and weights
stored before the weight range existed are brought into it, so the tree loads."""

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
def test_upgrade_from_0003_keeps_tokens_and_clamps_weights(tmp_path: Path,
                                                           backend: str) -> None:
    """Rows of revision 0003 survive the upgrade, made valid."""
    store = Store(db_url(backend, tmp_path))
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0003")
        conn.execute(text("INSERT INTO users (name, admin) VALUES ('alice', false)"))
        conn.execute(text("INSERT INTO tokens (hash, \"user\", created_at) "
                          "VALUES (:h, 'alice', 1.0)"), {"h": "ab" * 32})
        conn.execute(text("INSERT INTO budgets (path, parent, weight, managers, members) "
                          "VALUES ('a', NULL, 5e-324, '[]', '[]'), "
                          "('b', NULL, 1e308, '[]', '[]')"))
    store.migrate()
    try:
        assert store.principal_for_token("ab" * 32) is not None
        (t,) = store.tokens()
        assert (t.id, t.kind, t.label, t.revoked_at) == ("t-" + "ab" * 6, "user", "", None)
        tree = store.load_tree()
        assert (tree.weight("a"), tree.weight("b")) == (1e-6, 1e6)
    finally:
        store.close()
