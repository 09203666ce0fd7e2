"""The local executor's checkpoint file, as root with real Unix accounts: a job that touches
its ``APPORTION_CHECKPOINT_FILE`` is observed with the file's time; a link, a directory or
another account's file there is not believed; the directory is its account's only and the
job cannot swap it. Run under ``flock /tmp/apportion-accounts.lock``."""

from __future__ import annotations

import os
import shlex
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_db import open_store
from test_isolation import DEADLINE_S, launch, log_of, wait_end
from test_isolation import make_executor as _make_executor

from apportion.core import PolicyConfig
from apportion.service.clock import WallClock
from apportion.service.executor import AttemptState, Observation
from apportion.service.executors.local import LocalExecutor
from apportion.service.scheduler import Scheduler
from harness.accounts import UnixAccounts

WID = "w-000001"
SET_BACK = 1700000000.5  # a time the job gives its file with touch -d


@pytest.fixture
def ex(shared: Path) -> Iterator[LocalExecutor]:
    """The executor; every attempt still running at the end is stopped (a failed test must
    not leave the accounts' processes behind)."""
    e = _make_executor(shared)
    os.chmod(shared / "data", 0o711)  # as ``apportion serve`` makes its data directory
    yield e
    handles = list(e._index)
    for h in handles:
        e.stop(h, 0)
    for h in handles:
        wait_end(e, h)


def wait_for(path: Path, ex: LocalExecutor, wid: str = WID) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        assert time.monotonic() < deadline, log_of(ex, wid)
        time.sleep(0.02)


def steps(d: Path, *actions: str) -> str:
    """A job that, for each action, waits for ``go<i>`` in ``d``, runs it and touches
    ``done<i>``; then sleeps until stopped."""
    parts = []
    for i, action in enumerate(actions):
        go, done = shlex.quote(str(d / f"go{i}")), shlex.quote(str(d / f"done{i}"))
        parts.append(f"while [ ! -e {go} ]; do sleep 0.02; done; {action}; touch {done}")
    return "; ".join([*parts, "exec sleep 300"])


def step(d: Path, i: int, ex: LocalExecutor, handle: str) -> Observation:
    """Let the job run its action ``i``; what the executor observes once it has."""
    (d / f"go{i}").touch()
    wait_for(d / f"done{i}", ex)
    return ex.observe([handle])[handle]


def test_a_job_that_touches_its_checkpoint_file_is_observed_with_the_files_time(
    accounts: UnixAccounts, alice_dir: Path, shared: Path, ex: LocalExecutor
) -> None:
    """Before alice's job touches ``$APPORTION_CHECKPOINT_FILE`` it reports no checkpoint;
    after ``touch`` it reports the file's modification time (between the launch and now),
    after ``touch -d`` the time the job gave it. The file lives in
    ``logs/<workload>/<attempt>.checkpoint/``, a directory alice owns (0700) inside one of
    the server's (0711)."""
    before = time.time()
    h = launch(ex, accounts.alice.name, ["sh", "-c", steps(
        alice_dir,
        'echo "$APPORTION_CHECKPOINT_FILE" > path; touch "$APPORTION_CHECKPOINT_FILE"',
        f'touch -d @{SET_BACK} "$APPORTION_CHECKPOINT_FILE"',
    )], chdir=str(alice_dir))
    o = ex.observe([h])[h]
    assert (o.state, o.checkpoint_at) == (AttemptState.RUNNING, None)
    path = ex.checkpoint_path(WID, 1)
    o = step(alice_dir, 0, ex, h)
    assert (alice_dir / "path").read_text().strip() == str(path)
    assert o.state is AttemptState.RUNNING
    assert o.checkpoint_at == os.lstat(path).st_mtime
    assert before <= o.checkpoint_at <= time.time()
    o = step(alice_dir, 1, ex, h)
    assert o.checkpoint_at == SET_BACK
    d, parent = os.lstat(path.parent), os.lstat(path.parent.parent)
    assert (d.st_uid, stat.S_IMODE(d.st_mode)) == (accounts.alice.uid, 0o700)
    assert (parent.st_uid, stat.S_IMODE(parent.st_mode)) == (0, 0o711)


# what the job (or, for "bob's file", root on bob's behalf: no account can write in the
# directory but alice) puts at the checkpoint path instead of a file of its own
PLANTED = {
    "a link to a file of root's": 'ln -s /etc/passwd "$APPORTION_CHECKPOINT_FILE"',
    "a link to a file of alice's": 'touch mine; ln -s "$PWD/mine" "$APPORTION_CHECKPOINT_FILE"',
    "a directory": 'mkdir "$APPORTION_CHECKPOINT_FILE"',
    "a fifo": 'mkfifo "$APPORTION_CHECKPOINT_FILE"',
    "bob's file": "true",
}


@pytest.mark.parametrize("case", PLANTED)
def test_anything_but_a_regular_file_of_the_jobs_account_is_ignored(
    accounts: UnixAccounts, alice_dir: Path, ex: LocalExecutor, case: str
) -> None:
    """With a symbolic link (to root's file or to one of alice's own), a directory, a fifo
    or a regular file owned by bob at the checkpoint path, alice's running attempt reports
    no checkpoint; the server never follows the link."""
    h = launch(ex, accounts.alice.name, ["sh", "-c", steps(alice_dir, PLANTED[case])],
               chdir=str(alice_dir))
    path = ex.checkpoint_path(WID, 1)
    if case == "bob's file":
        path.touch()
        os.chown(path, accounts.bob.uid, accounts.bob.gid)
    o = step(alice_dir, 0, ex, h)
    assert os.path.lexists(path)
    assert (o.state, o.checkpoint_at) == (AttemptState.RUNNING, None)


def test_no_other_account_can_write_there_and_the_job_cannot_swap_its_directory(
    accounts: UnixAccounts, alice_dir: Path, shared: Path, ex: LocalExecutor
) -> None:
    """bob's job cannot create alice's checkpoint file nor list her checkpoint directory,
    and alice's own job cannot rename or remove that directory (it sits in the server's
    directory), so the path the server stats stays hers."""
    h = launch(ex, accounts.alice.name, ["sh", "-c", steps(
        alice_dir,
        'd=$(dirname "$APPORTION_CHECKPOINT_FILE"); mv "$d" "$d.x" && echo moved; '
        'rmdir "$d" && echo removed; ln -s /etc "$d.y" && echo linked',
    )], chdir=str(alice_dir))
    step(alice_dir, 0, ex, h)
    assert not {"moved", "removed", "linked"} & set(log_of(ex).split())
    path = ex.checkpoint_path(WID, 1)
    assert path.parent.is_dir() and not path.parent.is_symlink()
    bob_dir = shared / "bob"
    bob_dir.mkdir()
    os.chown(bob_dir, accounts.bob.uid, accounts.bob.gid)
    f, d = shlex.quote(str(path)), shlex.quote(str(path.parent))
    hb = launch(ex, accounts.bob.name, ["sh", "-c", f"touch {f} || ls {d}"],
                chdir=str(bob_dir), wid="w-000002")
    ob = wait_end(ex, hb)
    assert ob.exit_code != 0 and not os.path.lexists(path)
    assert log_of(ex, "w-000002").count("Permission denied") == 2, log_of(ex, "w-000002")


def test_the_live_scheduler_preempts_the_job_that_reported_the_latest_checkpoint(
    accounts: UnixAccounts, alice_dir: Path, ex: LocalExecutor, tmp_path: Path
) -> None:
    """Two equal resumable runs of ai/llm fill h0 as alice's real processes (protected 1 s,
    a checkpoint declared every hour, so the estimate puts both at risk since their start);
    the second touches its checkpoint file. When ai/vision asks for 4 GPUs, the scheduler
    (wall clock, SQLite store, this executor) preempts the second, which the tie between two
    equal estimates would have spared, and starts ai/vision's run in its place."""
    store = open_store("sqlite", tmp_path)
    clock = WallClock()
    for path in ("ai/llm", "ai/vision"):
        store.add_budget(path, 1.0, "admin", create_parents=True)
    store.add_host("h0", 8, "admin", at=clock.now())
    store.add_user("alice", "admin", unix_user=accounts.alice.name)

    def submit(budget: str, script: str) -> str:
        return store.add_workload(
            budget=budget, gpus=4, min_runtime=1.0, submit_time=clock.now(),
            command=["sh", "-c", script], actor="alice", resumable=True,
            checkpoint_interval=3600.0, chdir=str(alice_dir)).id

    done = shlex.quote(str(alice_dir / "done"))
    a = submit("ai/llm", "exec sleep 300")
    b = submit("ai/llm", f'touch "$APPORTION_CHECKPOINT_FILE"; touch {done}; exec sleep 300')
    sched = Scheduler(store, ex, PolicyConfig(), clock, grace_s=5.0)
    try:
        sched.start()
        assert [line.split(maxsplit=1)[1] for line in sched.step()] == [
            f"start {a} on h0:4", f"start {b} on h0:4"]
        wait_for(alice_dir / "done", ex, b)
        st = sched.state
        assert st is not None
        while clock.now() < st.running[b].protected_until() + 0.5:
            time.sleep(0.05)
        v = submit("ai/vision", "true")
        lines = [line.split(maxsplit=1)[1] for line in sched.step()]
        assert lines[0] == f"preempt {b} rebalance requeue=True by={v}", lines
        assert st.running[a].checkpointed_at is None
        mtime = os.lstat(ex.checkpoint_path(b, 1)).st_mtime
        assert st.running[b].checkpointed_at == mtime
    finally:
        store.close()
