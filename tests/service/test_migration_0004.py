"""Migration 0004 on a database written before it (at revision 0003), on SQLite and
PostgreSQL: old tokens get their ids and keep working as ``user`` tokens, and weights
stored before the weight range existed are brought into it, so the tree loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_upgrade_from_0002_keeps_workloads_their_attempts_and_the_references(
        tmp_path: Path, backend: str) -> None:
    """A database of revision 0002 with a workload and its attempt is brought to the newest
    revision, rows kept. On SQLite the table rebuilds of later revisions drop and re-make
    ``workloads``, which ``attempts`` refers to: with foreign keys enforced that drop was
    refused, so a database that had run anything could not be upgraded. Foreign keys are
    enforced again afterwards."""
    store = Store(db_url(backend, tmp_path))
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
        conn.execute(text(
            "INSERT INTO workloads (seq, id, budget, \"user\", gpus, min_runtime, resumable, "
            "priority, checkpoint_interval, command, submit_time, queued_at, status, "
            "cancel_requested, attempts_count, created_at) VALUES (1, 'w-000001', 'a', "
            "'alice', 1, 60, false, 0, 0, '[\"true\"]', 1, 1, 'completed', false, 1, 1)"))
        conn.execute(text(
            "INSERT INTO attempts (workload_id, n, placement, gpus_held, started_at, "
            "ended_at, gpu_seconds) VALUES ('w-000001', 1, '[[\"h1\", 1, [0]]]', 1, 1, 2, 1)"))
    store.migrate()
    try:
        w = store.get_workload("w-000001")
        assert (w.status.value, [(a.n, a.gpu_seconds) for a in w.attempts]) == (
            "completed", [(1, 1.0)])
        with pytest.raises(IntegrityError), store.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO attempts (workload_id, n, placement, gpus_held, started_at) "
                "VALUES ('w-999999', 1, '[]', 1, 1)"))
    finally:
        store.close()
