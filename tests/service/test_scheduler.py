"""The live scheduler with the in-memory executor and a fake clock, on a real store."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from sched_env import Env, make_env
from store_db import BACKENDS

from apportion.core import CoreError, HostState, PolicyConfig, Status
from apportion.service.dashboard import explain_workload
from apportion.service.executor import AttemptState, InventoryHost, Observation
from apportion.service.replies import WhyExplanation
from apportion.service.store import Store, StoreUnavailable, WorkloadRow
from apportion.times import format_time


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = make_env(request.param, tmp_path)
    yield e
    e.store.close()


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[Env]:
    e = make_env("sqlite", tmp_path)
    yield e
    e.store.close()


def status(env: Env, wid: str) -> Status:
    return env.store.get_workload(wid).status


def test_submitted_workload_starts_and_completes(env: Env) -> None:
    """A submission starts on the next pass and completes when it exits 0; its one attempt
    is charged gpus x run time."""
    wid = env.submit(gpus=4, duration=100.0)
    assert env.at(0.0) == [f"0.000 start {wid} on h0:4"]
    assert status(env, wid) is Status.RUNNING
    env.at(100.0)
    w = env.store.get_workload(wid)
    assert w.status is Status.COMPLETED and w.exit_code == 0
    assert [a.gpu_seconds for a in w.attempts] == [400.0]


def test_nonzero_exit_fails_the_workload(lite: Env) -> None:
    """An attempt that exits non-zero ends the workload as failed with that code."""
    wid = lite.submit()
    lite.at(0.0)
    lite.clock.set(5.0)
    lite.executor.finish(wid, exit_code=3)
    lite.at(5.0)
    w = lite.store.get_workload(wid)
    assert (w.status, w.exit_code) == (Status.FAILED, 3)


def test_allocated_preempts_unallocated_and_resumable_is_requeued(env: Env) -> None:
    """Unallocated work is displaced by allocated work; being resumable, it is requeued with
    its original submit time (it keeps its place) and restarts as a second attempt."""
    free = env.submit(budget="ai/vision", gpus=8, min_runtime=0.0, resumable=True)
    env.at(0.0)
    alloc = env.submit(budget="ai/llm", gpus=8, min_runtime=60.0, duration=50.0)
    lines = env.at(10.0)
    assert lines == [
        f"10.000 preempt {free} unallocated requeue=True by={alloc}",
        f"10.000 start {alloc} on h0:8",
    ]
    w = env.store.get_workload(free)
    assert (w.status, w.submit_time, w.queued_at) == (Status.PENDING, 0.0, 10.0)
    assert w.attempts[0].end_reason == "preempted: unallocated"
    assert w.attempts[0].gpu_seconds == 80.0
    env.at(60.0)
    w = env.store.get_workload(free)
    assert w.status is Status.RUNNING and w.attempt is not None and w.attempt.n == 2


def refuse_stopping(store: Store, on: bool) -> None:
    """Make the database refuse (``on``) or accept again the write of any workload's
    ``stopping`` status: a failure inside that transaction, as a full disk or a crash
    would leave it."""
    with store.engine.begin() as conn:
        if store.engine.dialect.name == "sqlite":
            conn.exec_driver_sql(
                "CREATE TRIGGER no_stopping BEFORE UPDATE OF status ON workloads "
                "WHEN NEW.status = 'stopping' BEGIN SELECT RAISE(ABORT, 'refused'); END"
                if on else "DROP TRIGGER no_stopping")
        elif on:
            conn.exec_driver_sql(
                "CREATE FUNCTION no_stopping() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'refused'; END $$ LANGUAGE plpgsql")
            conn.exec_driver_sql(
                "CREATE TRIGGER no_stopping BEFORE UPDATE ON workloads FOR EACH ROW "
                "WHEN (NEW.status = 'stopping') EXECUTE FUNCTION no_stopping()")
        else:
            conn.exec_driver_sql("DROP TRIGGER no_stopping ON workloads")
            conn.exec_driver_sql("DROP FUNCTION no_stopping()")


def test_a_preemption_whose_stop_is_not_recorded_leaves_no_audit_entry(env: Env) -> None:
    """A pass decides a preemption but the database fails to record the stop: the pass
    fails, the victim runs on untouched, and no ``workload.preempt`` entry tells of a
    preemption that never happened (it was written in a transaction of its own before).
    Once the database records stops again, the next pass preempts it, audited once."""
    free = env.submit(budget="ai/vision", gpus=8, min_runtime=0.0, resumable=True)
    env.at(0.0)
    alloc = env.submit(budget="ai/llm", gpus=8)
    refuse_stopping(env.store, True)
    with pytest.raises(Exception, match="refused"):
        env.at(10.0)
    assert status(env, free) is Status.RUNNING
    assert env.executor.running() == [free]
    assert [a.action for a in env.store.audit(target=free)] == []
    refuse_stopping(env.store, False)
    assert env.at(11.0)[0] == f"11.000 preempt {free} unallocated requeue=True by={alloc}"
    assert [(a.action, a.new) for a in env.store.audit(target=free)] == [
        ("workload.preempt", {"reason": "unallocated", "by": alloc})]


def test_non_resumable_preempted_workload_ends_preempted(lite: Env) -> None:
    """A preempted workload that cannot resume ends as preempted."""
    free = lite.submit(budget="ai/vision", gpus=8, min_runtime=0.0, resumable=False)
    lite.at(0.0)
    lite.submit(budget="ai/llm", gpus=8)
    lite.at(1.0)
    assert status(lite, free) is Status.PREEMPTED


def test_preemptor_waits_for_victims_to_exit(tmp_path: Path) -> None:
    """With a grace period, the preemptor starts only once its victim has exited, and the
    victim is charged until its real exit."""
    env = make_env("sqlite", tmp_path, grace_s=30.0, term_delays={})
    env.executor.term_delays["w-000001"] = 20.0  # takes 20 s to checkpoint and exit
    free = env.submit(budget="ai/vision", gpus=8, min_runtime=0.0, resumable=True)
    env.at(0.0)
    alloc = env.submit(budget="ai/llm", gpus=8)
    assert env.at(10.0) == [f"10.000 preempt {free} unallocated requeue=True by={alloc}"]
    assert status(env, free) is Status.STOPPING
    assert env.at(20.0) == []
    assert env.sched.queue_view().pending[0].wait_reason == "waiting_for_preemption"
    assert env.at(30.0) == [f"30.000 start {alloc} on h0:8"]
    assert env.store.get_workload(free).attempts[0].gpu_seconds == 8 * 30.0
    env.store.close()


def test_why_names_the_victim_still_in_its_grace_and_when_it_is_killed(
    tmp_path: Path,
) -> None:
    """A pass after the one that preempted a victim ignoring SIGTERM (grace 120 s): ``why``
    of its preemptor names the victim as ``freeing`` with its kill time (the stop's time plus
    the grace) and says so, and never that it waits for the rebalance rules."""
    env = make_env("sqlite", tmp_path, grace_s=120.0, term_delays={})
    free = env.submit(budget="ai/vision", gpus=8, min_runtime=0.0, resumable=True)
    env.executor.term_delays[free] = 1000.0  # ignores SIGTERM
    env.at(0.0)
    alloc = env.submit(budget="ai/llm", gpus=8)
    assert env.at(10.0) == [f"10.000 preempt {free} unallocated requeue=True by={alloc}"]
    env.at(40.0)
    why = explain_workload(env.store, env.sched, alloc)
    assert isinstance(why, WhyExplanation)
    assert (why.wait_reason, why.preempting, why.freeing, why.freed_by) == (
        "waiting_for_preemption", [], [free], 130.0)
    assert (f"{free} is stopping on the hosts being freed for it (its grace ends at "
            f"{format_time(130.0, UTC)} (in 1 min 30 s))") in why.text
    assert not [line for line in why.text if "rebalance rules" in line]
    env.store.close()


def test_drained_host_is_emptied_then_goes_to_repair(env: Env) -> None:
    """Draining a host stops new work on it, preempts each workload once its minimum
    runtime has passed, then moves the empty host to repair; the executor is told. The
    host in repair keeps the reason it was drained for (what the repair is for), in the
    store and in the queue view, across a restart too."""
    wid = env.submit(gpus=4, min_runtime=600.0, resumable=True)
    env.at(0.0)
    env.clock.set(100.0)
    env.sched.set_host_state("h0", HostState.DRAINING, "ECC errors", "admin")
    assert env.executor.drained == {"h0": "ECC errors"}
    assert env.at(100.0) == []
    assert env.at(600.0) == [
        f"600.000 preempt {wid} drain requeue=True by=None",
        "600.000 host h0 -> repair (drained: empty)",  # the victim exited at once
    ]
    h0 = env.store.get_host("h0")
    assert (h0.state, h0.reason) == (HostState.REPAIR, "ECC errors (drained: empty)")
    assert status(env, wid) is Status.PENDING
    assert env.sched.queue_view().hosts[0].reason == "ECC errors (drained: empty)"
    env.restart()
    assert env.sched.queue_view().hosts[0].reason == "ECC errors (drained: empty)"


def test_cancel_pending_and_running(lite: Env) -> None:
    """A cancelled pending workload never starts; a cancelled running one is stopped and
    ends as cancelled."""
    running = lite.submit(gpus=8)
    lite.at(0.0)
    waiting = lite.submit(gpus=8)
    lite.at(1.0)
    lite.store.cancel_workload(waiting, "alice")
    lite.store.cancel_workload(running, "alice")
    lite.at(2.0)
    assert status(lite, running) is Status.CANCELLED
    assert status(lite, waiting) is Status.CANCELLED
    assert lite.executor.running() == []
    assert lite.store.get_workload(waiting).attempts == ()


def test_host_death_ends_its_work_at_once(tmp_path: Path) -> None:
    """When the executor reports a host down, its workloads end at once, even protected
    ones: resumable ones are requeued, others are lost; the host is down in the store."""
    env = make_env("sqlite", tmp_path, hosts=(("h0", 8), ("h1", 8)))
    a = env.submit(gpus=8, min_runtime=3600.0, resumable=True)
    b = env.submit(gpus=8, min_runtime=3600.0, resumable=False)
    env.at(0.0)
    placed = env.store.get_workload(a).attempt
    assert placed is not None
    victim_host = placed.placement[0][0]
    env.clock.set(50.0)
    env.executor.fail_host(victim_host)
    env.at(50.0)
    assert env.store.get_host(victim_host).state is HostState.DOWN
    assert status(env, a) is Status.PENDING
    assert env.store.get_workload(a).attempts[0].end_reason == "host_failure"
    assert status(env, b) is Status.RUNNING
    env.store.close()


def test_gpu_indexes_are_lowest_free_and_reused(lite: Env) -> None:
    """The scheduler hands out the lowest free GPU indexes of a host and reuses freed ones."""
    a = lite.submit(gpus=2, duration=10.0)
    b = lite.submit(gpus=3)
    lite.at(0.0)
    slots = {ln.workload_id: ln.slots[0].gpu_indexes for ln in lite.executor.launches}
    assert (slots[a], slots[b]) == ((0, 1), (2, 3, 4))
    lite.at(10.0)
    c = lite.submit(gpus=5)
    lite.at(11.0)
    got = next(ln for ln in lite.executor.launches if ln.workload_id == c).slots[0].gpu_indexes
    assert set(got).isdisjoint(slots[b]) and len(got) == 5 and min(got) == 0


def test_a_restart_replays_host_states_older_than_the_lookback_in_their_order(
        env: Env) -> None:
    """A host drained (to repair) and repaired, both longer ago than the lookback: the
    rebuilt state has it healthy, as the store does, and work starts on it. Its records
    before the rebuilt history's start are replayed at that start, and sorting them there
    put every return to healthy before the drains: the host was left in repair (no work
    ever ran on it), and after a second drain every pass failed on an illegal change."""
    day = 86400.0
    env.clock.set(100.0)
    env.sched.set_host_state("h0", HostState.DRAINING, "ECC", "admin")
    env.at(100.0)  # empty: to repair
    assert env.store.get_host("h0").state is HostState.REPAIR
    env.clock.set(200.0)
    env.sched.set_host_state("h0", HostState.HEALTHY, "fixed", "admin")
    env.clock.set(10 * day)  # the lookback is 7 days: both records are before it
    env.restart()
    assert [h.state for h in env.sched.queue_view().hosts] == ["healthy"]
    wid = env.submit(gpus=4)
    env.at(10 * day)
    assert status(env, wid) is Status.RUNNING
    env.clock.set(10 * day + 100)
    env.sched.set_host_state("h0", HostState.DRAINING, "ECC again", "admin")
    env.clock.set(20 * day)
    env.restart()
    assert env.sched.step() is not None  # a pass runs (it raised on every pass)
    assert [h.state for h in env.sched.queue_view().hosts] == [
        env.store.get_host("h0").state.value]


def test_restart_observes_exits_that_happened_while_down(env: Env) -> None:
    """After a restart, an attempt that finished while the server was down is ended with
    its observed exit code and its real exit time, and charged exactly once."""
    wid = env.submit(gpus=2, duration=100.0)
    env.at(0.0)
    env.clock.set(500.0)  # the server was down from t=0 to t=500
    env.restart()
    w = env.store.get_workload(wid)
    assert w.status is Status.COMPLETED
    assert (w.attempts[0].ended_at, w.attempts[0].gpu_seconds) == (100.0, 200.0)
    env.restart()  # observing it again changes nothing
    assert env.store.get_workload(wid).attempts[0].gpu_seconds == 200.0


def test_restart_keeps_running_work_and_gpu_indexes(env: Env) -> None:
    """After a restart, running attempts stay running on the same GPU indexes, and the new
    scheduler does not start anything on them."""
    a = env.submit(gpus=6)
    env.at(0.0)
    env.restart()
    b = env.submit(gpus=4)
    env.at(10.0)
    assert status(env, a) is Status.RUNNING and status(env, b) is Status.PENDING
    c = env.submit(gpus=2)
    env.at(11.0)
    got = next(ln for ln in env.executor.launches if ln.workload_id == c).slots[0].gpu_indexes
    assert got == (6, 7)


def preempted_while_ignoring_sigterm(backend: str, tmp_path: Path) -> tuple[Env, str, str]:
    """On one 4-GPU host with an 8 s grace period (and no debug lane, which would hand R,
    short, the free GPUs first): resumable R (ai/llm, 4 GPUs, minimum runtime 10 s, time
    limit 45 s, ignores SIGTERM) starts at 0 and is preempted for a rebalance at 30 s, for
    ai/vision's V (2 GPUs). Returns the env, R and V."""
    env = make_env(backend, tmp_path, hosts=(("h0", 4),), grace_s=8.0,
                   config=PolicyConfig(debug_lane=False))
    r = env.store.add_workload(budget="ai/llm", gpus=4, min_runtime=10.0, submit_time=0.0,
                               command=["train"], actor="alice", resumable=True,
                               time_limit=45.0).id
    env.executor.term_delays[r] = 1000.0
    env.at(0.0)
    env.clock.set(30.0)
    v = env.submit(budget="ai/vision", gpus=2, min_runtime=10.0)
    assert env.at(30.0) == [f"30.000 preempt {r} rebalance requeue=True by={v}"]
    assert status(env, r) is Status.STOPPING
    return env, r, v


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restart_requeues_work_stopping_for_a_preemption_even_past_its_time_limit(
    backend: str, tmp_path: Path
) -> None:
    """R, stopping for a rebalance since 30 s, is killed at 38 s (30 s + its 8 s grace) while
    the server is down; the server restarted at 45 s, past R's 45 s time limit, ends the
    attempt as its stop says: R is requeued (resumable), the attempt's reason the
    preemption's in full, not a final ``timeout``; then V starts."""
    env, r, v = preempted_while_ignoring_sigterm(backend, tmp_path)
    env.clock.set(45.0)
    env.restart(grace_s=8.0)
    w = env.store.get_workload(r)
    assert (w.status, w.attempts[0].ended_at, w.attempts[0].end_reason) == (
        Status.PENDING, 38.0, "preempted: rebalance")
    assert env.sched.step() == [f"45.000 start {v} on h0:2"]
    env.store.close()


def test_a_restart_sends_a_stop_again_with_the_grace_it_has_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R was told to stop at 30 s with an 8 s grace period. A server restarted at 33 s, and
    again at 36 s, sends the stop again with what is left of that grace (5 s, then 2 s), so
    that an executor that lost the first stop kills R at 38 s as planned, not a whole grace
    period after the restart; at 38 s R is requeued."""
    env, r, _ = preempted_while_ignoring_sigterm("sqlite", tmp_path)
    graces: list[float] = []
    stop = env.executor.stop

    def recorded_stop(handle: str, grace_s: float) -> None:
        graces.append(grace_s)
        stop(handle, grace_s)

    monkeypatch.setattr(env.executor, "stop", recorded_stop)
    for t in (33.0, 36.0):
        env.clock.set(t)
        env.restart(grace_s=8.0)
        env.sched.step()
    assert graces == [5.0, 2.0]
    env.at(38.0)
    w = env.store.get_workload(r)
    assert (w.status, w.attempts[0].ended_at) == (Status.PENDING, 38.0)
    env.store.close()


def test_a_stop_stored_without_its_reason_is_ended_as_before(tmp_path: Path) -> None:
    """A stop recorded before the store kept its reason and time (no ``stop_reason``, no
    ``stop_issued_at``: a server of an earlier version) is taken after a restart as a
    preemption, or past the time limit as a timeout, and sent again with a whole grace."""
    env, r, _ = preempted_while_ignoring_sigterm("sqlite", tmp_path)
    with env.store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE attempts SET stop_reason = NULL, stop_issued_at = NULL")
    env.clock.set(45.0)
    env.restart(grace_s=8.0)
    w = env.store.get_workload(r)
    assert (w.status, w.attempts[0].end_reason) == (
        Status.TIMEOUT, "timeout: reached its time limit")
    env.store.close()


def test_attempt_begun_but_never_launched_is_requeued_uncharged(env: Env) -> None:
    """A crash between begin_attempt and the launch leaves an attempt without a handle:
    on start it is ended at its start time (0 GPU-seconds) and the workload runs again."""
    wid = env.submit(gpus=2)
    env.store.begin_attempt(wid, [("h0", 2, [0, 1])], 0.0)  # then the server died
    env.clock.set(30.0)
    env.restart()
    w = env.store.get_workload(wid)
    assert w.status is Status.PENDING
    assert (w.attempts[0].end_reason, w.attempts[0].gpu_seconds) == ("never launched", 0.0)
    env.at(30.0)
    w = env.store.get_workload(wid)
    assert w.status is Status.RUNNING and w.attempt is not None and w.attempt.n == 2


def test_attempt_launched_before_its_handle_was_stored_is_adopted(lite: Env) -> None:
    """If the executor launched the attempt but the handle never reached the store, the
    restarted scheduler finds it through the executor and keeps it running."""
    wid = lite.submit(gpus=2)
    lite.at(0.0)
    a = lite.store.get_workload(wid).attempt
    assert a is not None and a.handle is not None
    with lite.store.engine.begin() as conn:  # as if the crash came before set_attempt_handle
        conn.exec_driver_sql("UPDATE attempts SET handle = NULL")
    lite.restart()
    w = lite.store.get_workload(wid)
    assert w.status is Status.RUNNING and w.attempt is not None and w.attempt.handle == a.handle


def test_executor_unavailable_decides_nothing_until_it_answers(lite: Env) -> None:
    """While the executor's backend does not answer (``ExecutorUnavailable`` from its
    inventory), a pass begins no attempt and charges nothing; once it answers again the
    workload starts."""
    lite.executor.broken = True
    wid = lite.submit(gpus=2)
    assert lite.at(0.0) == []
    w = lite.store.get_workload(wid)
    assert (w.status, w.attempts) == (Status.PENDING, ())
    lite.executor.broken = False
    lite.at(5.0)
    assert status(lite, wid) is Status.RUNNING


class _FlakyStore:
    """The real store, made to fail on demand like a database that went away."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if callable(attr) and self.down:
            def fail(*args: object, **kwargs: object) -> Any:
                raise ConnectionError("database unavailable")
            return fail
        return attr


def test_loop_survives_store_outage(lite: Env) -> None:
    """A pass that hits a store error fails, the loop keeps running (3 failed passes within
    10 s), and once the store is back the scheduler rebuilds its state and starts what was
    submitted meanwhile (within 10 s); asked to stop, the loop ends within 5 s."""
    flaky = _FlakyStore(lite.store)
    lite.sched.store = flaky  # type: ignore[assignment]
    stop = threading.Event()
    thread = threading.Thread(target=lite.sched.run_forever, args=(0.01, stop), daemon=True)
    thread.start()
    try:
        flaky.down = True
        failures = lite.sched.errors
        deadline = time.monotonic() + 10.0
        while lite.sched.errors < failures + 3:
            assert time.monotonic() < deadline, "the loop stopped passing while the store was down"
            lite.sched.wake()
            stop.wait(0.01)
        assert thread.is_alive()
        wid = lite.submit(gpus=2)  # accepted while the scheduler cannot read the store
        flaky.down = False
        deadline = time.monotonic() + 10.0
        while status(lite, wid) is not Status.RUNNING:
            assert time.monotonic() < deadline, "nothing started once the store was back"
            lite.sched.wake()
            stop.wait(0.01)
    finally:
        stop.set()
        lite.sched.wake()
        thread.join(timeout=5.0)
    assert not thread.is_alive(), "the loop did not stop within 5 s of being asked"


def test_a_failed_server_lock_check_counts_as_a_failed_pass_logged_once_in_full(
        lite: Env, caplog: pytest.LogCaptureFixture) -> None:
    """The guard run before each pass (the server lock's check on PostgreSQL) fails 3 times
    in a row, as while the database is down: each counts in ``errors`` (before, it stayed
    0: the check ran outside the pass), the first is logged with its traceback and the
    others in one line each ('failed again (n in a row)'); the next pass succeeds and ends
    the run of failures."""
    failures = iter(range(3))

    def guard() -> None:
        if next(failures, None) is not None:
            raise StoreUnavailable("database postgresql://db/apportion: connection failed")

    errors, passes = lite.sched.errors, lite.sched.passes
    stop = threading.Event()
    thread = threading.Thread(target=lite.sched.run_forever, args=(0.01, stop, guard),
                              daemon=True)
    with caplog.at_level("WARNING", logger="apportion.scheduler"):
        thread.start()
        try:
            deadline = time.monotonic() + 10.0
            while lite.sched.passes == passes:
                assert time.monotonic() < deadline, "no pass after the guard's failures"
                stop.wait(0.01)
        finally:
            stop.set()
            lite.sched.wake()
            thread.join(timeout=5.0)
    assert (lite.sched.errors - errors, lite.sched.failing) == (3, 0)
    logged = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    reason = "database postgresql://db/apportion: connection failed"
    assert logged == [
        ("ERROR", "scheduling pass failed; retrying on every pass", True),
        ("WARNING", f"scheduling pass failed again (2 in a row): {reason}", False),
        ("WARNING", f"scheduling pass failed again (3 in a row): {reason}", False),
    ]


def test_the_first_pass_after_a_run_of_failures_says_that_passes_succeed_again(
        lite: Env, caplog: pytest.LogCaptureFixture) -> None:
    """The guard fails twice (the database down) and the clock moves on 30 s meanwhile; the
    next pass that succeeds logs, at INFO, one line saying that passes succeed again, after how
    many failures and how long (before, the last line an operator read was the last
    failure, as if the database were still down); the passes after it log nothing."""
    calls = iter(range(2))

    def guard() -> None:
        if next(calls, None) is not None:
            lite.clock.set(lite.clock.now() + 15.0)
            raise StoreUnavailable("database postgresql://db/apportion: connection failed")

    passes = lite.sched.passes
    stop = threading.Event()
    thread = threading.Thread(target=lite.sched.run_forever, args=(0.01, stop, guard),
                              daemon=True)
    with caplog.at_level("INFO", logger="apportion.scheduler"):
        thread.start()
        try:
            deadline = time.monotonic() + 10.0
            while lite.sched.passes < passes + 3:
                assert time.monotonic() < deadline, "no 3 passes after the guard's failures"
                stop.wait(0.01)
        finally:
            stop.set()
            lite.sched.wake()
            thread.join(timeout=5.0)
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert infos == ["scheduling passes succeed again, after 2 failed in a row over 15 s"]


def test_queue_view_explains_waits_and_protection(lite: Env) -> None:
    """The queue view lists pending work in the policy's order with wait reasons, and
    running work with the end of its protection; ``why`` answers the same for one workload
    (pending and why, running and until when) and None for an unknown one."""
    big = lite.submit(gpus=8, min_runtime=600.0)
    lite.at(0.0)
    small = lite.submit(budget="ai/vision", gpus=2, min_runtime=60.0)
    lite.at(1.0)
    view = lite.sched.queue_view()
    assert [(p.id, p.wait_reason) for p in view.pending] == [(small, "no_capacity")]
    assert [(r.id, r.protected_until) for r in view.running] == [(big, 600.0)]
    assert view.hosts[0].model_dump() == {"name": "h0", "gpus": 8, "state": "healthy",
                                          "reason": "", "used": 8, "free": 0}
    why_small = lite.sched.why(small)
    assert why_small is not None
    assert (why_small["status"], why_small["id"], why_small["wait_reason"]) == (
        "pending", small, "no_capacity")
    why_big = lite.sched.why(big)
    assert why_big is not None
    assert (why_big["status"], why_big["id"], why_big["protected_until"]) == (
        "running", big, 600.0)
    assert lite.sched.why("w-999999") is None


def test_queue_view_counts_from_the_clock_not_from_the_last_change(lite: Env) -> None:
    """The queue view's ``now`` is the scheduler's clock when asked, as ``why``, the
    dashboard and ``/metrics`` count: ``apportion queue`` counts a running workload's
    elapsed time and the protection it has left from it, and the budgets' charged
    GPU-seconds run to it, also after passes that changed nothing (no start, no end).
    ``last_pass_at`` says when the order and the wait reasons were decided. (``now`` was
    the time of the last change to the cluster, so all of them stood still between
    changes.)"""
    wid = lite.submit(gpus=8, min_runtime=600.0, duration=1000.0)
    lite.at(0.0)
    assert lite.at(100.0) == []  # a pass that decides nothing
    lite.clock.set(130.0)  # asked half a minute later
    view = lite.sched.queue_view()
    running = {r.id: r for r in view.running}
    charged = {b.path: b.charged_gpu_s for b in view.budgets}
    assert (view.now, view.last_pass_at) == (130.0, 100.0)
    assert running[wid].protected_until - view.now == 470.0
    assert charged["ai/llm"] == 1040.0  # 8 GPUs x 130 s


def test_queue_and_why_count_the_restart_protection_of_a_resumed_run(tmp_path: Path) -> None:
    """On one 4-GPU host with ``restart_protection`` 60 s: resumable R (ai/llm, 2 GPUs,
    minimum runtime 10 s) is preempted for ai/vision's V1 at 14 s and resumes at 30 s, when
    V1 ends; at 45 s ai/vision's V2 asks for 2 GPUs. R is no rebalance victim until 90 s:
    the queue's ``protected_until`` and ``why R`` say so (with why), ``why V2`` calls R
    protected for another 45 s and projects V2's start within 45 s, and the pass at 90 s,
    not before, preempts R for V2."""
    config = PolicyConfig(max_min_runtime=300, restart_protection=60, checkpoint_wait=0,
                          debug_lane=False)
    env = make_env("sqlite", tmp_path, hosts=(("h0", 4),), config=config)
    r = env.submit(gpus=2, min_runtime=10.0, resumable=True)
    env.submit(gpus=2, min_runtime=300.0)
    env.at(0.0)
    env.clock.set(14.0)
    v1 = env.submit(budget="ai/vision", gpus=2, min_runtime=10.0, duration=16.0)
    assert env.at(14.0)[0] == f"14.000 preempt {r} rebalance requeue=True by={v1}"
    assert env.at(30.0) == [f"30.000 start {r} on h0:2"]
    env.clock.set(45.0)
    v2 = env.submit(budget="ai/vision", gpus=2, min_runtime=10.0)
    assert env.at(45.0) == []
    running = {q.id: q for q in env.sched.queue_view().running}
    assert running[r].protected_until == 90.0
    why_r = explain_workload(env.store, env.sched, r)
    assert (why_r.protected_until, why_r.min_runtime_ends, why_r.restarted) == (
        90.0, 40.0, True)
    assert why_r.text[2] == ("protected for another 45 s, until " + format_time(90.0, UTC)
                             + " (restart protection: a run resumed after a requeue is no "
                             "rebalance victim for its first 1 min)")
    why_v2 = explain_workload(env.store, env.sched, v2)
    assert f"would displace {r} (ai/llm, 2 GPUs): protected for another 45 s" in why_v2.text
    assert why_v2.projected_start == 90.0
    assert env.at(89.0) == []
    assert env.at(90.0)[0] == f"90.000 preempt {r} rebalance requeue=True by={v2}"
    env.store.close()


def submit_after(env: Env, dependency: str, t: float) -> WorkloadRow:
    """At ``t``, an 8-GPU workload of ai/llm held until ``dependency`` completes (afterok),
    and a pass then."""
    env.clock.set(t)
    row = env.store.add_workload(
        budget="ai/llm", gpus=8, min_runtime=600.0, submit_time=t, command=["train"],
        actor="alice", dependencies=[("afterok", dependency)],
    )
    env.at(t)
    return row


def test_held_work_queues_from_its_release(env: Env) -> None:
    """A workload held by a dependency joins the queue when the dependency completes: its
    ``released_at`` and ``queued_at`` are that pass's time (not its submission's), and it
    is released once only."""
    first = env.submit(gpus=8, duration=500.0)
    env.at(0.0)
    then = submit_after(env, first, 10.0)
    assert env.store.get_workload(then.id).released_at is None
    assert then.id not in env.sched.state.pending  # held: the policy does not see it
    env.at(500.0)  # the dependency completes; then starts on the GPUs it freed
    w = env.store.get_workload(then.id)
    assert (w.status, w.submit_time, w.queued_at, w.released_at) == (
        Status.RUNNING, 10.0, 500.0, 500.0)
    assert env.store.release_held(then.id, 600.0) is None  # once only, only pending work


def test_released_work_still_waiting_keeps_its_queue_time_over_a_restart(env: Env) -> None:
    """Held work released while the cluster is full waits in the queue from its release; a
    restart later neither holds it again nor moves its queue time to the restart's."""
    first = env.submit(gpus=4, duration=500.0)
    blocker = env.submit(budget="ai/vision", gpus=4, min_runtime=8 * 3600.0)
    env.at(0.0)
    then = submit_after(env, first, 10.0)
    env.at(500.0)  # released; 4 GPUs are free, blocker holds the others (protected)
    assert env.sched.state.pending[then.id].queued_at == 500.0
    assert env.store.get_workload(blocker).status is Status.RUNNING
    env.clock.set(900.0)
    env.restart()
    env.at(900.0)
    assert env.sched.state.pending[then.id].queued_at == 500.0
    w = env.store.get_workload(then.id)
    assert (w.status, w.queued_at, w.released_at) == (Status.PENDING, 500.0, 500.0)


def test_array_elements_get_slurms_array_variables_as_well_as_apportions(lite: Env) -> None:
    """Each element of an array (indexes 3, 5) is launched with SLURM_ARRAY_TASK_ID (its
    index), SLURM_ARRAY_JOB_ID (the array's id) and SLURM_ARRAY_TASK_COUNT/_MIN/_MAX (2, 3,
    5), beside APPORTION_ARRAY_INDEX and APPORTION_ARRAY_ID, so a Slurm array script runs
    unchanged; work outside an array gets none of them."""
    first = lite.store.add_workload(
        budget="ai/llm", gpus=1, min_runtime=600.0, submit_time=0.0, command=["train"],
        actor="alice", array=(3, 5),
    )
    single = lite.submit(gpus=1)
    lite.at(0.0)
    envs = {la.workload_id: dict(la.env or {}) for la in lite.executor.launches}
    elements = lite.store.array_ids(first.id)
    assert {wid: {k: v for k, v in e.items() if "ARRAY" in k} for wid, e in envs.items()} == {
        **{wid: {"SLURM_ARRAY_TASK_ID": str(index), "SLURM_ARRAY_JOB_ID": first.id,
                 "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "3",
                 "SLURM_ARRAY_TASK_MAX": "5",
                 "APPORTION_ARRAY_INDEX": str(index), "APPORTION_ARRAY_ID": first.id}
           for wid, index in zip(elements, (3, 5), strict=True)},
        single: {},
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_host_gone_from_the_executor_is_drained_and_gets_no_work(backend: str,
                                                                  tmp_path: Path) -> None:
    """h1 is no longer among the executor's hosts (taken out of the config's [[hosts]])
    while w1 runs there: it is drained with the reason (nothing new placed there; it once
    stayed healthy and work placed there failed, 'launch refused: unknown host'), and w1
    goes on running, not ended as lost. Reported again, h1 is healthy again; a host an
    admin drained that goes and comes back stays drained, with the admin's reason."""
    env = make_env(backend, tmp_path, hosts=(("h0", 8), ("h1", 8)))
    try:
        w0, w1 = env.submit(gpus=8, min_runtime=3600.0), env.submit(gpus=8, min_runtime=3600.0)
        env.at(5.0)
        assert [launch.slots[0].host for launch in env.executor.launches] == ["h0", "h1"]
        gone = env.executor._hosts.pop("h1")  # the executor's own table: as if unconfigured
        env.at(10.0)
        h1 = env.store.get_host("h1")
        assert (h1.state, h1.reason) == (
            HostState.DRAINING, "executor: not among the executor's hosts any more")
        assert (status(env, w0), status(env, w1)) == (Status.RUNNING, Status.RUNNING)
        late = env.submit(gpus=8)
        env.at(20.0)
        assert status(env, late) is Status.PENDING and len(env.executor.launches) == 2
        env.executor._hosts["h1"] = gone
        env.at(30.0)
        assert env.store.get_host("h1").state is HostState.HEALTHY
        assert status(env, w1) is Status.RUNNING
        # a host an admin drained, gone and back: still the admin's drain
        env.sched.set_host_state("h0", HostState.DRAINING, "ECC", "admin")
        h0 = env.executor._hosts.pop("h0")
        env.at(40.0)
        env.executor._hosts["h0"] = h0
        env.at(50.0)
        assert (env.store.get_host("h0").state, env.store.get_host("h0").reason) == (
            HostState.DRAINING, "ECC")
    finally:
        env.store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_host_gone_from_the_executor_cannot_be_repaired(backend: str, tmp_path: Path) -> None:
    """h1, no longer among the executor's hosts, is drained by the next pass (empty: in
    repair); repairing it is refused with the reason (it was made healthy, and the pass
    after drained it again), and it stays in repair, nothing audited; once the executor
    reports it again it is healthy again, as before."""
    env = make_env(backend, tmp_path, hosts=(("h0", 8), ("h1", 8)))
    try:
        env.at(5.0)
        gone = env.executor._hosts.pop("h1")  # the executor's own table: as if unconfigured
        env.at(10.0)
        audited = len(env.store.audit(limit=1000))
        with pytest.raises(CoreError) as e:
            env.sched.set_host_state("h1", HostState.HEALTHY, "", "admin")
        assert str(e.value) == (
            "host h1: not among the executor's hosts (removed from the config, or from "
            "Slurm's partition?): it cannot be repaired until the executor reports it again")
        assert env.store.get_host("h1").state is HostState.REPAIR
        assert len(env.store.audit(limit=1000)) == audited
        env.executor._hosts["h1"] = gone
        env.at(20.0)
        assert env.store.get_host("h1").state is HostState.HEALTHY
    finally:
        env.store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_host_gone_from_the_executor_is_healthy_again_when_reported_after_a_restart(
        backend: str, tmp_path: Path) -> None:
    """h1, taken out of the config's [[hosts]] and the server restarted, is drained by the
    executor (empty: in repair); put back and the server restarted again (the only way the
    local executor's hosts change), it is healthy again at the next pass and takes work, as
    it is within one run (it once stayed in repair for good: what the executor had drained
    was remembered in memory only). A host an admin drained, gone and back across
    restarts, stays in repair with the admin's reason."""
    env = make_env(backend, tmp_path, hosts=(("h0", 8), ("h1", 8)))
    try:
        env.at(5.0)
        gone = env.executor._hosts.pop("h1")  # as if taken out of the config's [[hosts]]
        env.restart()
        env.at(10.0)
        assert env.store.get_host("h1").state is HostState.REPAIR
        env.sched.set_host_state("h0", HostState.DRAINING, "ECC", "admin")
        h0 = env.executor._hosts.pop("h0")
        env.at(15.0)
        env.executor._hosts["h1"], env.executor._hosts["h0"] = gone, h0  # put back
        env.restart()
        env.at(20.0)
        h1 = env.store.get_host("h1")
        assert (h1.state, h1.reason) == (HostState.HEALTHY, "executor: reported again")
        assert (env.store.get_host("h0").state, env.store.get_host("h0").reason) == (
            HostState.REPAIR, "ECC (drained: empty)")
        w = env.submit(gpus=8)
        env.at(25.0)
        assert status(env, w) is Status.RUNNING
        assert env.executor.launches[-1].slots[0].host == "h1"
    finally:
        env.store.close()


def test_a_host_healthy_again_by_the_executor_says_how_in_its_reason(tmp_path: Path) -> None:
    """A host the executor reports healthy again is stored with what happened as its
    reason: ``executor: back up`` after it was down, ``executor: resumed`` after the
    executor drained it (Slurm's ``scontrol update state=resume``); a resumed drain said
    ``back up`` too, as if the host had been down."""
    env = make_env("sqlite", tmp_path, hosts=(("h0", 8), ("h1", 8)))
    try:
        env.at(5.0)
        env.executor.fail_host("h0")
        h1 = env.executor._hosts["h1"]
        env.executor._hosts["h1"] = replace(h1, state="draining", reason="maint")
        env.at(10.0)
        assert [env.store.get_host(h).state for h in ("h0", "h1")] == [
            HostState.DOWN, HostState.REPAIR]
        env.executor.revive_host("h0")
        env.executor._hosts["h1"] = h1
        env.at(15.0)
        assert [(env.store.get_host(h).state, env.store.get_host(h).reason)
                for h in ("h0", "h1")] == [(HostState.HEALTHY, "executor: back up"),
                                           (HostState.HEALTHY, "executor: resumed")]
    finally:
        env.store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_host_the_executor_resizes_is_drained_then_takes_its_new_size(
        backend: str, tmp_path: Path) -> None:
    """h0 (8 GPUs) runs 4-GPU work when the executor starts reporting it with 4 GPUs: it is
    drained (nothing new placed on GPUs it no longer has), and once empty stored with 4
    GPUs (audited host.gpus) and healthy again; 8-GPU work is then too large for it."""
    env = make_env(backend, tmp_path, hosts=(("h0", 8), ("h1", 8)))
    try:
        w = env.submit(gpus=4)
        env.at(10.0)
        assert env.executor.launches[-1].slots[0].host == "h0"
        env.executor._hosts["h0"] = InventoryHost("h0", 4, "healthy")
        env.at(20.0)
        h0 = env.store.get_host("h0")
        assert (h0.state, h0.gpus, h0.reason) == (
            HostState.DRAINING, 8, "executor: resizing: 8 -> 4 GPUs, once empty")
        env.clock.set(4000.0)
        env.executor.finish(w)
        env.at(4000.0)
        env.at(4001.0)
        h0 = env.store.get_host("h0")
        assert (h0.state, h0.gpus) == (HostState.HEALTHY, 4)
        entry = env.store.audit(limit=1000, target="h0")
        assert any(e.action == "host.gpus" and (e.old, e.new) == ({"gpus": 8}, {"gpus": 4})
                   for e in entry)
        env.at(4002.0)  # the pass after a resize works from the state rebuilt from the store
        assert env.sched.state is not None and env.sched.state.hosts["h0"].gpus == 4
        big = env.submit(gpus=8)
        env.at(4003.0)
        assert env.executor.launches[-1].slots[0].host == "h1" and status(env, big) is (
            Status.RUNNING)
    finally:
        env.store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_capacity_counts_a_resized_hosts_gpus_as_they_were_before_the_resize(
        backend: str, tmp_path: Path) -> None:
    """h0 has 4 GPUs from 0, is drained from 20 to 40, and from 60 the executor reports 8
    (audited host.gpus 4 -> 8): at 120 the ledger's healthy GPU-seconds are 4 x 40 + 8 x
    60 = 640, in the state rebuilt after the resize and after a restart (the rebuild
    counted today's 8 GPUs from the start: 8 x 100 = 800)."""
    env = make_env(backend, tmp_path, hosts=(("h0", 4),))
    try:
        env.at(0.0)
        env.clock.set(20.0)
        env.sched.set_host_state("h0", HostState.DRAINING, "ECC", "admin")
        env.clock.set(40.0)
        env.sched.set_host_state("h0", HostState.HEALTHY, "fixed", "admin")
        env.executor._hosts["h0"] = InventoryHost("h0", 8, "healthy")
        env.at(60.0)
        assert env.store.get_host("h0").gpus == 8
        env.at(120.0)

        def capacity() -> float:
            st = env.sched.state
            assert st is not None and st.hosts["h0"].gpus == 8
            return st.ledger.capacity(120.0, env.sched.config.lookback)

        assert capacity() == 640.0
        env.restart()
        assert capacity() == 640.0
    finally:
        env.store.close()


def test_work_the_policy_refuses_ends_with_the_refusal_as_its_reason(lite: Env) -> None:
    """A pending workload the policy can never run (here 16 GPUs on an 8-GPU fleet, stored
    behind the API's back) is cancelled with the policy's refusal as its end reason and in
    its workload.cancel and workload.refuse audit entries (one each, written together), not
    a bare 'cancelled by scheduler'."""
    wid = lite.submit(gpus=16)
    lite.at(0.0)
    w = lite.store.get_workload(wid)
    assert w.status is Status.CANCELLED
    assert w.end_reason is not None
    assert w.end_reason.startswith("refused by the scheduler: workload w-000001: gpus: ")
    entries = sorted((a.action, a.actor, a.old, a.new) for a in lite.store.audit(target=wid))
    assert entries == [(action, "scheduler", {"status": "pending"}, {"reason": w.end_reason})
                       for action in ("workload.cancel", "workload.refuse")]


def test_a_refusal_of_work_cancelled_meanwhile_changes_nothing(lite: Env) -> None:
    """The scheduler read a workload as pending, then its owner cancelled it before the
    scheduler refused it: the refusal finds it no longer pending and leaves it as the
    owner's cancel made it (no conflict raised into the pass, no refusal audited)."""
    lite.at(0.0)
    wid = lite.submit(gpus=16)
    row = lite.store.get_workload(wid)  # what the scheduler read, still pending
    lite.store.cancel_workload(wid, "alice")
    assert lite.sched.state is not None
    lite.sched._queue(row, 1.0)
    w = lite.store.get_workload(wid)
    assert (w.status, w.end_reason) == (Status.CANCELLED, "cancelled by alice")
    assert [a.action for a in lite.store.audit(target=wid)] == ["workload.cancel"]


@pytest.mark.parametrize("reported", [float("inf"), float("nan"), 1e12])
def test_an_end_time_outside_the_attempt_is_ended_now_and_scheduling_goes_on(
    lite: Env, monkeypatch: pytest.MonkeyPatch, reported: float
) -> None:
    """An executor reporting an end time that is not a number, infinite or in the future
    (a job forging its Slurm end marker) gets the attempt ended at the pass that saw it,
    charged up to then, never the reported time; the next passes and a restart schedule
    other work as before (a stored infinite end halted every pass)."""
    wid = lite.submit(gpus=4)
    lite.at(0.0)
    lite.clock.set(10.0)
    lite.executor.finish(wid)
    real = lite.executor.observe

    def observe(handles: list[str]) -> dict[str, Observation]:
        return {h: replace(o, ended_at=reported) if o.state is AttemptState.EXITED else o
                for h, o in real(handles).items()}

    monkeypatch.setattr(lite.executor, "observe", observe)
    lite.at(10.0)
    [a] = lite.store.get_workload(wid).attempts
    assert (a.ended_at, a.gpu_seconds, status(lite, wid)) == (10.0, 40.0, Status.COMPLETED)
    monkeypatch.setattr(lite.executor, "observe", real)
    lite.restart()
    other = lite.submit(gpus=8)
    lite.at(20.0)
    assert status(lite, other) is Status.RUNNING


@pytest.mark.parametrize("stored", ["1e999", "NULL"])
def test_a_stored_end_the_ledger_cannot_replay_names_the_attempt_and_does_not_halt(
    lite: Env, caplog: pytest.LogCaptureFixture, stored: str
) -> None:
    """An ended attempt whose stored end is infinite (or NULL: NaN as the database keeps
    it), written before such times were refused, does not halt the passes after a restart:
    the infinite end counts as now, the missing one as not charged, each with an error
    naming the workload and attempt and what to correct."""
    wid = lite.submit(gpus=4, duration=10.0)
    lite.at(0.0)
    lite.at(10.0)
    with lite.store.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE attempts SET ended_at = {stored}")
    lite.clock.set(20.0)
    with caplog.at_level("ERROR", logger="apportion.scheduler"):
        lite.restart()
    assert f"{wid} attempt 1: " in caplog.text
    assert "set its ended_at (and gpu_seconds) in the attempts table" in caplog.text
    other = lite.submit(gpus=8)
    lite.at(20.0)
    assert status(lite, other) is Status.RUNNING


@pytest.mark.parametrize("late", [0.4, 3.0])
def test_a_pass_after_the_awaited_checkpoint_preempts_even_when_it_comes_late(
    lite: Env, late: float
) -> None:
    """The service's passes follow the wall clock, so the one after a checkpoint wait
    comes a little after the checkpoint. ai/vision holds the 8-GPU host with two 4-GPU
    runs (A resumable, checkpointing every 300 s); at 1900 s ai/llm asks for its share:
    the pass waits for A's checkpoint at 2100 s. The pass ``late`` seconds after it
    preempts A (it has ``late`` seconds at risk, and its next checkpoint would be within
    ``checkpoint_wait`` again): it used to wait for that one, and the next, until the
    share guarantee's bound."""
    a = lite.submit("ai/vision", 4, 1800.0, resumable=True, checkpoint_interval=300.0)
    lite.submit("ai/vision", 4, 1800.0)
    lite.at(0.0)
    lite.clock.set(1900.0)
    b = lite.submit("ai/llm", 4, 600.0)
    lite.at(1900.0)
    assert lite.sched.recheck_at == 2100.0
    assert lite.store.get_workload(a).status is Status.RUNNING
    lines = lite.at(2100.0 + late)
    assert f"{2100.0 + late:.3f} preempt {a} rebalance requeue=True by={b}" in lines
