"""The local executor when the data disk stops taking writes while work runs or ends: the
wrapper keeps its attempt (and the attempt its GPUs) until it can write the exit record,
and the attempt then ends as it really did, when it really did. Needs root (it mounts a
tmpfs for the run directory, then fills it or makes it read-only), as CI runs the tests;
without root it fails."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from apportion.core import FINAL, PolicyConfig, Status
from apportion.service.clock import WallClock
from apportion.service.executors import _procfs
from apportion.service.executors.identity import Identity
from apportion.service.executors.local import LocalExecutor
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store

DEADLINE_S = 30.0  # bounds a hang only


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def run_dir(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A run directory on a filesystem of its own (a small tmpfs, with more mount options
    if the test gives them as the fixture's parameter), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs for the run directory needs root (CI runs this as root)")
    d = tmp_path / "run"
    d.mkdir()
    mount("-t", "tmpfs", "-o", "mode=0700,size=1m" + getattr(request, "param", ""), "tmpfs",
          str(d))
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def service(tmp_path: Path, run_dir: Path) -> tuple[Store, Scheduler]:
    """A store with one 8-GPU host, and a scheduler over a local executor whose run
    directory is ``run_dir`` (its files in ``run_dir/<db_id>``, and its cgroups named after
    the database, as the server's: no other test's are these)."""
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.migrate()
    store.add_budget("ai/llm", 1.0, "admin", create_parents=True)
    store.add_host("h0", 8, "admin", at=time.time())
    ex = LocalExecutor([("h0", 8)], tmp_path / "logs", run_dir, db_id=store.db_id(),
                       identity=Identity(single_user=True))
    sched = Scheduler(store, ex, PolicyConfig(), WallClock())
    sched.start()
    return store, sched


def submit_gated(store: Store, go: Path, ended: Path) -> str:
    """A 2-GPU job that waits for ``go`` to exist, writes its end time to ``ended`` and
    exits 0."""
    return store.add_workload(
        budget="ai/llm", gpus=2, min_runtime=60.0, submit_time=time.time(), actor="alice",
        command=["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done; "
                             f"date +%s.%N > {ended}"]).id


def started_gated(store: Store, sched: Scheduler, run_dir: Path, go: Path, ended: Path
                  ) -> str:
    """A gated job (``submit_gated``) started by a pass, once its wrapper has recorded it
    in its run file: its workload id."""
    wid = submit_gated(store, go, ended)
    sched.step()
    run_file = run_dir / store.db_id() / f"{wid}.1.run"
    wait_until(lambda: (_procfs.read_json(run_file) or {}).get("child_pgid") is not None,
               "the wrapper never recorded its job")
    return wid


def wait_until(done: Callable[[], bool], what: str, sched: Scheduler | None = None) -> None:
    """Wait (passing, with ``sched``) until ``done()``; fail saying ``what`` after a while."""
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, what
        if sched is not None:
            sched.step()
        time.sleep(0.05)


def running_for(store: Store, sched: Scheduler, wid: str, seconds: float) -> None:
    """Passes for ``seconds``, after each of which ``wid`` is still running."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        sched.step()
        assert store.get_workload(wid).status is Status.RUNNING
        time.sleep(0.1)


def job_ended(ended: Path) -> bool:
    return ended.exists() and bool(ended.read_text().strip())


def fill(d: Path) -> None:
    """Fill the filesystem of ``d`` to the last byte."""
    fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.parametrize("failure", ["read-only", "full"])
def test_an_exit_record_the_full_or_read_only_disk_refuses_is_written_once_it_can_be(
    tmp_path: Path, run_dir: Path, failure: str
) -> None:
    """The run directory's disk turns read-only (or fills up) while a job runs; the job
    exits 0. The wrapper cannot write its exit record, says so in the attempt's log, and
    lives on: for 2 s of passes the attempt is still running (not lost, not requeued). Once
    the disk takes writes again the record is written, and the workload ends completed,
    with the exit time the wrapper took when the job ended (before the disk came back),
    charged up to then. (The wrapper died of EROFS or ENOSPC, and the attempt ended
    ``lost``, charged up to the pass that noticed.)"""
    store, sched = service(tmp_path, run_dir)
    go, ended = tmp_path / "go", tmp_path / "ended"
    wid = started_gated(store, sched, run_dir, go, ended)
    if failure == "read-only":
        mount("-o", "remount,ro", str(run_dir))
    else:
        fill(run_dir)
    try:
        go.touch()
        wait_until(lambda: job_ended(ended), "the job never ended")
        job_end = float(ended.read_text())
        running_for(store, sched, wid, 2.0)
    finally:
        if failure == "read-only":
            mount("-o", "remount,rw", str(run_dir))
        else:
            (run_dir / "filler").unlink()
    back = time.time()
    log = tmp_path / "logs" / wid / "1.log"
    assert "cannot write the exit record" in log.read_text()
    assert {"read-only": "Read-only file system", "full": "No space left on device"}[
        failure] in log.read_text()

    wait_until(lambda: store.get_workload(wid).status in FINAL,
               "the exit record was never written", sched)
    w = store.get_workload(wid)
    a = w.attempts[0]
    assert (w.status, w.exit_code, a.end_reason) == (Status.COMPLETED, 0, "exited 0")
    assert a.ended_at is not None and job_end <= a.ended_at < job_end + 1.0 < back
    assert a.gpu_seconds == pytest.approx(2 * (a.ended_at - a.started_at))
    assert "exit record written" in log.read_text()
    store.close()


# two pages: the spec and the wrapper's claim (its run file), no room for another file
@pytest.mark.parametrize("run_dir", [",size=8k"], indirect=True)
def test_a_wrapper_that_cannot_record_its_jobs_process_group_still_watches_it(
    tmp_path: Path, run_dir: Path
) -> None:
    """The disk has room for the wrapper's claim but not for the update that records the
    job's process group: the wrapper says so in the log and goes on watching the job (had
    it died, the job would have run on unwatched and its attempt ended ``lost``). The job
    exits 0; once the disk has room again (the spec, read long since, removed) the exit
    record is written and the workload ends completed, at the job's end."""
    store, sched = service(tmp_path, run_dir)
    go, ended = tmp_path / "go", tmp_path / "ended"
    wid = submit_gated(store, go, ended)
    sched.step()
    log = tmp_path / "logs" / wid / "1.log"
    wait_until(lambda: "No space left on device" in log.read_text(),
               "the wrapper never tried to record the job")
    running_for(store, sched, wid, 1.0)
    assert "cannot record the job's process group" in log.read_text()
    go.touch()
    wait_until(lambda: job_ended(ended), "the job never ended")
    running_for(store, sched, wid, 1.0)
    (run_dir / store.db_id() / f"{wid}.1.spec").unlink()
    wait_until(lambda: store.get_workload(wid).status in FINAL,
               "the exit record was never written", sched)
    w = store.get_workload(wid)
    ended_at = w.attempts[0].ended_at
    assert (w.status, w.exit_code) == (Status.COMPLETED, 0)
    assert ended_at is not None and float(ended.read_text()) <= ended_at
    store.close()


def test_a_read_only_run_directory_defers_launches_without_attempts_and_is_said_once(
    tmp_path: Path, run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run directory's disk is read-only when a workload is launched: every try (1 s,
    2 s, 4 s ... apart) fails, and none adds an attempt (the workload stays pending with no
    attempt, and the queue lists it ``launch failing: run directory ...: Read-only file
    system``); the server says it once, as an error naming the directory with no
    traceback, and counts the others (``launches_deferred``). Once the disk takes writes
    the workload starts as attempt 1. (Each try added a ``launch failed`` attempt and a
    traceback, "an unexpected error".) The test passes until three tries have failed, the
    third no sooner than 3 s after the first (a fixed 4 s of passes held the third only if
    no pass was late)."""
    store, sched = service(tmp_path, run_dir)
    mount("-o", "remount,ro", str(run_dir))
    try:
        go, ended = tmp_path / "go", tmp_path / "ended"
        wid = submit_gated(store, go, ended)
        with caplog.at_level(logging.INFO, logger="apportion.scheduler"):
            deadline = time.monotonic() + DEADLINE_S
            first_try: float | None = None
            while sched.launches_deferred < 3:
                assert time.monotonic() < deadline, sched.launches_deferred
                before = time.time()
                sched.step()
                if first_try is None and sched.launches_deferred:
                    first_try = before
                time.sleep(0.1)
            assert first_try is not None and time.time() - first_try >= 1.0 + 2.0
            w = store.get_workload(wid)
            assert (w.status, w.attempts, w.attempts_count) == (Status.PENDING, (), 0)
            [p] = sched.queue_view().pending
            assert p.hold == (f"launch failing: run directory {run_dir / store.db_id()}: "
                              "Read-only file system")
            said = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert [r.getMessage().split(" (")[0] for r in said] == [
                f"launches wait: run directory {run_dir / store.db_id()}: Read-only file "
                "system"]
            assert not any(r.exc_info for r in caplog.records)
        mount("-o", "remount,rw", str(run_dir))
        go.touch()
        wait_until(lambda: store.get_workload(wid).status in FINAL,
                   "never started once the disk took writes", sched)
        w = store.get_workload(wid)
        assert [(a.n, a.end_reason) for a in w.attempts] == [(1, "exited 0")]
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(run_dir)], check=False)
    store.close()


def test_a_job_ending_with_its_logs_file_system_full_says_its_log_may_be_cut_short(
    tmp_path: Path
) -> None:
    """The logs directory is on a file system of its own, which a job fills (its output
    cut short by ENOSPC) before it exits 0: the attempt's end reason (what ``show`` and
    ``why`` give) says the log may be cut short, as the wrapper recorded it; the workload
    still ends completed. (It said only ``exited 0``, with a log cut short or empty.)"""
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs for the logs needs root (CI runs this as root)")
    logs = tmp_path / "logs"
    logs.mkdir()
    mount("-t", "tmpfs", "-o", "mode=0711,size=256k", "tmpfs", str(logs))
    try:
        store, sched = service(tmp_path, tmp_path / "run")
        wid = store.add_workload(
            budget="ai/llm", gpus=1, min_runtime=60.0, submit_time=time.time(),
            actor="alice", command=["sh", "-c", "head -c 1000000 /dev/zero; exit 0"]).id
        wait_until(lambda: store.get_workload(wid).status in FINAL, "never ended", sched)
        w = store.get_workload(wid)
        assert w.status is Status.COMPLETED
        assert w.attempts[0].end_reason == (
            "exited 0; log cut short? its file system was full (ENOSPC) when the job ended")
        store.close()
    finally:
        subprocess.run(["umount", "-l", str(logs)], check=False)


def test_a_job_whose_exit_record_cannot_be_written_is_said_in_the_servers_log(
    tmp_path: Path, run_dir: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run directory turns read-only and the job exits: while its wrapper cannot
    write the exit record (the attempt still shown running), the server logs once, after
    ``EXIT_RECORD_LATE_S``, a warning naming the attempt and the run directory ("exit
    record pending"); once the record is written it says so. (Nothing was said anywhere:
    the job looked running with no reason, for minutes.)"""
    monkeypatch.setattr("apportion.service.executors.local.EXIT_RECORD_LATE_S", 0.3,
                        raising=False)
    store, sched = service(tmp_path, run_dir)
    go, ended = tmp_path / "go", tmp_path / "ended"
    wid = started_gated(store, sched, run_dir, go, ended)
    with caplog.at_level(logging.INFO, logger="apportion.executor.local"):
        mount("-o", "remount,ro", str(run_dir))
        try:
            go.touch()
            wait_until(lambda: job_ended(ended), "the job never ended")
            running_for(store, sched, wid, 1.5)
        finally:
            mount("-o", "remount,rw", str(run_dir))
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(said) == 1 and said[0].startswith(f"{wid} attempt 1: exit record pending")
        assert str(run_dir / store.db_id()) in said[0]
        wait_until(lambda: store.get_workload(wid).status in FINAL,
                   "the exit record was never written", sched)
    assert any(r.getMessage() == f"{wid}.1: exit record written at last"
               for r in caplog.records)
    store.close()
