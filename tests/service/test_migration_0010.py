"""Migration 0010 on held work (dependencies, array throttles) stored by a release before
0008, which released it in memory only: the store had no ``released_at`` and never moved
``queued_at`` on a release. Each test records a history with this release, rewrites it as
that release left it, and migrates it again (SQLite and PostgreSQL)."""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sched_env import Env, make_env
from sqlalchemy import text
from store_db import BACKENDS, open_store

from apportion.core import Status
from apportion.service.accounting import usage_report
from apportion.service.store import Store
from apportion.service.store.store import MIGRATIONS

H = 3600.0
T = float(calendar.timegm((2026, 11, 2, 0, 0, 0)))


def as_before_0008(store: Store) -> None:
    """The same history as a release before 0008 stored it, migrated again: no release
    times, and a ``queued_at`` a release never moved (work that never ran stays queued
    from its submission)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0009")
        conn.execute(text("UPDATE workloads SET released_at = NULL, queued_at = CASE "
                          "WHEN attempts_count = 0 THEN submit_time ELSE queued_at END"))
    store.migrate()


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = open_store(request.param, tmp_path)
    s.clock = lambda: T
    s.add_budget("ops", 1.0, actor="root")
    s.add_host("h1", 8, actor="root")
    yield s
    s.close()


def test_usage_report_of_held_work_is_the_same_after_an_upgrade_from_before_0008(
        store: Store) -> None:
    """In ops (the only budget, 8 GPUs), from T: A (4 GPUs) runs 0h..1h; B (4 GPUs,
    afterok A) is released at 1h and runs 1h..2h; an array of two 2-GPU elements throttled
    to one at a time runs element 0 0h..1h and element 1 1h..3h; C (afterok element 1,
    2 GPUs) has not started by 3h. The report of [T, T+3h) (ops owed what it was
    delivered, 14 GPU-h) is the same from the store as a release before 0008 left it, once
    migrated: it once owed the held work nothing (ops owed A's 4 GPU-h of the 14
    delivered)."""
    def submit(gpus: int, **kw: object) -> str:
        return store.add_workload(budget="ops", gpus=gpus, min_runtime=H, submit_time=T,
                                  command=["x"], actor="alice", **kw).id  # type: ignore[arg-type]

    def run(wid: str, start: float, end: float, gpus: int, released: bool = True) -> None:
        if released:
            store.release_held(wid, start)
        store.begin_attempt(wid, [("h1", gpus, list(range(gpus)))], start)
        store.end_attempt(wid, 1, end, 0, "exited 0", Status.COMPLETED)

    a = submit(4)
    b = submit(4, dependencies=[("afterok", a)])
    first = submit(2, array=[0, 1], array_throttle=1)
    second = store.array_ids(first)[1]
    submit(2, dependencies=[("afterok", second)])
    run(a, T, T + H, 4, released=False)
    run(first, T, T + H, 2)
    run(b, T + H, T + 2 * H, 4)
    run(second, T + H, T + 3 * H, 2)

    def figures() -> dict[str, tuple[float, float, float]]:
        r = usage_report(store, T, T + 3 * H, "budget", T + 3 * H)
        return {row["budget"]: (row["owed_gpu_hours"], row["delivered_gpu_hours"],
                                row["attainment"]) for row in r["rows"]}

    recorded = figures()
    assert recorded["ops"] == (14.0, 14.0, 1.0)
    as_before_0008(store)
    assert figures() == recorded


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = make_env(request.param, tmp_path)
    yield e
    e.store.close()


def test_array_elements_released_before_0008_keep_their_queue_time_after_the_upgrade(
        env: Env) -> None:
    """A blocker holds all 8 GPUs; an array of three 4-GPU elements throttled to two (%2) is
    submitted at 10 s: elements 0 and 1 are released and wait, element 2 is held. After
    the upgrade from before 0008 and a restart at 1000 s, elements 0 and 1 are still
    queued from 10 s (their share guarantee's deadline kept; they were released again and
    queued from the restart), and element 2 is still held."""
    env.submit(budget="ai/vision", gpus=8, min_runtime=8 * H)
    env.at(0.0)
    env.clock.set(10.0)
    first = env.store.add_workload(budget="ai/llm", gpus=4, min_runtime=600.0,
                                   submit_time=10.0, command=["train"], actor="alice",
                                   array=[0, 1, 2], array_throttle=2).id
    elements = env.store.array_ids(first)
    env.at(10.0)
    assert [e in env.sched.state.pending for e in elements] == [True, True, False]
    as_before_0008(env.store)
    env.clock.set(1000.0)
    env.restart()
    env.at(1000.0)
    pending = env.sched.state.pending
    assert [pending[e].queued_at for e in elements[:2]] == [10.0, 10.0]
    assert elements[2] not in pending
    rows = [env.store.get_workload(e) for e in elements]
    assert [(w.queued_at, w.released_at) for w in rows] == [
        (10.0, 10.0), (10.0, 10.0), (10.0, None)]
