"""How the scheduler treats an executor's no: a permanent refusal ends the workload after
one try with the reason; a transient failure backs off without holding up anyone else; the
run files of a restored backup's lost future are never read as the present's."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from sched_env import Env, make_env

from apportion.core import FINAL, PolicyConfig, Status
from apportion.service.clock import WallClock
from apportion.service.executor import Launch
from apportion.service.executors import _procfs
from apportion.service.executors.identity import Identity
from apportion.service.executors.local import LocalExecutor
from apportion.service.scheduler import BACKOFF_MAX_S, Scheduler
from apportion.service.store import Store
from harness.accounts import UnixAccounts

DEADLINE_S = 60.0  # bounds a hang only


def local_service(db: Path, data: Path, accounts: UnixAccounts) -> tuple[Store, Scheduler]:
    """A store (SQLite file ``db``) with alice and one 8-GPU host, and a scheduler over a
    local executor running work as its owners' accounts."""
    store = Store(f"sqlite:///{db}")
    store.migrate()
    if store.is_empty():
        store.add_user("alice", "admin", unix_user=accounts.alice.name)
        store.add_budget("ai/llm", 1.0, "admin", members=["alice"], create_parents=True)
        store.add_host("h0", 8, "admin", at=time.time())
    data.mkdir(exist_ok=True)
    os.chmod(data, 0o711)  # as serve makes it: jobs cross it to their logs and TMPDIR
    ex = LocalExecutor([("h0", 8)], data / "logs", data / "run", db_id=store.db_id(),
                       identity=Identity())
    sched = Scheduler(store, ex, PolicyConfig(), WallClock(), grace_s=1.0)
    sched.start()
    return store, sched


def submit(store: Store, command: list[str], chdir: str = "/", priority: int = 0) -> str:
    return store.add_workload(budget="ai/llm", gpus=1, min_runtime=60.0,
                              submit_time=time.time(), command=command, actor="alice",
                              priority=priority, chdir=chdir).id


def run_until_final(store: Store, sched: Scheduler, wids: list[str]) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        sched.step()
        rows = {w: store.get_workload(w) for w in wids}
        if all(r.status in FINAL for r in rows.values()):
            return rows
        assert time.monotonic() < deadline, {w: r.status for w, r in rows.items()}
        time.sleep(0.05)


def test_e2big_and_enoent_end_after_one_try_and_the_work_behind_starts(
    accounts: UnixAccounts, shared: Path
) -> None:
    """A 200000-character argument (E2BIG if it were exec'd) and a command that does not
    exist, both first in line, each end ``failed`` after exactly one attempt with the
    reason, and the six workloads queued behind them start and complete."""
    store, sched = local_service(shared / "db.sqlite", shared / "data", accounts)
    big = submit(store, ["echo", "A" * 200_000], priority=9)
    missing = submit(store, ["apportion-no-such-command"], priority=9)
    rest = [submit(store, ["true"]) for _ in range(6)]
    sched.step()  # one pass: the refusals end and the six all start in it
    started = [w for w in rest if store.get_workload(w).status is not Status.PENDING]
    assert len(started) == 6
    rows = run_until_final(store, sched, [big, missing, *rest])
    assert rows[big].status is Status.FAILED and rows[big].attempts_count == 1
    assert rows[big].end_reason.startswith(
        "launch refused: argument list too long: command.1: 200001 bytes")
    assert rows[missing].status is Status.FAILED and rows[missing].attempts_count == 1
    assert rows[missing].end_reason == "launch refused: command not found: " \
                                       "apportion-no-such-command"
    assert [rows[w].status for w in rest] == [Status.COMPLETED] * 6


def test_directory_the_owner_cannot_enter_fails_the_workload_with_the_reason(
    accounts: UnixAccounts, shared: Path
) -> None:
    """alice's workload in a directory only root may enter ends failed after one try:
    ``launch refused: chdir <dir>: Permission denied``."""
    store, sched = local_service(shared / "db.sqlite", shared / "data", accounts)
    private = shared / "root-only"
    private.mkdir(mode=0o700)
    wid = submit(store, ["true"], chdir=str(private))
    row = run_until_final(store, sched, [wid])[wid]
    assert (row.status, row.attempts_count) == (Status.FAILED, 1)
    assert row.end_reason == f"launch refused: chdir {private}: Permission denied"


def test_restored_backup_does_not_read_the_lost_futures_run_files(
    accounts: UnixAccounts, shared: Path
) -> None:
    """A backup taken before w-000001 existed is restored with the data directory kept: the
    new w-000001 (``exit 3``) really runs and fails with its own exit code; the old
    w-000001's run and exit files (exit 0) are set aside, not read. The old wrapper is
    waited for until it has left (it writes its exit record just before), so the files are
    those of a wrapper that has ended; one still running is the case of the next test."""
    db, data = shared / "db.sqlite", shared / "data"
    store, sched = local_service(db, data, accounts)
    store.close()
    shutil.copy(db, shared / "backup.sqlite")
    store, sched = local_service(db, data, accounts)
    old = submit(store, ["true"])
    assert run_until_final(store, sched, [old])[old].status is Status.COMPLETED
    wrapper = json.loads((data / "run" / store.db_id() / f"{old}.1.run").read_text())["handle"]
    deadline = time.monotonic() + DEADLINE_S
    while _procfs.alive(wrapper) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _procfs.alive(wrapper), "the old wrapper did not leave after its exit record"
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copy(shared / "backup.sqlite", db)  # the restore
    store, sched = local_service(db, data, accounts)
    new = submit(store, ["sh", "-c", "exit 3"])
    assert new == old == "w-000001"
    row = run_until_final(store, sched, [new])[new]
    assert (row.status, row.exit_code, row.end_reason) == (Status.FAILED, 3, "exited 3")
    stale = data / "run" / store.db_id() / "stale"
    assert sorted(p.name.split(".")[2] for p in stale.iterdir()) == ["exit", "run", "spec"]


def test_restored_backup_stops_the_lost_futures_running_work(
    accounts: UnixAccounts, shared: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A backup taken before w-000001 existed is restored with the data directory kept
    while the lost future's w-000001 (``sleep``) still runs: the start stops it (its
    wrapper and command are gone before anything is placed), says so in one warning naming
    the workload, attempt and wrapper pid, and sets its files aside with the exit record
    its wrapper wrote (and the kill deadline its stop gave the wrapper). The new w-000001
    attempt 1, given the same GPU and cgroup name, runs alone and ends with its own exit
    code (3) in an exit record naming its own wrapper."""
    db, data = shared / "db.sqlite", shared / "data"
    store, sched = local_service(db, data, accounts)
    store.close()
    shutil.copy(db, shared / "backup.sqlite")
    store, sched = local_service(db, data, accounts)
    lost = submit(store, ["sh", "-c", "echo pid $$; exec sleep 1000"])
    sched.step()
    run_dir = data / "run" / store.db_id()
    log = data / "logs" / lost / "1.log"
    deadline = time.monotonic() + DEADLINE_S
    while not log.exists() or "pid" not in log.read_text():
        assert time.monotonic() < deadline, "the lost future's job never started"
        time.sleep(0.05)
    job = _procfs.handle_of(int(log.read_text().split()[1]))
    wrapper = json.loads((run_dir / f"{lost}.1.run").read_text())["handle"]
    assert job is not None and _procfs.alive(job) and _procfs.alive(wrapper)
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copy(shared / "backup.sqlite", db)  # the restore
    with caplog.at_level(logging.WARNING, logger="apportion.executor.local"):
        store, sched = local_service(db, data, accounts)  # its start stops the lost work
    alive = [h for h in (wrapper, job) if _procfs.alive(h)]
    for h in alive:  # never left running by a failing check
        os.kill(_procfs.parse_handle(h)[0], signal.SIGKILL)
    assert alive == []
    stale = run_dir / "stale"
    assert [r.getMessage() for r in caplog.records] == [
        f"w-000001 attempt 1 (wrapper pid {wrapper.split(':')[0]}) runs for no attempt the "
        f"database knows (a backup restored from before it started?): stopped, its files "
        f"moved to {stale}"]
    set_aside = {p.name.split(".")[2]: p for p in stale.iterdir()}
    assert sorted(set_aside) == ["exit", "run", "spec", "stop"]  # stop: the deadline it got
    assert json.loads(set_aside["exit"].read_text())["handle"] == wrapper
    new = submit(store, ["sh", "-c", "exit 3"])
    assert new == lost
    row = run_until_final(store, sched, [new])[new]
    assert (row.status, row.exit_code, row.end_reason) == (Status.FAILED, 3, "exited 3")
    handle = row.attempts[0].handle
    assert handle != wrapper
    assert json.loads((run_dir / f"{new}.1.exit").read_text())["handle"] == handle


def test_another_database_keeps_its_run_files_apart(accounts: UnixAccounts,
                                                    shared: Path) -> None:
    """A fresh database in the same data directory has its own random db_id, so its
    w-000001 runs in a run directory of its own."""
    data = shared / "data"
    s1, sched1 = local_service(shared / "one.sqlite", data, accounts)
    w1 = submit(s1, ["true"])
    run_until_final(s1, sched1, [w1])
    s2, sched2 = local_service(shared / "two.sqlite", data, accounts)
    w2 = submit(s2, ["sh", "-c", "exit 4"])
    assert w1 == w2 and s1.db_id() != s2.db_id()
    assert run_until_final(s2, sched2, [w2])[w2].exit_code == 4
    assert (data / "run" / s1.db_id() / "w-000001.1.exit").exists()
    assert (data / "run" / s2.db_id() / "w-000001.1.exit").exists()


# ---- transient failures (memory executor, fake clock) ----------------------------------
class _Flaky:
    """Makes launches of chosen workloads fail as a backend hiccup would."""

    def __init__(self, env: Env) -> None:
        self.failing: set[str] = set()
        self.tries: dict[str, list[float]] = {}
        real = env.executor.launch

        def launch(launch: Launch) -> str:
            wid = launch.workload_id
            self.tries.setdefault(wid, []).append(env.clock.now())
            if wid in self.failing:
                raise OSError(f"fork: resource temporarily unavailable ({wid})")
            return real(launch)

        env.executor.launch = launch  # type: ignore[method-assign]


def test_transient_launch_failures_back_off_and_do_not_block_others(tmp_path: Path) -> None:
    """A workload whose launches fail for a transient reason is retried after 1 s, 2 s,
    4 s ... (capped), not on every pass; the workloads behind it start in the very pass of
    its first failure; once the backend recovers it starts."""
    env = make_env("sqlite", tmp_path)
    flaky = _Flaky(env)
    bad = env.submit(gpus=1, priority=9)
    others = [env.submit(gpus=1) for _ in range(6)]
    flaky.failing.add(bad)
    env.at(0.0)
    assert [env.store.get_workload(w).status for w in others] == [Status.RUNNING] * 6
    assert env.store.get_workload(bad).status is Status.PENDING
    for t in [x / 4 for x in range(1, 4 * 200)]:  # a pass every 0.25 s for 200 s
        env.at(t)
    tries = flaky.tries[bad]
    gaps = [round(b - a, 2) for a, b in zip(tries, tries[1:], strict=False)]
    assert gaps[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert set(gaps[6:]) == {BACKOFF_MAX_S}
    flaky.failing.clear()
    t = tries[-1] + BACKOFF_MAX_S
    env.at(t)
    assert env.store.get_workload(bad).status is Status.RUNNING
    w = env.store.get_workload(bad)
    assert all(a.end_reason == "launch failed" and a.gpu_seconds == 0.0
               for a in w.attempts[:-1])
