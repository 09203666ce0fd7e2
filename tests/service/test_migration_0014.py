"""Migration 0014 (``--signal``) on a database written before it, on SQLite and
PostgreSQL: the workloads and attempts it holds get no signal and none sent, and read as
before; going back to 0013 drops the two columns and keeps the rows."""

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
def test_upgrade_from_0013_gives_existing_work_no_signal_and_downgrade_keeps_it(
    tmp_path: Path, backend: str,
) -> None:
    """A running workload of revision 0013 with its open attempt survives the upgrade:
    ``signal`` None (none to send), ``signal_sent_at`` None; a signal stored after it
    reads back; the downgrade to 0013 keeps both workloads."""
    store = Store(db_url(backend, tmp_path))
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0013")
        conn.execute(text(
            "INSERT INTO workloads (id, budget, \"user\", gpus, min_runtime, resumable, "
            "priority, checkpoint_interval, command, submit_time, queued_at, status, "
            "cancel_requested, attempts_count, created_at, time_limit) VALUES ('w-000001', "
            "'a', 'alice', 1, 60, false, 0, 0, '[\"true\"]', 1, 1, 'running', false, 1, 1, "
            "3600)"))
        conn.execute(text(
            "INSERT INTO attempts (workload_id, n, placement, gpus_held, started_at) "
            "VALUES ('w-000001', 1, '[[\"h1\", 1, [0]]]', 1, 1)"))
    store.migrate()
    try:
        w = store.get_workload("w-000001")
        assert (w.status.value, w.signal, [(a.n, a.signal_sent_at) for a in w.attempts]) == (
            "running", None, [(1, None)])
        store.mark_signalled("w-000001", 1, 3540.0)
        assert store.get_workload("w-000001").attempts[0].signal_sent_at == 3540.0
        store.add_budget("a", 1.0, "admin")
        new = store.add_workload(budget="a", gpus=1, min_runtime=0, submit_time=2.0,
                                 command=["true"], actor="alice", signal="B:USR1@120")
        assert store.get_workload(new.id).signal == "B:USR1@120"
        with store.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0013")
            ids = conn.execute(text("SELECT id FROM workloads ORDER BY seq")).scalars().all()
        assert ids == ["w-000001", new.id]
    finally:
        store.close()
