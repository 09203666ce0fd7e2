"""The store's contract, against SQLite and PostgreSQL alike."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import alembic.command
import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import event, text
from store_db import BACKENDS, db_url, open_store

from apportion.core import HostState, Status
from apportion.service.store import (
    ACTIVE,
    CancelResult,
    Conflict,
    NotALeaf,
    NotFound,
    Store,
    UnknownParent,
)
from apportion.service.store import store as store_module
from apportion.service.store.models import Base


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = open_store(request.param, tmp_path)
    yield s
    s.close()


def submit(store: Store, budget: str = "ai/llm", gpus: int = 2, t: float = 0.0,
           min_runtime: float = 600.0, user: str = "alice", resumable: bool = False) -> str:
    return store.add_workload(
        budget=budget, gpus=gpus, min_runtime=min_runtime, submit_time=t,
        command=["sleep", "1"], actor=user, resumable=resumable,
    ).id


def test_migrations_match_models(store: Store) -> None:
    """After migrate(), the database schema is exactly what the models declare."""
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_migrate_twice_is_harmless(store: Store) -> None:
    """migrate() on an up-to-date database changes nothing and keeps the data."""
    wid = submit(store)
    store.migrate()
    assert store.get_workload(wid).status is Status.PENDING


@pytest.mark.parametrize("backend", BACKENDS)
def test_migrate_logs_each_schema_change_at_info(tmp_path: Path, backend: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """migrate() says at INFO that it upgraded a schema, from which revision to which (an
    upgrade is for good; it was logged at DEBUG only): a database made by a release at
    0006 -> the newest, 'migrated'; then, up to date, nothing; nor when it creates the
    schema of a new database."""
    newest = store_module.newest_revision()
    store = Store(db_url(backend, tmp_path))
    cfg = Config()
    cfg.set_main_option("script_location", str(store_module.MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        alembic.command.upgrade(cfg, "0006")
    try:
        with caplog.at_level("INFO", logger="apportion.store"):
            store.migrate()
            store.migrate()
        assert [(r.levelname, r.getMessage()) for r in caplog.records
                if r.name == "apportion.store"] == [
            ("INFO", f"store schema 0006 -> {newest}: migrated")]
    finally:
        store.close()
    caplog.clear()
    (tmp_path / "new").mkdir()
    with caplog.at_level("INFO", logger="apportion.store"):
        open_store(backend, tmp_path / "new").close()
    assert [r for r in caplog.records if r.name == "apportion.store"] == []


def test_workload_ids_are_sequential_and_durable(tmp_path: Path) -> None:
    """Ids come from the database sequence; a submission survives reopening the store."""
    url = db_url("sqlite", tmp_path)
    s1 = Store(url)
    s1.migrate()
    a, b = submit(s1), submit(s1)
    s1.close()
    s2 = Store(url)
    assert (a, b) == ("w-000001", "w-000002")
    assert [w.id for w in s2.active_workloads()] == [a, b]
    s2.close()


def test_add_workload_stores_every_field(store: Store) -> None:
    """Every spec field round-trips and the new workload is pending, queued at submit."""
    w = store.add_workload(
        budget="ai/llm", gpus=16, min_runtime=1800, submit_time=12.5, command=["a", "b c"],
        actor="bob", resumable=True, priority=3, checkpoint_interval=900,
    )
    got = store.get_workload(w.id)
    assert (got.budget, got.user, got.gpus, got.min_runtime, got.resumable) == (
        "ai/llm", "bob", 16, 1800.0, True)
    assert (got.priority, got.checkpoint_interval, got.command) == (3, 900.0, ("a", "b c"))
    assert (got.status, got.submit_time, got.queued_at, got.attempts_count) == (
        Status.PENDING, 12.5, 12.5, 0)
    assert got.spec().allocated


def test_begin_attempt_moves_pending_to_running(store: Store) -> None:
    """begin_attempt writes the attempt (no handle yet) and sets running in one go."""
    wid = submit(store)
    a = store.begin_attempt(wid, [("h1", 2, [0, 1])], started_at=10.0)
    assert (a.n, a.gpus_held, a.handle, a.ended_at) == (1, 2, None, None)
    w = store.get_workload(wid)
    assert (w.status, w.attempts_count) == (Status.RUNNING, 1)
    assert w.attempt == a
    assert a.core_placement()[0].host == "h1"


def test_begin_attempt_is_compare_and_set(store: Store) -> None:
    """A second begin_attempt on a running workload fails and changes nothing."""
    wid = submit(store)
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 10.0)
    with pytest.raises(Conflict, match=f"workload {wid}: state: cannot go from running"):
        store.begin_attempt(wid, [("h2", 2, [0, 1])], 11.0)
    w = store.get_workload(wid)
    assert w.attempts_count == 1 and len(w.attempts) == 1


def test_concurrent_begin_attempt_has_one_winner(store: Store) -> None:
    """Eight threads race to start one workload: exactly one succeeds."""
    wid = submit(store)
    wins: list[int] = []
    errors: list[Exception] = []

    def race(i: int) -> None:
        try:
            store.begin_attempt(wid, [(f"h{i}", 2, [0, 1])], 10.0)
            wins.append(i)
        except Conflict as e:
            errors.append(e)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(errors) == 7
    assert store.get_workload(wid).attempts_count == 1


def test_unknown_workload_is_not_found(store: Store) -> None:
    """Operations on a missing workload raise NotFound naming it."""
    with pytest.raises(NotFound, match="w-999999"):
        store.get_workload("w-999999")
    with pytest.raises(NotFound, match="w-999999"):
        store.begin_attempt("w-999999", [("h", 1, [0])], 0.0)


def test_set_attempt_handle(store: Store) -> None:
    """The executor's handle is recorded on the attempt."""
    wid = submit(store)
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 10.0)
    store.set_attempt_handle(wid, 1, "pid:123")
    assert store.get_workload(wid).attempts[0].handle == "pid:123"


def test_end_attempt_charges_once(store: Store) -> None:
    """end_attempt charges gpus x duration and a second call is a no-op returning False."""
    wid = submit(store, gpus=4)
    store.begin_attempt(wid, [("h1", 4, [0, 1, 2, 3])], 100.0)
    assert store.end_attempt(wid, 1, 160.0, 0, "exited", Status.COMPLETED) is True
    assert store.end_attempt(wid, 1, 999.0, 1, "again", Status.FAILED) is False
    w = store.get_workload(wid)
    assert (w.status, w.exit_code, w.end_reason) == (Status.COMPLETED, 0, "exited")
    assert (w.attempts[0].gpu_seconds, w.attempts[0].ended_at) == (240.0, 160.0)
    assert w.attempt is None


def test_end_attempt_requeue(store: Store) -> None:
    """Requeue: the workload is pending again, queued at the end time, keeps submit time."""
    wid = submit(store, t=5.0, resumable=True)
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 10.0)
    store.mark_stopping(wid, "preempted: rebalance", 40.0)
    assert store.end_attempt(wid, 1, 50.0, None, "preempted: rebalance", Status.PENDING)
    w = store.get_workload(wid)
    assert (w.status, w.queued_at, w.submit_time) == (Status.PENDING, 50.0, 5.0)
    a2 = store.begin_attempt(wid, [("h2", 2, [0, 1])], 60.0)
    assert a2.n == 2


def test_release_held_sets_the_queue_time_once_and_keeps_a_requeue_time(store: Store) -> None:
    """Releasing held work stamps ``released_at`` and, for work that never ran, ``queued_at``
    (the queue time counts from the release); it happens once only, and never to work that
    is not pending. Work that ran before keeps the queue time its requeue gave it."""
    wid = submit(store, t=5.0)
    assert store.release_held(wid, 40.0) == 40.0
    w = store.get_workload(wid)
    assert (w.queued_at, w.released_at, w.submit_time) == (40.0, 40.0, 5.0)
    assert store.release_held(wid, 90.0) is None  # once only
    assert store.get_workload(wid).queued_at == 40.0
    ran = submit(store, t=5.0, resumable=True)
    store.begin_attempt(ran, [("h1", 2, [0, 1])], 10.0)
    assert store.release_held(ran, 20.0) is None  # running, not pending
    store.mark_stopping(ran, "preempted: rebalance", 40.0)
    store.end_attempt(ran, 1, 50.0, None, "preempted: rebalance", Status.PENDING)
    assert store.release_held(ran, 70.0) == 50.0  # its requeue time
    w = store.get_workload(ran)
    assert (w.queued_at, w.released_at) == (50.0, 70.0)


def test_end_attempt_illegal_transition_changes_nothing(store: Store) -> None:
    """running -> preempted skips stopping: refused, and the attempt stays open."""
    wid = submit(store)
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 10.0)
    with pytest.raises(Conflict, match="cannot go from running to preempted"):
        store.end_attempt(wid, 1, 20.0, None, "x", Status.PREEMPTED)
    w = store.get_workload(wid)
    assert w.status is Status.RUNNING and w.attempt is not None and w.attempt.ended_at is None


def test_mark_stopping_needs_running(store: Store) -> None:
    """mark_stopping on a pending workload is refused."""
    wid = submit(store)
    with pytest.raises(Conflict, match="cannot go from pending to stopping"):
        store.mark_stopping(wid, "cancelled", 10.0)


def test_mark_stopping_keeps_why_and_when_with_the_open_attempt(store: Store) -> None:
    """The stop's reason and time are kept with the attempt it stops (what a restarted
    scheduler carries on), not with an earlier attempt of the same workload."""
    wid = submit(store, resumable=True)
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 10.0)
    assert store.get_workload(wid).attempts[0].stop_reason is None
    store.mark_stopping(wid, "preempted: rebalance", 40.0)
    store.end_attempt(wid, 1, 45.0, None, "preempted: rebalance", Status.PENDING)
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 60.0)
    store.mark_stopping(wid, "timeout: reached its time limit of 1 min", 70.0)
    w = store.get_workload(wid)
    assert [(a.stop_reason, a.stop_issued_at) for a in w.attempts] == [
        ("preempted: rebalance", 40.0), ("timeout: reached its time limit of 1 min", 70.0)]
    assert w.attempt is not None and w.attempt.stop_issued_at == 70.0


def test_mark_stopping_writes_a_preemptions_audit_entry_with_the_stop_or_not_at_all(
    store: Store,
) -> None:
    """A preemption's ``workload.preempt`` entry is written by ``mark_stopping`` itself:
    with the stop when it is recorded, and not at all when it is refused (a workload not
    running), so the audit never tells of a preemption that was not carried out."""
    wid = submit(store)
    why = {"reason": "rebalance", "by": "w-000009"}
    with pytest.raises(Conflict, match="cannot go from pending to stopping"):
        store.mark_stopping(wid, "preempted: rebalance", 5.0, why, "scheduler")
    assert [a.action for a in store.audit(target=wid)] == []
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 10.0)
    store.mark_stopping(wid, "preempted: rebalance", 20.0, why, "scheduler")
    assert store.get_workload(wid).status is Status.STOPPING
    assert [(a.actor, a.action, a.new) for a in store.audit(target=wid)] == [
        ("scheduler", "workload.preempt", why)]


def test_cancel_pending(store: Store) -> None:
    """Cancelling a pending workload ends it at once, audited."""
    wid = submit(store)
    w = store.cancel_workload(wid, actor="carol")
    assert w.status is Status.CANCELLED
    entry = store.audit(limit=1)[0]
    assert (entry.actor, entry.action, entry.target) == ("carol", "workload.cancel", wid)


def test_cancel_running_requests_stop(store: Store) -> None:
    """Cancelling a running workload only flags it; the scheduler stops it."""
    wid = submit(store)
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 10.0)
    w = store.cancel_workload(wid, actor="alice")
    assert w.status is Status.RUNNING and w.cancel_requested


def test_a_repeated_cancel_of_running_work_is_audited_once(store: Store) -> None:
    """Cancelling a running workload that was asked to stop already answers it as it is
    and appends no second workload.cancel entry."""
    wid = submit(store)
    store.begin_attempt(wid, [("h1", 2, [0, 1])], 10.0)
    store.cancel_workload(wid, actor="alice")
    again = store.cancel_workload(wid, actor="carol")
    assert again.status is Status.RUNNING and again.cancel_requested
    cancels = [e for e in store.audit(limit=100) if e.action == "workload.cancel"]
    assert [(e.actor, e.target) for e in cancels] == [("alice", wid)]


def test_cancel_finished_is_conflict(store: Store) -> None:
    """A finished workload cannot be cancelled."""
    wid = submit(store)
    store.cancel_workload(wid, actor="alice")
    with pytest.raises(Conflict, match="already cancelled"):
        store.cancel_workload(wid, actor="alice")


def test_cancel_workloads_answers_each_id_once_and_audits_each_change(store: Store) -> None:
    """``cancel_workloads``: a pending workload is cancelled (``cancelled by <actor>``), a
    running one gets ``cancel_requested``, an ended one, an unknown id and one the caller
    may not cancel are answered so and left as they are; each id once, in the order given;
    one ``workload.cancel`` entry per workload changed, as the cancel of one writes."""
    pending, running, ended, theirs = submit(store), submit(store), submit(store), submit(
        store, user="bob")
    store.begin_attempt(running, [("h1", 2, [0, 1])], 1.0)
    store.cancel_workload(ended, "alice")
    last = store.audit(limit=1)[0].id
    out = store.cancel_workloads([ended, running, "w-999999", pending, theirs, pending],
                                 "alice", lambda owner, _budget: owner == "alice")
    assert [(r.id, r.result, r.status, r.owner) for r in out] == [
        (ended, CancelResult.ENDED, Status.CANCELLED, "alice"),
        (running, CancelResult.CANCEL_REQUESTED, Status.RUNNING, "alice"),
        ("w-999999", CancelResult.NOT_FOUND, None, None),
        (pending, CancelResult.CANCELLED, Status.CANCELLED, "alice"),
        (theirs, CancelResult.NOT_ALLOWED, Status.PENDING, "bob"),
    ]
    w = store.get_workload(pending)
    assert (w.status, w.end_reason, w.cancel_requested) == (
        Status.CANCELLED, "cancelled by alice", True)
    assert store.get_workload(running).cancel_requested
    assert store.get_workload(theirs).status is Status.PENDING
    assert [(a.actor, a.action, a.target, a.old, a.new)
            for a in reversed(store.audit(after_id=last))] == [
        ("alice", "workload.cancel", pending, {"status": "pending"}, None),
        ("alice", "workload.cancel", running, {"status": "running"}, None)]


def test_cancel_workloads_again_changes_and_audits_nothing(store: Store) -> None:
    """The same bulk cancel retried: the pending workload it cancelled is answered
    ``ended`` (cancelled), the running one ``cancel_requested`` again, and nothing is
    written: no second audit entry, no row changed."""
    pending, running = submit(store), submit(store)
    store.begin_attempt(running, [("h1", 2, [0, 1])], 1.0)
    store.cancel_workloads([pending, running], "alice", lambda _o, _b: True)
    rows = [store.get_workload(w) for w in (pending, running)]
    audit = store.audit(limit=1000)
    again = store.cancel_workloads([pending, running], "alice", lambda _o, _b: True)
    assert [(r.result, r.status) for r in again] == [
        (CancelResult.ENDED, Status.CANCELLED),
        (CancelResult.CANCEL_REQUESTED, Status.RUNNING)]
    assert [store.get_workload(w) for w in (pending, running)] == rows
    assert store.audit(limit=1000) == audit


def test_cancel_workloads_by_filter_leaves_out_work_no_longer_in_its_states(
    store: Store,
) -> None:
    """With ``only`` (the states a filter listed the ids in), a workload that ended after
    the listing, before its transaction, is left out of the answer rather than reported as
    ended; one the filter named that never existed is left out too."""
    live, done = submit(store), submit(store)
    listed = store.workload_ids([Status.PENDING], user="alice")
    assert listed == [live, done]
    store.cancel_workload(done, "alice")  # ends in between
    out = store.cancel_workloads([*listed, "w-999999"], "alice", lambda _o, _b: True,
                                 only=[Status.PENDING])
    assert [(r.id, r.result) for r in out] == [(live, CancelResult.CANCELLED)]


def test_cancel_workloads_takes_the_pending_first_in_batches_of_their_own(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many workloads are cancelled CANCEL_BATCH to a transaction, every pending one before
    any running one is asked to stop (the audit's order shows it), so GPUs a stop frees are
    never given to work the same call cancels; ``workload_ids`` lists a filter's matches
    in that order, pending ones first, each group oldest first."""
    monkeypatch.setattr(store_module, "CANCEL_BATCH", 2)
    ids = [submit(store) for _ in range(6)]
    for wid in ids[::2]:
        store.begin_attempt(wid, [("h1", 2, [0, 1])], 1.0)
    pending, running = ids[1::2], ids[::2]
    assert store.workload_ids(ACTIVE, user="alice") == pending + running
    out = store.cancel_workloads(ids, "alice", lambda _o, _b: True)
    assert [r.id for r in out] == ids  # answered in the order given
    cancels = [a for a in reversed(store.audit(limit=1000)) if a.action == "workload.cancel"]
    assert [a.target for a in cancels] == pending + running


def test_active_workloads(store: Store) -> None:
    """active_workloads lists pending/running/stopping with open attempts, not final ones."""
    a, b, c = submit(store), submit(store), submit(store)
    store.begin_attempt(b, [("h1", 2, [0, 1])], 1.0)
    store.cancel_workload(c, "alice")
    rows = {w.id: w for w in store.active_workloads()}
    assert set(rows) == {a, b}
    assert rows[a].attempt is None and rows[b].attempt is not None


def test_active_index(store: Store) -> None:
    """active_index maps each active workload to its status and cancel flag."""
    a, b, c = submit(store), submit(store), submit(store)
    store.begin_attempt(b, [("h1", 2, [0, 1])], 1.0)
    store.cancel_workload(b, "alice")
    store.cancel_workload(c, "alice")
    assert store.active_index() == {a: ("pending", False), b: ("running", True)}


def test_list_workloads_filters(store: Store) -> None:
    """Filters by status, budget subtree and user."""
    a = submit(store, budget="ai/llm", user="alice")
    b = submit(store, budget="ai/vision", user="bob")
    store.begin_attempt(b, [("h", 2, [0, 1])], 1.0)
    assert [w.id for w in store.list_workloads(budget="ai")] == [a, b]
    assert [w.id for w in store.list_workloads(budget="ai/llm")] == [a]
    assert [w.id for w in store.list_workloads(user="bob")] == [b]
    assert [w.id for w in store.list_workloads(statuses=[Status.RUNNING])] == [b]


def test_list_workloads_after_a_workload_gives_the_ones_submitted_after_it(
        store: Store) -> None:
    """``after`` (the next page's cursor) keeps the workloads submitted after that one, in
    order and with the other filters, on both databases; after the last, none."""
    ids = [submit(store, user="bob" if i % 2 else "alice") for i in range(5)]
    assert [w.id for w in store.list_workloads(after=ids[1], limit=2)] == ids[2:4]
    assert [w.id for w in store.list_workloads(after=ids[0], user="alice")] == ids[2::2]
    assert store.list_workloads(after=ids[-1]) == []


def test_audit_before_an_entry_gives_the_older_ones(store: Store) -> None:
    """``before_id`` (the next page's cursor) keeps the entries older than that one, newest
    first, with the other filters, on both databases; before the oldest, none."""
    store.add_budget("ai", 1, actor="admin")
    for weight in (2, 3, 4):
        store.set_budget_weight("ai", weight, actor="root")
    every = [e.id for e in store.audit(limit=100)]
    assert [e.id for e in store.audit(limit=2, before_id=every[1])] == every[2:4]
    ai = [e.id for e in store.audit(limit=100, target="ai")]
    assert [e.id for e in store.audit(target="ai", before_id=ai[0])] == ai[1:]
    assert store.audit(before_id=every[-1]) == []


def test_the_budget_filter_is_an_exact_subtree(store: Store) -> None:
    """budget=lab_a is lab_a and below, nothing else, on both databases: not labxa/p ('_'
    is any character to LIKE) nor LAB_A/p (SQLite's LIKE ignores case), which the filter
    once took in, so that `apportion cancel --budget lab_a` cancelled labxa's work."""
    ids = {}
    for path in ("lab_a/p", "labxa/p", "LAB_A/p", "lab/p"):
        store.add_budget(path, 1, "admin", create_parents=True)
        ids[path] = submit(store, budget=path)
    assert [w.id for w in store.list_workloads(budget="lab_a")] == [ids["lab_a/p"]]
    assert [w.id for w in store.list_workloads(budget="lab")] == [ids["lab/p"]]
    assert [w.id for w in store.list_workloads(budget="LAB_A")] == [ids["LAB_A/p"]]


def test_usage_intervals_overlap_window(store: Store) -> None:
    """Only attempts that overlap [since, now) come back, open ones with ended_at None."""
    old, recent, running = submit(store), submit(store, min_runtime=0), submit(store)
    for wid, t in ((old, 0.0), (recent, 50.0), (running, 90.0)):
        store.begin_attempt(wid, [("h", 2, [0, 1])], t)
    store.end_attempt(old, 1, 40.0, 0, "done", Status.COMPLETED)
    store.end_attempt(recent, 1, 120.0, 0, "done", Status.COMPLETED)
    got = store.usage_intervals(since=100.0)
    assert [(u.allocated, u.started_at, u.ended_at) for u in got] == [
        (False, 50.0, 120.0), (True, 90.0, None)]


def test_host_state_audited(store: Store) -> None:
    """A host change is audited old -> new; an illegal one is refused and changes nothing."""
    store.add_host("h1", 8, actor="admin")
    h = store.set_host_state("h1", HostState.DRAINING, "bad fan", actor="admin")
    assert (h.state, h.reason) == (HostState.DRAINING, "bad fan")
    e = store.audit(limit=1)[0]
    assert (e.action, e.old["state"], e.new["state"]) == ("host.state", "healthy", "draining")
    store.set_host_state("h1", HostState.REPAIR, "empty", actor="scheduler")
    with pytest.raises(Conflict, match="cannot go from repair to draining"):
        store.set_host_state("h1", HostState.DRAINING, "x", actor="admin")
    assert store.get_host("h1").state is HostState.REPAIR


def test_budget_tree_round_trip(store: Store) -> None:
    """Budgets load as the core tree; missing parents are created with weight 1."""
    store.add_budget("ai/llm", 3, actor="admin", create_parents=True, managers=["carol"])
    store.add_budget("ai/vision", 1, actor="admin")
    tree = store.load_tree()
    assert tree.share("ai/llm") == pytest.approx(0.75)
    assert [b.path for b in store.budgets()] == ["ai", "ai/llm", "ai/vision"]
    assert store.get_budget("ai/llm").managers == ("carol",)


def test_budget_needs_parent(store: Store) -> None:
    """Without create_parents, an unknown parent is refused and nothing is created."""
    with pytest.raises(UnknownParent, match="parent 'ai': unknown budget"):
        store.add_budget("ai/llm", 1, actor="admin")
    assert store.budgets() == []


def test_leaf_with_work_cannot_get_children(store: Store) -> None:
    """A leaf with active workloads stays a leaf."""
    store.add_budget("ai", 1, actor="admin")
    submit(store, budget="ai")
    with pytest.raises(Conflict, match="leaf with active workloads"):
        store.add_budget("ai/llm", 1, actor="admin")


def test_budget_changes_are_audited(store: Store) -> None:
    """Weight, member and manager changes each leave an old -> new audit entry."""
    store.add_budget("ai", 1, actor="admin")
    store.set_budget_weight("ai", 2.5, actor="root")
    store.set_budget_members("ai", ["bob", "alice"], actor="root")
    store.set_budget_managers("ai", ["carol"], actor="root")
    entries = store.audit(limit=3)
    assert [(e.action, e.old, e.new) for e in reversed(entries)] == [
        ("budget.weight", {"weight": 1.0}, {"weight": 2.5}),
        ("budget.members", {"members": []}, {"members": ["alice", "bob"]}),
        ("budget.managers", {"managers": []}, {"managers": ["carol"]}),
    ]


def test_a_budget_change_to_what_it_has_is_not_audited(store: Store) -> None:
    """Setting a node's weight, members or managers to what it has (members in another
    order, or given twice) appends no audit entry (it added one with old equal to new); a
    real change after them still does."""
    store.add_budget("ai", 2.5, actor="admin", members=["alice", "bob"], managers=["carol"])
    before = [e.id for e in store.audit(limit=100)]
    store.set_budget_weight("ai", 2.5, actor="root")
    store.set_budget_members("ai", ["bob", "alice", "bob"], actor="root")
    store.set_budget_managers("ai", ["carol"], actor="root")
    assert [e.id for e in store.audit(limit=100)] == before
    store.set_budget_weight("ai", 3, actor="root")
    assert (store.audit(limit=1)[0].action, store.get_budget("ai").weight) == (
        "budget.weight", 3.0)


def test_bad_weight_refused(store: Store) -> None:
    """Weights must be > 0 (and, through the tree, within 1e-6..1e6)."""
    store.add_budget("ai", 1, actor="admin")
    with pytest.raises(Conflict, match="weight: must be > 0"):
        store.set_budget_weight("ai", 0, actor="admin")
    with pytest.raises(Conflict, match="weight: must be a number from 1e-06 to 1e.06"):
        store.add_budget("ml", -1, actor="admin")


def test_tokens_map_to_users(store: Store) -> None:
    """A token digest finds its user; unknown digests find nobody."""
    store.add_user("alice", actor="admin", admin=True)
    store.add_token("alice", "ab" * 32)
    assert store.user_for_token("ab" * 32) is not None
    assert store.user_for_token("cd" * 32) is None
    with pytest.raises(NotFound):
        store.add_token("nobody", "ef" * 32)


def test_is_empty(store: Store) -> None:
    """A fresh store is empty; one user makes it non-empty."""
    assert store.is_empty()
    store.add_user("alice", actor="admin")
    assert not store.is_empty()


def test_sqlite_is_wal_and_full_sync(tmp_path: Path) -> None:
    """SQLite runs in WAL mode with synchronous=FULL (2) and a busy timeout."""
    store = open_store("sqlite", tmp_path)
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() > 0
    store.close()


def test_sqlite_parallel_writers(tmp_path: Path) -> None:
    """Four threads submitting at once on SQLite all succeed (no 'database is locked')."""
    store = open_store("sqlite", tmp_path)

    def work() -> None:
        for _ in range(25):
            submit(store)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.active_workloads()) == 100
    store.close()


def _paused_at_insert(store: Store, table: str) -> tuple[threading.Event, threading.Event]:
    """Pause the first thread that inserts into ``table`` just before that insert (its
    checks done, its transaction open): set ``reached`` then, go on when ``go`` is set."""
    reached, go = threading.Event(), threading.Event()

    def hook(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.lstrip().startswith(f"INSERT INTO {table} ") and not reached.is_set():
            reached.set()
            assert go.wait(30)

    event.listen(store.engine, "before_cursor_execute", hook)
    return reached, go


def _wait_blocked_or_done(store: Store, thread: threading.Thread) -> None:
    """Until ``thread`` has ended or waits on a row lock. PostgreSQL says when a session
    waits on a lock; on SQLite the paused transaction holds the only write lock, so the
    other cannot get past its BEGIN IMMEDIATE before it ends: nothing to wait for."""
    if store.engine.dialect.name != "postgresql":
        return
    deadline = time.monotonic() + 30
    while thread.is_alive():
        with store.engine.connect() as conn:
            waiting = conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            )).scalar()
        if waiting:
            return
        assert time.monotonic() < deadline, "neither blocked nor done"
        time.sleep(0.01)


@pytest.mark.parametrize("first", ["submission", "child"])
def test_submission_and_new_child_of_its_leaf_never_both_win(store: Store, first: str) -> None:
    """A submission to leaf ``ai`` and the creation of ``ai/c``, run concurrently, the first
    paused inside its transaction after its checks: the one that checked first wins and
    the other is refused (the child: active workloads; the submission: NotALeaf), so no
    accepted workload is left in a budget that is no longer a leaf."""
    store.add_budget("ai", 1, actor="admin")
    outcome: dict[str, BaseException | None] = {}

    def run(name: str, action: Callable[[], object]) -> threading.Thread:
        def body() -> None:
            try:
                action()
                outcome[name] = None
            except Exception as e:
                outcome[name] = e
        t = threading.Thread(target=body)
        t.start()
        return t

    submission = lambda: submit(store, budget="ai")  # noqa: E731
    child = lambda: store.add_budget("ai/c", 1, actor="admin")  # noqa: E731
    reached, go = _paused_at_insert(store, "workloads" if first == "submission" else "budgets")
    one = run(first, submission if first == "submission" else child)
    assert reached.wait(30)
    second = "child" if first == "submission" else "submission"
    other = run(second, child if first == "submission" else submission)
    _wait_blocked_or_done(store, other)
    go.set()
    one.join(30)
    other.join(30)
    assert outcome[first] is None
    if second == "child":
        assert isinstance(outcome["child"], Conflict)
        assert "leaf with active workloads" in str(outcome["child"])
        assert [b.path for b in store.budgets()] == ["ai"]
    else:
        assert isinstance(outcome["submission"], NotALeaf)
        assert str(outcome["submission"]).startswith("budget 'ai': not a leaf")
        assert store.active_workloads() == []


def test_a_new_grandchild_also_checks_the_leaf_it_turns_inner(store: Store) -> None:
    """With create_parents, ``ai/x/y`` turns leaf ``ai`` into an inner node through the new
    ``ai/x``: refused while ``ai`` has active work, as ``ai/x`` alone would be."""
    store.add_budget("ai", 1, actor="admin")
    wid = submit(store, budget="ai")
    with pytest.raises(Conflict, match=f"'ai' is a leaf with active workloads \\(e.g. {wid}\\)"):
        store.add_budget("ai/x/y", 1, actor="admin", create_parents=True)
    assert [b.path for b in store.budgets()] == ["ai"]


def test_the_last_admin_with_a_token_keeps_flag_and_token(store: Store) -> None:
    """With ``root`` the only admin holding a valid user token, taking its flag and
    revoking that token are refused (a scrape token or a token-less admin does not count);
    once ``bob`` is admin with a token, both are allowed."""
    store.add_user("root", actor="admin", admin=True)
    store.add_user("bob", actor="admin", admin=True)  # admin, but no token
    root_token = store.add_token("root", "ab" * 32).id
    store.add_token("root", "cd" * 32, kind="scrape")
    with pytest.raises(Conflict, match="root is the last admin with a valid token"):
        store.set_user("root", actor="root", admin=False)
    with pytest.raises(Conflict, match="the last valid token of an admin \\(root\\)"):
        store.revoke_token(root_token, actor="root")
    store.add_token("bob", "ef" * 32)
    store.revoke_token(root_token, actor="root")
    store.set_user("root", actor="bob", admin=False)
    assert [u.name for u in store.users() if u.admin] == ["bob"]


def test_an_expired_token_keeps_no_admin_and_is_not_a_users(store: Store) -> None:
    """A token past its ``expires_at`` at the time of a change does not count as the
    admins' valid token: with root's other token expired, revoking its never-expiring one
    and taking its flag are refused at a time after that expiry; before it, the expiring
    one still counts. ``user_for_token`` answers no user for an expired token."""
    store.add_user("root", actor="admin", admin=True)
    forever = store.add_token("root", "ab" * 32).id
    store.add_token("root", "cd" * 32, expires_at=100.0)
    assert store.tokens("root")[1].expires_at == 100.0
    with pytest.raises(Conflict, match="the last valid token of an admin \\(root\\)"):
        store.revoke_token(forever, actor="root", at=100.0)
    with pytest.raises(Conflict, match="root is the last admin with a valid token"):
        store.set_user("root", actor="root", admin=False, now=100.0)
    assert (store.user_for_token("cd" * 32, now=99.0) is not None,
            store.user_for_token("cd" * 32, now=100.0)) == (True, None)
    store.revoke_token(forever, actor="root", at=99.0)


def test_set_user_to_the_same_effective_account_stores_and_audits_nothing(
        store: Store) -> None:
    """``unix_user`` NULL means the account of the user's own name: setting it to that
    name, then clearing it back ("" in the API), leaves the effective account as it was,
    so the stored value stays NULL and no ``user.set`` entry is written; a real change to
    another account, and back to NULL, is stored and audited."""
    store.add_user("alice", actor="admin")
    assert store.set_user("alice", actor="admin", unix_user="alice").unix_user is None
    store.set_user("alice", actor="admin", clear_unix_user=True)
    assert store.audit_of("user.set") == []
    store.set_user("alice", actor="admin", unix_user="svc")
    store.set_user("alice", actor="admin", unix_user="svc")
    store.set_user("alice", actor="admin", clear_unix_user=True)
    assert [(a.old["unix_user"], a.new["unix_user"]) for a in store.audit_of("user.set")] == [
        (None, "svc"), ("svc", None)]
    store.add_user("bob", actor="admin", unix_user="bob")
    store.set_user("bob", actor="admin", clear_unix_user=True)
    assert store.audit_of("user.set")[2:] == []


def test_set_user_audits_only_a_change_and_names_close_users(store: Store) -> None:
    """Setting a user to what it is already writes no ``user.set`` entry (it wrote one with
    old = new); an unknown name is not found with the closest user names, as a token for
    one is."""
    store.add_user("alice", actor="admin")
    store.set_user("alice", actor="admin", admin=False)
    store.set_user("alice", actor="admin", clear_unix_user=True)
    assert store.audit_of("user.set") == []
    store.set_user("alice", actor="admin", admin=True)
    assert [(a.old, a.new) for a in store.audit_of("user.set")] == [
        ({"admin": False, "unix_user": None}, {"admin": True, "unix_user": None})]
    with pytest.raises(NotFound, match="alicia.*did you mean alice"):
        store.set_user("alicia", actor="admin", admin=True)
