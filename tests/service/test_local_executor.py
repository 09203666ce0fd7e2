"""The local executor with real process groups (single-user mode: work runs as the test's
own user; running work as its owner's account is tested in test_isolation.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from apportion.service.executor import (
    AttemptState,
    HostSlots,
    Launch,
    LaunchDeferred,
    LaunchRefused,
    Observation,
)
from apportion.service.executors import _procfs, _wrapper
from apportion.service.executors._cgroup import CgroupHost
from apportion.service.executors.identity import Identity, child_env, server_account
from apportion.service.executors.local import LOG_FULL, own_env
from apportion.service.executors.local import LocalExecutor as _LocalExecutor

DEADLINE_S = 30.0  # generous: only bounds a hang, never asserts speed


class LocalExecutor(_LocalExecutor):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("identity", Identity(single_user=True))
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[LocalExecutor]:
    e = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    yield e
    e.close()


def launch(ex: LocalExecutor, script: str, wid: str = "w-000001", attempt: int = 1,
           gpus: tuple[int, ...] = (0,)) -> str:
    return ex.launch(Launch(wid, attempt, ["sh", "-c", script], (HostSlots("h0", gpus),)))


def wait_for(ex: LocalExecutor, handle: str,
             done: Callable[[Observation], bool] = lambda o: o.state is not AttemptState.RUNNING
             ) -> Observation:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        o = ex.observe([handle])[handle]
        if done(o):
            return o
        if time.monotonic() > deadline:
            raise AssertionError(f"{handle}: still {o.state.value} after {DEADLINE_S} s")
        time.sleep(0.02)


def wait_file(path: Path) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists() or not path.read_text().strip():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: never written")
        time.sleep(0.02)
    return path.read_text()


def test_environment_and_log_file(ex: LocalExecutor, tmp_path: Path) -> None:
    """The command sees its GPU indexes, workload id and attempt; stdout and stderr go to
    <logs>/<workload>/<attempt>.log."""
    h = launch(ex, 'echo "$CUDA_VISIBLE_DEVICES $APPORTION_WORKLOAD_ID $APPORTION_ATTEMPT"; '
                   "echo oops >&2", wid="w-000007", attempt=3, gpus=(2, 5))
    o = wait_for(ex, h)
    assert (o.state, o.exit_code) == (AttemptState.EXITED, 0)
    log = (tmp_path / "logs" / "w-000007" / "3.log").read_text()
    assert "2,5 w-000007 3" in log and "oops" in log


def test_a_logs_directory_removed_while_running_is_made_again_as_at_start(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """The logs directory removed under a running executor is made again at the next
    launch, the server's and 0711 as at start, and the attempt runs and logs there; one
    put back by hand with another mode (root's, 0755: accepted at start) is made 0711
    again before it is used. (The launch raised FileNotFoundError, and a directory made
    back by hand was used as it was, listable.)"""
    logs = tmp_path / "logs"
    shutil.rmtree(logs)
    o = wait_for(ex, launch(ex, "echo hello", wid="w-000002"))
    st = os.stat(logs)
    assert (o.exit_code, stat.S_IMODE(st.st_mode), st.st_uid) == (0, 0o711, os.geteuid())
    assert (logs / "w-000002" / "1.log").read_text() == "hello\n"
    shutil.rmtree(logs)
    logs.mkdir(mode=0o755)
    os.chmod(logs, 0o755)
    assert wait_for(ex, launch(ex, "true", wid="w-000003")).exit_code == 0
    assert stat.S_IMODE(os.stat(logs).st_mode) == 0o711


def test_a_logs_directory_it_would_refuse_at_start_is_refused_in_one_line(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """A logs directory put back by someone else (owned by another uid), or one whose
    parent is gone too, is not used: the launch raises ``LaunchDeferred`` saying in one
    line which directory and what is wrong, as ``apportion serve`` says it at start, and
    nothing is made or started there."""
    if os.geteuid() != 0:
        pytest.fail("giving the directory to another uid needs root (CI runs this as root)")
    logs = tmp_path / "logs"
    shutil.rmtree(logs)
    logs.mkdir(mode=0o755)
    os.chown(logs, 54321, 54321)
    with pytest.raises(LaunchDeferred, match=rf"^logs directory {re.escape(str(logs))}: "
                                             "owned by uid 54321, not by "):
        launch(ex, "true", wid="w-000004")
    assert list(logs.iterdir()) == []
    shutil.rmtree(logs)
    moved = tmp_path / "gone" / "logs"
    ex.logs_dir = moved
    with pytest.raises(LaunchDeferred) as e:
        launch(ex, "true", wid="w-000005")
    assert str(e.value) == (f"logs directory {moved}: missing, and so is {moved.parent}: "
                            "make it, or restart the server")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("submitted", "shown"), [(None, "0022"), (0o077, "0077"), (0, "0000")])
def test_the_command_runs_with_its_submitters_umask_or_022(
        ex: LocalExecutor, tmp_path: Path, submitted: int | None, shown: str) -> None:
    """The command's umask is the one its submitter sent (``Launch.umask``), 022 when none
    was; never the server's own (077 under ``apportion serve``)."""
    old = os.umask(0o077)  # as the server runs
    try:
        h = ex.launch(Launch("w-000001", 1, ["sh", "-c", "umask"], (HostSlots("h0", (0,)),),
                             umask=submitted))
    finally:
        os.umask(old)
    assert wait_for(ex, h).exit_code == 0
    assert (tmp_path / "logs" / "w-000001" / "1.log").read_text().split() == [shown]


def test_exit_codes_are_reported(ex: LocalExecutor) -> None:
    """A command's exit code is observed as is; a missing program is 127."""
    h1 = launch(ex, "exit 3", wid="w-000001")
    h2 = ex.launch(Launch("w-000002", 1, ["/nonexistent/program"], (HostSlots("h0", (0,)),)))
    assert wait_for(ex, h1).exit_code == 3
    assert wait_for(ex, h2).exit_code == 127


def test_stop_sends_sigterm_to_a_trapping_process(ex: LocalExecutor, tmp_path: Path) -> None:
    """stop() delivers SIGTERM; a command that traps it exits on its own terms (here 7)
    before the grace period ends, and the exit is marked as signalled."""
    ready = tmp_path / "ready"
    h = launch(ex, f"trap 'echo got TERM; exit 7' TERM; touch {ready}; "
                   "while true; do sleep 0.05; done")
    wait_file_exists(ready)
    ex.stop(h, grace_s=60.0)
    o = wait_for(ex, h)
    assert (o.exit_code, o.signalled) == (7, True)
    assert "got TERM" in (tmp_path / "logs" / "w-000001" / "1.log").read_text()


def wait_file_exists(path: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: never created")
        time.sleep(0.02)


def test_sigkill_after_grace_for_a_process_ignoring_sigterm(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """A command that ignores SIGTERM is killed with SIGKILL once the grace period ends."""
    ready = tmp_path / "ready"
    h = launch(ex, f"trap '' TERM; touch {ready}; while true; do sleep 0.05; done")
    wait_file_exists(ready)
    ex.stop(h, grace_s=0.3)
    o = wait_for(ex, h)
    assert (o.exit_code, o.signalled) == (-9, True)


def test_stop_ends_the_whole_process_group(ex: LocalExecutor, tmp_path: Path) -> None:
    """Background children of the command are stopped with it: nothing of the attempt's
    process group survives."""
    pids = tmp_path / "pids"
    h = launch(ex, f"sleep 300 & echo $! > {pids}; wait")
    child = int(wait_file(pids))
    run = _procfs.read_json(tmp_path / "run" / "w-000001.1.run")
    assert run is not None and isinstance(run["child_pgid"], int)
    ex.stop(h, grace_s=5.0)
    wait_for(ex, h)
    fields = _procfs.stat_fields(child)
    assert fields is None or fields[0] == "Z"
    assert not _procfs.group_alive(run["child_pgid"])


def test_new_executor_observes_attempts_of_the_old_one(tmp_path: Path) -> None:
    """After a restart (a new executor over the same run directory), a running attempt is
    still seen running, and one that exited meanwhile is seen with its real exit code and
    exit time."""
    old = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    go = tmp_path / "go"
    quick = launch(old, "exit 5", wid="w-000001")
    slow = launch(old, f"while [ ! -e {go} ]; do sleep 0.02; done; exit 4", wid="w-000002")
    wait_for(old, quick)
    old.close()
    new = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    seen = new.observe([quick, slow])
    assert (seen[quick].state, seen[quick].exit_code) == (AttemptState.EXITED, 5)
    assert seen[slow].state is AttemptState.RUNNING
    go.touch()
    o = wait_for(new, slow)
    observed_at = time.time()
    assert o.exit_code == 4 and o.ended_at is not None and o.ended_at <= observed_at


def test_stop_from_a_new_executor_reaches_an_old_attempt(tmp_path: Path) -> None:
    """An attempt launched before a restart can be stopped by the new executor."""
    old = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    ready = tmp_path / "ready"
    h = launch(old, f"touch {ready}; while true; do sleep 0.05; done")
    wait_file_exists(ready)
    old.close()
    new = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    new.stop(h, grace_s=5.0)
    o = wait_for(new, h)
    assert o.signalled and o.exit_code == -15


def running_command(ex: LocalExecutor, handle: str, stem: str) -> None:
    """Wait until the wrapper ``handle`` has started its command (recorded its group)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        run = _procfs.read_json(ex.run_dir / f"{stem}.run")
        if run is not None and run.get("handle") == handle and run.get("child_pgid"):
            return
        assert time.monotonic() < deadline, f"{stem}: the command never started"
        time.sleep(0.02)


def test_stop_unknown_ends_the_wrappers_no_known_attempt_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a restart, ``stop_unknown`` given the handles the database knows stops a
    wrapper it was not given, whose command ignores SIGTERM (killed after the grace), names
    it in one warning and moves its files to stale/ once it is dead (with the exit record
    its wrapper wrote, and the stop deadline written for it); the known attempt runs on,
    its files in place."""
    old = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    ready = tmp_path / "ready"
    known = launch(old, "exec sleep 1000", wid="w-000001")
    unknown = launch(old, f"trap '' TERM; touch {ready}; while true; do sleep 0.05; done",
                     wid="w-000002")
    running_command(old, known, "w-000001.1")
    wait_file_exists(ready)
    old.close()
    new = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    try:
        with caplog.at_level(logging.WARNING, logger="apportion.executor.local"):
            new.stop_unknown({known}, grace_s=0.3)
        assert not _procfs.alive(unknown) and _procfs.alive(known)
        stale = tmp_path / "run" / "stale"
        assert [r.getMessage() for r in caplog.records] == [
            f"w-000002 attempt 1 (wrapper pid {unknown.split(':')[0]}) runs for no attempt "
            f"the database knows (a backup restored from before it started?): stopped, its "
            f"files moved to {stale}"]
        aside = {p.name.split(".")[2]: p for p in stale.iterdir()}
        assert sorted(aside) == ["exit", "run", "spec", "stop"]
        assert json.loads(aside["exit"].read_text())["exit_code"] == -signal.SIGKILL
        assert not list((tmp_path / "run").glob("w-000002.*"))
        assert (tmp_path / "run" / "w-000001.1.run").exists()
    finally:
        new.stop(known, grace_s=0)
        new.stop(unknown, grace_s=0)
    assert wait_for(new, known).state is AttemptState.EXITED


def test_a_launch_kills_another_timelines_wrapper_still_running_its_name(
    tmp_path: Path
) -> None:
    """A wrapper of another timeline still running w-000001 attempt 1 (its database was
    restored from a backup and nothing stopped it) is killed when w-000001 attempt 1 is
    launched again, before the new one starts: the new attempt, in the same GPU and
    cgroup name, runs alone and records its own exit (5), and the old one's files, with
    its own exit record, are set aside."""
    other = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    old = launch(other, "exec sleep 1000")
    running_command(other, old, "w-000001.1")
    other.close()
    ex = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    try:
        new = launch(ex, "exit 5")
        assert not _procfs.alive(old)
    finally:
        ex.stop(old, grace_s=0)  # never left running by a failing check
    o = wait_for(ex, new)
    assert (o.state, o.exit_code) == (AttemptState.EXITED, 5)
    exit_record = json.loads((tmp_path / "run" / "w-000001.1.exit").read_text())
    assert (exit_record["handle"], exit_record["exit_code"]) == (new, 5)
    aside = {p.name.split(".")[2]: p for p in (tmp_path / "run" / "stale").iterdir()}
    assert json.loads(aside["exit"].read_text())["handle"] == old


def test_a_launch_leaves_another_timelines_wrapper_that_has_written_its_exit_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrapper of another timeline that has written its exit record but not yet left
    (here a stand-in process named by both of its files) is neither stopped nor warned
    about when w-000001 attempt 1 is launched again: its command has ended. Its run and
    exit files (no stop file: none was written) are set aside, and the new attempt records
    its own exit (5)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    leaving = subprocess.Popen(["sleep", "1000"])
    try:
        handle = _procfs.handle_of(leaving.pid)
        assert handle is not None
        _procfs.write_json_atomic(run_dir / "w-000001.1.run", {"handle": handle})
        _procfs.write_json_atomic(run_dir / "w-000001.1.exit",
                                  {"handle": handle, "exit_code": 0, "ended_at": time.time()})
        ex = LocalExecutor([("h0", 8)], tmp_path / "logs", run_dir)
        with caplog.at_level(logging.WARNING, logger="apportion.executor.local"):
            new = launch(ex, "exit 5")
        assert _procfs.alive(handle)
        assert caplog.records == []
        o = wait_for(ex, new)
        assert (o.state, o.exit_code) == (AttemptState.EXITED, 5)
        assert sorted(p.name.split(".")[2] for p in (run_dir / "stale").iterdir()) == [
            "exit", "run"]
    finally:
        leaving.kill()
        leaving.wait()


def test_a_wrapper_whose_files_were_set_aside_writes_no_exit_record(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """A wrapper whose run file was moved away and the name claimed by another attempt
    writes no exit record when its command ends: the name's record is the other one's."""
    h = launch(ex, "exec sleep 1000")
    running_command(ex, h, "w-000001.1")
    run = tmp_path / "run" / "w-000001.1.run"
    os.replace(run, tmp_path / "set-aside.run")
    assert _procfs.create_json_exclusive(run, {"handle": "1:1"})  # another attempt's claim
    os.kill(_procfs.parse_handle(h)[0], signal.SIGTERM)  # forwarded: the command ends
    deadline = time.monotonic() + DEADLINE_S
    while _procfs.alive(h):
        assert time.monotonic() < deadline, "the wrapper never ended"
        time.sleep(0.02)
    assert not (tmp_path / "run" / "w-000001.1.exit").exists()
    assert "set aside, no exit record written" in (
        tmp_path / "logs" / "w-000001" / "1.log").read_text()


def test_recycled_pid_is_not_mistaken_for_the_attempt(ex: LocalExecutor) -> None:
    """A handle names pid *and* start time: a live process with the same pid but another
    start time is not the attempt (it is reported gone, never running)."""
    me = os.getpid()
    bogus = f"{me}:{(_procfs.starttime(me) or 0) + 12345}"
    assert ex.observe([bogus])[bogus].state is AttemptState.GONE


def test_find_adopts_claimed_attempts_and_voids_unclaimed_ones(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """find() returns the handle of an attempt whose wrapper started; for one that no
    wrapper claimed it writes a void claim, so a wrapper starting late refuses to run."""
    h = launch(ex, "exit 0", wid="w-000001")
    wait_for(ex, h)
    assert ex.find("w-000001", 1) == h
    assert ex.find("w-000002", 1) is None
    marker = tmp_path / "ran"
    spec = tmp_path / "run" / "w-000002.1.spec"
    spec.write_text(json.dumps({"workload": "w-000002", "attempt": 1,
                                "argv": ["touch", str(marker)], "env": {}}))
    rc = subprocess.run(
        [sys.executable, "-m", "apportion.service.executors._wrapper", str(spec)],
        capture_output=True, text=True, check=False,
    )
    assert rc.returncode == 0 and "voided" in rc.stderr
    assert not marker.exists()


def _freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped: the signal only takes effect when the
    process next leaves the kernel, so one in the middle of a system call (the link that
    makes its claim) finishes that call first."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + DEADLINE_S
    while (fields := _procfs.stat_fields(pid)) is not None and fields[0] not in "tT":
        assert time.monotonic() < deadline, f"{pid} never stopped: {fields[0]}"
        time.sleep(0.005)


def _voided_before_its_claim(ex: LocalExecutor, run_dir: Path) -> tuple[str, str]:
    """Launch, freeze the wrapper before it claims its attempt, and stop it: the stop voids
    the attempt. Returns (handle, stem); tries new workloads until a wrapper was frozen
    before its claim (it takes Python's start-up to claim, so the first try nearly always
    is). Whether it claimed is looked at once it is stopped, never while it may still be
    in the middle of writing its claim."""
    for i in range(1, 21):
        wid = f"w-{i:06d}"
        h = launch(ex, "sleep 300", wid=wid)
        pid, _ = _procfs.parse_handle(h)
        _freeze(pid)
        stem = f"{wid}.1"
        if not (run_dir / f"{stem}.run").exists():
            ex.stop(h, grace_s=5.0)
            os.kill(pid, signal.SIGCONT)  # it finds the void claim and runs nothing
            return h, stem
        os.kill(pid, signal.SIGCONT)
        ex.stop(h, grace_s=0.0)
        wait_for(ex, h)
    raise AssertionError("every wrapper claimed its attempt before it could be frozen")


@pytest.mark.parametrize("record_lost", [False, True], ids=["recorded", "crash-before-record"])
def test_a_voided_attempt_ends_at_its_void_after_a_restart(
    tmp_path: Path, record_lost: bool
) -> None:
    """An attempt stopped before its wrapper claimed it is voided; an executor started
    afterwards (a server restart) still finds it by its handle and reports it exited,
    signalled, at the moment it was voided, not when it was next observed. If the server
    died between the void claim and its exit record, the new executor writes that record
    with the same time."""
    run_dir = tmp_path / "run"
    old = LocalExecutor([("h0", 8)], tmp_path / "logs", run_dir)
    h, stem = _voided_before_its_claim(old, run_dir)
    claim = json.loads((run_dir / f"{stem}.run").read_text())
    assert claim["void"] is True and claim["voided"] == h
    old.close()
    if record_lost:
        (run_dir / f"{stem}.exit").unlink()
    time.sleep(0.05)  # so an end taken at observation would differ from the void's time
    new = LocalExecutor([("h0", 8)], tmp_path / "logs", run_dir)
    o = new.observe([h])[h]
    assert (o.state, o.signalled, o.ended_at) == (AttemptState.EXITED, True, claim["at"])
    record = json.loads((run_dir / f"{stem}.exit").read_text())
    assert (record["handle"], record["ended_at"], record["voided"]) == (h, claim["at"], True)


def test_stop_right_after_launch_ends_the_attempt(ex: LocalExecutor, tmp_path: Path) -> None:
    """A stop that arrives while the wrapper is still starting ends the attempt (signalled)
    whichever comes first: the stop voids it, or the wrapper forwards the SIGTERM."""
    h = launch(ex, "sleep 300")
    ex.stop(h, grace_s=5.0)
    o = wait_for(ex, h)
    assert o.state is AttemptState.EXITED and o.signalled


def test_checkpoint_directory_is_fresh_and_the_jobs_touch_is_reported(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """A checkpoint directory left at the attempt's path (another timeline's, with a file
    in it) is replaced by an empty one at launch, so nothing is reported until the job
    touches ``$APPORTION_CHECKPOINT_FILE``; then its time is."""
    path = ex.checkpoint_path("w-000001", 1)
    path.parent.mkdir(parents=True)
    path.touch()
    go, done = tmp_path / "go", tmp_path / "done"
    h = launch(ex, f'while [ ! -e {go} ]; do sleep 0.02; done; '
                   f'touch "$APPORTION_CHECKPOINT_FILE"; touch {done}; exec sleep 60')
    assert not path.exists()
    assert ex.observe([h])[h].checkpoint_at is None
    go.touch()
    deadline = time.monotonic() + DEADLINE_S
    while not done.exists():
        assert time.monotonic() < deadline, "the job never touched its checkpoint file"
        time.sleep(0.02)
    o = ex.observe([h])[h]
    assert (o.state, o.checkpoint_at) == (AttemptState.RUNNING, path.stat().st_mtime)
    ex.stop(h, 0)
    wait_for(ex, h)


def test_the_wrapper_never_imports_code_from_the_servers_working_directory(
        ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server started in a directory its users can write to (a shared /tmp, a project
    directory) runs its wrappers as root: an ``apportion`` package planted there must not be
    imported by them, or any user could run code as the server. The planted package writes
    a file when imported; the attempt must run its own command and leave that file
    unwritten."""
    shared = tmp_path / "shared"
    (shared / "apportion").mkdir(parents=True)
    proof = tmp_path / "planted-code-ran"
    (shared / "apportion" / "__init__.py").write_text(
        f"open({str(proof)!r}, 'w').write('imported')\n")
    monkeypatch.chdir(shared)
    out = tmp_path / "out"
    h = launch(ex, f"echo ran > {out}")
    o = wait_for(ex, h)
    assert (o.state, o.exit_code) == (AttemptState.EXITED, 0)
    assert out.read_text() == "ran\n"
    assert not proof.exists()


def _existing(dirs: list[str]) -> list[str]:
    return [d for d in dirs if os.path.exists(d)]


def test_an_attempt_voided_before_its_claim_leaves_no_cgroup(tmp_path: Path) -> None:
    """An attempt stopped (cancelled) between its launch and its start, before its wrapper
    claimed it, is voided, and the cgroups made for it at launch (on cgroup v1 one in each
    of pids, freezer and devices) are removed by that stop, and stay so once the wrapper,
    let go on, has found the void claim and left: they were left behind, empty, for good.
    The attempts the helper stopped after their claim leave none either."""
    ex = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", db_id="voidtest")
    assert ex.cgroups is not None, "cgroups are not available here"
    h, stem = _voided_before_its_claim(ex, ex.run_dir)
    made = [d for spec in ex.run_dir.glob("*.spec")
            for d in (_procfs.read_json(spec) or {})["cgroups"]]
    assert any(f"-{stem}" in d for d in made), made
    assert _existing(made) == []
    assert wait_for(ex, h).state is AttemptState.EXITED
    deadline = time.monotonic() + DEADLINE_S
    while _procfs.alive(h):
        assert time.monotonic() < deadline, "the voided attempt's wrapper never left"
        time.sleep(0.02)
    assert _existing(made) == []


def test_a_launch_killed_before_its_spec_leaves_no_cgroup_once_found_void(
        tmp_path: Path) -> None:
    """A server killed during a launch, after it made the attempt's cgroups and before it
    wrote the spec naming them, leaves them behind with nothing recording them. The next
    server's reconciliation finds no claim for the attempt, voids it, and removes them by
    the name the launch gives them: none is left, and the attempt counts as never
    started."""
    ex = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", db_id="nospec")
    assert ex.cgroups is not None, "cgroups are not available here"
    made = [str(d) for d in ex.cgroups.create(ex._cgroup_name("w-000001.1"), {0})]
    assert _existing(made) == made and not (ex.run_dir / "w-000001.1.spec").exists()
    after = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", db_id="nospec")
    assert after.find("w-000001", 1) is None
    assert _existing(made) == []
    assert (_procfs.read_json(after.run_dir / "w-000001.1.run") or {}).get("void") is True


def test_a_stop_between_the_wrappers_claim_and_its_fork_leaves_no_cgroup(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM that reaches the wrapper after it claimed its attempt but before it forked
    the command (a stop that found the attempt claimed) ends the attempt, signalled, with
    nothing started, and the wrapper removes the attempt's cgroups (it returned leaving
    them). The wrapper runs in this process, the TERM raised as its claim is written."""
    host = CgroupHost.detect()
    assert host is not None, "cgroups are not available here"
    dirs = host.create("claimtest-w-000001.1", {0})
    spec = tmp_path / "w-000001.1.spec"
    _procfs.write_json_atomic(spec, {"workload": "w-000001", "attempt": 1, "argv": ["true"],
                                     "env": {}, "cgroups": dirs}, durable=False)

    def claim_then_term(path: Path, data: dict[str, Any]) -> bool:
        claimed = _procfs.create_json_exclusive(path, data)
        signal.raise_signal(signal.SIGTERM)  # its handler runs before this returns
        return claimed

    monkeypatch.setattr(_wrapper, "create_json_exclusive", claim_then_term)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGALRM)}
    try:
        assert _wrapper.main([str(spec)]) == 0
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    record = _procfs.read_json(tmp_path / "w-000001.1.exit") or {}
    assert (record.get("exit_code"), record.get("signalled")) == (-signal.SIGTERM, True)
    assert _existing(dirs) == []


def test_a_wrapper_that_dies_before_its_claim_leaves_no_cgroup(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrapper that exits before it claims its attempt (here its interpreter is
    ``false``) is observed gone, and the cgroups made at launch, which then only the
    attempt's spec names, are removed (only those a claim named were)."""
    ex = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", db_id="deadtest")
    assert ex.cgroups is not None, "cgroups are not available here"
    monkeypatch.setattr(ex, "python", "/bin/false")
    h = launch(ex, "true")
    dirs = (_procfs.read_json(ex.run_dir / "w-000001.1.spec") or {})["cgroups"]
    assert dirs and _existing(dirs) == dirs
    assert wait_for(ex, h).state is AttemptState.GONE
    assert _existing(dirs) == []


def test_a_link_at_the_workloads_log_directory_is_not_followed(
        ex: LocalExecutor, tmp_path: Path) -> None:
    """A symbolic link at ``logs/<workload>`` (to a directory holding a ``1.log``) is refused
    at launch, naming it: the directory it points to keeps its mode, owner and files (it
    was made 0711, the log truncated and given to the job's account, and a checkpoint
    directory made in it)."""
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    (target / "1.log").write_text("precious\n")
    (tmp_path / "logs" / "w-000001").symlink_to(target)
    before = [(p.name, p.stat().st_mode, p.stat().st_uid) for p in [target, *target.iterdir()]]
    link = tmp_path / "logs" / "w-000001"
    with pytest.raises(LaunchDeferred, match=re.escape(
            f"logs directory {link.parent}: w-000001: not a directory of the server's (a "
            "link or a file): not followed")):
        launch(ex, "echo written")
    after = [(p.name, p.stat().st_mode, p.stat().st_uid) for p in [target, *target.iterdir()]]
    assert after == before
    assert (target / "1.log").read_text() == "precious\n"


def test_a_log_already_at_the_attempts_path_is_replaced_not_written_through(
        ex: LocalExecutor, tmp_path: Path) -> None:
    """A file already at the attempt's log path (another timeline's; here a hard link to a
    file elsewhere) is removed and the log made anew: the other file keeps its bytes (it
    was truncated and written through)."""
    other = tmp_path / "other"
    other.write_text("precious\n")
    log = ex.log_path("w-000001", 1)
    log.parent.mkdir()
    os.link(other, log)
    h = launch(ex, "echo written")
    assert wait_for(ex, h).exit_code == 0
    assert other.read_text() == "precious\n"
    assert log.read_text() == "written\n" and not log.samefile(other)


def three_hosts_config(tmp_path: Path, names: tuple[str, ...]) -> Any:
    """A local-executor config of the 2-GPU hosts ``names``, over ``tmp_path/data``."""
    from apportion.service.config import parse_config

    return parse_config({"server": {"data_dir": str(tmp_path / "data"), "single_user": True},
                         "executor": {"kind": "local"},
                         "hosts": [{"name": n, "gpus": 2} for n in names]},
                        source="apportion.toml", base_dir=tmp_path)


def run_on(tmp_path: Path, host: str, hosts: tuple[str, ...] = ("n1", "n2", "n3")) -> str:
    """Start ``exec sleep 1000`` on both GPUs of ``host`` with a server built from the
    config of ``hosts``, and return its handle once the command runs."""
    from apportion.cli.serve import build_executor

    ex = build_executor(three_hosts_config(tmp_path, hosts), None)
    handle = ex.launch(Launch("w-000001", 1, ["sh", "-c", "exec sleep 1000"],
                              (HostSlots(host, (0, 1)),)))
    assert isinstance(ex, _LocalExecutor)
    running_command(ex, handle, "w-000001.1")
    ex.close()
    return handle


def test_a_start_whose_hosts_move_a_running_attempts_gpus_is_refused(tmp_path: Path) -> None:
    """Hosts n1, n2, n3 of 2 GPUs each, an attempt running on n2 (the machine's GPUs 2,3):
    a restart whose config no longer has n1 would make n2's GPUs 0,1 and hand 2,3 to n3,
    so it is refused with a ConfigError naming the attempt, its host, the GPUs it holds,
    what the config now makes of them and what to do; the attempt runs on."""
    from apportion.cli.serve import build_executor
    from apportion.service.config import ConfigError

    handle = run_on(tmp_path, "n2")
    try:
        with pytest.raises(ConfigError) as e:
            build_executor(three_hosts_config(tmp_path, ("n2", "n3")), None)
        assert str(e.value) == (
            "apportion.toml: hosts: w-000001 attempt 1 still runs on host n2 with this "
            "machine's GPUs 2,3, but the [[hosts]] now give n2 the machine's GPUs 0-1 and "
            "GPUs 2,3 to n3 (a host's GPUs follow those of the hosts before it): keep each "
            "host's [[hosts]] block as it was until its work has ended (drain it first), or "
            "remove or shrink only the last hosts")
        with pytest.raises(ConfigError, match="still runs on host n2 .* but the "
                           r"\[\[hosts\]\] now have no host n2 and GPUs 2,3 to n3 "):
            build_executor(three_hosts_config(tmp_path, ("n1", "n3")), None)
        assert _procfs.alive(handle)
    finally:
        _signal_wrapper(handle)


def test_removing_only_the_last_hosts_still_starts(tmp_path: Path) -> None:
    """With an attempt running on n2 of n1, n2, n3, a config without n3 (nothing on it)
    still starts, and so does one without n2 and n3 (n2's GPUs, 2,3, are then nobody's);
    once the attempt has ended, a config without n1 starts too."""
    from apportion.cli.serve import build_executor

    handle = run_on(tmp_path, "n2")
    try:
        for hosts in (("n1", "n2"), ("n1",)):
            build_executor(three_hosts_config(tmp_path, hosts), None).close()
    finally:
        _signal_wrapper(handle)
    ex = build_executor(three_hosts_config(tmp_path, ("n1", "n2", "n3")), None)
    assert isinstance(ex, _LocalExecutor)
    wait_for(ex, handle)
    build_executor(three_hosts_config(tmp_path, ("n2", "n3")), None).close()


def _signal_wrapper(handle: str) -> None:
    """Stop the attempt of ``handle`` (its wrapper forwards SIGTERM to the command)."""
    os.kill(_procfs.parse_handle(handle)[0], signal.SIGTERM)


def test_a_run_directory_gone_is_the_servers_trouble_not_a_missing_interpreter(
        tmp_path: Path) -> None:
    """With the executor's run directory gone, a launch raises ``LaunchDeferred`` naming
    it (the scheduler tries again later), not a refusal saying the wrapper's interpreter
    is missing (which ended the workload failed and sent the admin to debug Python); an
    interpreter that is missing is still a refusal naming it."""
    ex = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run")
    try:
        shutil.rmtree(tmp_path / "run")
        with pytest.raises(LaunchDeferred, match=re.escape(
                f"run directory {tmp_path / 'run'}: missing")):
            launch(ex, "true")
    finally:
        ex.close()
    gone = LocalExecutor([("h0", 8)], tmp_path / "logs2", tmp_path / "run2",
                         python="/nonexistent/python3")
    try:
        with pytest.raises(LaunchRefused, match="^wrapper /nonexistent/python3: No such file"):
            launch(gone, "true")
    finally:
        gone.close()


@pytest.mark.skipif(CgroupHost.detect() is None, reason="needs root and cgroups")
def test_pids_max_stops_a_job_forking_past_it_and_only_it(tmp_path: Path) -> None:
    """With ``pids_max = 16`` a job that starts processes until one fails gets EAGAIN
    after fewer than 16 (its processes and the wrapper's child count), its pids cgroup's
    ``pids.max`` reads 16, and it still exits on its own with every process ended; the
    server (this process) can still fork."""
    ex = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", db_id="yfpids",
                       pids_max=16)
    try:
        script = (
            "import errno, subprocess, sys\n"
            "cg = [l.split(':')[2] for l in open('/proc/self/cgroup').read().splitlines()\n"
            "      if l.split(':')[1] in ('pids', '')][0]\n"
            "root = '/sys/fs/cgroup/pids' if ':pids:' in open('/proc/self/cgroup').read() "
            "else '/sys/fs/cgroup/unified'\n"
            "print('max', open(root + cg + '/pids.max').read().strip())\n"
            "ps = []\n"
            "try:\n"
            "    for _ in range(100):\n"
            "        ps.append(subprocess.Popen(['sleep', '60']))\n"
            "except OSError as e:\n"
            "    print('refused after', len(ps), errno.errorcode[e.errno])\n"
            "sys.stdout.flush()\n"
        )
        h = ex.launch(Launch("w-000001", 1, [sys.executable, "-c", script],
                             (HostSlots("h0", (0,)),)))
        o = wait_for(ex, h)
        out = ex.log_path("w-000001", 1).read_text()
        assert (o.state, o.exit_code) == (AttemptState.EXITED, 0), out
        lines = out.splitlines()
        assert lines[0] == "max 16", out
        refused = lines[1].split()
        assert refused[:2] == ["refused", "after"] and int(refused[2]) < 16, out
        assert refused[3] == "EAGAIN", out
        assert subprocess.run(["true"]).returncode == 0
    finally:
        ex.close()


def test_a_job_sees_the_slurm_variables_a_batch_script_reads_to_know_its_job() -> None:
    """A local attempt's own variables include what a Slurm batch step gives and batch
    scripts read (``mkdir ckpt/$SLURM_JOB_ID``, ``cd $SLURM_SUBMIT_DIR``): ``SLURM_JOB_ID``
    and ``SLURM_JOBID`` (the workload id, as ``%j`` fills it), ``SLURM_JOB_NAME`` (its
    name), ``SLURM_SUBMIT_DIR`` (its working directory) and ``SLURM_GPUS_ON_NODE``; they
    win over the submitting shell's (exported from inside a Slurm job), and a workload
    without a name or working directory gets no empty ones."""
    exported = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "interactive",
                "APPORTION_JOB_NAME": "ddp-llama", "FOO": "bar"}
    slots = (HostSlots("h0", (1, 2, 3, 4)), HostSlots("h1", (0, 1)))
    first = Launch("w-000013", 2, ["true"], slots, env=exported, chdir="/home/alice/proj")
    own = own_env(first, [[1, 2, 3, 4], [8, 9]], "/logs/ckpt")
    assert {k: own[k] for k in own if k.startswith("SLURM_")} == {
        "SLURM_JOB_ID": "w-000013", "SLURM_JOBID": "w-000013", "SLURM_JOB_NAME": "ddp-llama",
        "SLURM_SUBMIT_DIR": "/home/alice/proj", "SLURM_GPUS_ON_NODE": "4"}
    assert own["CUDA_VISIBLE_DEVICES"] == "1,2,3,4"
    assert own["APPORTION_GPUS"] == "6"
    env = child_env(server_account(), exported, own)
    assert env["SLURM_JOB_ID"] == "w-000013" and env["FOO"] == "bar"
    bare = own_env(Launch("w-000014", 1, ["true"], (HostSlots("h0", (0,)),)), [[0]], "")
    assert "SLURM_JOB_NAME" not in bare and "SLURM_SUBMIT_DIR" not in bare
    assert bare["SLURM_JOB_ID"] == "w-000014" and bare["SLURM_GPUS_ON_NODE"] == "1"


def test_a_cgroup_removed_between_open_and_read_counts_as_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading ``cgroup.procs`` of a cgroup its wrapper removes at that moment fails with
    ENODEV (cgroup v1, a read after the rmdir): :func:`_cgroup.procs` counts it as empty, as
    one already gone, and still lists the processes of the others; any other error is
    raised."""
    import errno
    import io

    from apportion.service.executors import _cgroup

    removed, other = tmp_path / "removed", tmp_path / "other"
    for d in (removed, other):
        d.mkdir()
        (d / "cgroup.procs").write_text("12\n" if d == other else "34\n")
    real_open = open
    fail_with = errno.ENODEV

    class Gone(io.StringIO):
        def read(self, *_: object) -> str:
            raise OSError(fail_with, os.strerror(fail_with))

    def fake_open(path: str, *args: object, **kw: object) -> object:
        return Gone() if str(path).startswith(str(removed)) else real_open(path, *args, **kw)

    monkeypatch.setattr(_cgroup, "open", fake_open, raising=False)
    assert _cgroup.procs([str(removed), str(other)]) == {12}
    fail_with = errno.EIO
    with pytest.raises(OSError, match="Input/output error"):
        _cgroup.procs([str(removed), str(other)])


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_signal_reaches_the_batch_shell_alone_or_every_process_of_the_job(
    tmp_path: Path,
) -> None:
    """``signal(handle, USR1, batch=True)`` (``--signal=B:``) reaches the command's own
    process (the batch script's shell) and no other process of the job; with
    ``batch=False`` every process of the job gets it, the command's children too. The job
    runs on after either (both trap it), until it is stopped."""
    e = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", cgroups=None)
    h: str | None = None
    try:
        shell, child = tmp_path / "shell", tmp_path / "child"
        script = (f'trap "echo usr1 >> {child}" USR1; echo ready >> {child}; '
                  "while :; do sleep 0.05; done")
        h = launch(e, f'trap "echo usr1 >> {shell}" USR1; sh -c {shlex.quote(script)} & '
                      "while :; do sleep 0.05; done")
        wait_file(child)  # both traps are set
        e.signal(h, signal.SIGUSR1, True)
        deadline = time.monotonic() + DEADLINE_S
        while _lines(shell) != ["usr1"] and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # what else would get it, had it been sent to more than the shell
        assert (_lines(shell), _lines(child)) == (["usr1"], ["ready"])
        e.signal(h, signal.SIGUSR1, False)
        while ((_lines(shell), _lines(child)) != (["usr1", "usr1"], ["ready", "usr1"])
               and time.monotonic() < deadline):  # each shell runs its trap after its sleep
            time.sleep(0.02)
        assert (_lines(shell), _lines(child)) == (["usr1", "usr1"], ["ready", "usr1"])
        assert e.observe([h])[h].state is AttemptState.RUNNING
        e.stop(h, 0.0)
        assert wait_for(e, h).state is AttemptState.EXITED
        e.signal(h, signal.SIGUSR1, True)  # ended: nothing to reach, and no error
    finally:
        if h is not None:  # a failed check must not leave the endless job running
            e.stop(h, 0.0)
        e.close()


def test_signal_never_reaches_a_listed_pid_that_is_no_longer_below_the_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pid listed as the job's (its cgroup's, or below its wrapper) may be freed by the
    job and given to another account's process before the signal goes out: ``signal``
    (``--signal`` without ``B:``) sends it only to a process still below the attempt's
    wrapper, checked once the process is pinned, so a listed pid that is now a process
    outside the job (here: one the listing names, as a recycled pid would be) gets
    nothing, while the job's own processes still do."""
    e = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", cgroups=None)
    h: str | None = None
    heard, job = tmp_path / "stranger", tmp_path / "job"
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys, time\n"
         f"signal.signal(signal.SIGUSR1, lambda *a: open({str(heard)!r}, 'a').write('usr1'))\n"
         "print('ready', flush=True)\ntime.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert stranger.stdout is not None and stranger.stdout.readline() == "ready\n"
        h = launch(e, f'trap "echo usr1 >> {job}" USR1; echo ready >> {job}; '
                      "while :; do sleep 0.05; done")
        wait_file(job)
        listed = _procfs.descendants
        monkeypatch.setattr(_procfs, "descendants",
                            lambda pid: [*listed(pid), stranger.pid])
        e.signal(h, signal.SIGUSR1, False)
        deadline = time.monotonic() + DEADLINE_S
        while _lines(job) != ["ready", "usr1"] and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        assert _lines(job) == ["ready", "usr1"]
        assert not heard.exists() and stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
        if h is not None:
            e.stop(h, 0.0)
        e.close()


def test_a_signal_before_the_time_limit_reaches_a_real_job_that_runs_on_until_the_limit(
    tmp_path: Path,
) -> None:
    """A workload with a 5 s time limit and ``--signal=B:USR1@2``, run by the scheduler
    with the local executor (as the server's own account, passes every 0.1 s): its batch
    script, which traps USR1 and writes the time, hears it 2 s before the limit (3 s after
    its start, never before), keeps running after it (it writes on), and is stopped at its
    limit as ``timeout``, as without the signal."""
    from store_db import open_store

    from apportion.core import PolicyConfig, Status
    from apportion.service.clock import WallClock
    from apportion.service.scheduler import Scheduler

    store = open_store("sqlite", tmp_path)
    store.add_budget("ai/llm", 1.0, "admin", create_parents=True)
    store.add_host("h0", 8, "admin", at=time.time())
    e = LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", cgroups=None)
    sched = Scheduler(store, e, PolicyConfig(), WallClock(), grace_s=2.0)
    heard, ticks = tmp_path / "heard", tmp_path / "ticks"
    script = (f'trap \'date +%s.%N >> {heard}\' USR1; '
              f"while :; do date +%s.%N >> {ticks}; sleep 0.1; done")
    wid: str | None = None
    try:
        wid = store.add_workload(
            budget="ai/llm", gpus=1, min_runtime=0.0, submit_time=time.time(),
            command=["bash", "-c", script], actor="alice", time_limit=5.0,
            signal="B:USR1@2", chdir=str(tmp_path),
        ).id
        deadline = time.monotonic() + DEADLINE_S
        while store.get_workload(wid).status not in (Status.TIMEOUT, Status.FAILED,
                                                      Status.COMPLETED):
            assert time.monotonic() < deadline, store.get_workload(wid)
            sched.step()
            time.sleep(0.1)
        w = store.get_workload(wid)
        a = w.attempts[0]
        assert w.status is Status.TIMEOUT, w.end_reason
        assert a.signal_sent_at is not None and 3.0 <= a.signal_sent_at - a.started_at < 4.0
        times = [float(x) for x in _lines(heard)]
        assert len(times) == 1  # once
        assert 3.0 <= times[0] - a.started_at < 4.0
        assert any(float(t) > times[0] + 0.5 for t in _lines(ticks))  # it ran on
    finally:
        for att in store.get_workload(wid).attempts if wid is not None else []:
            if att.handle is not None:  # a failed check must not leave the endless job
                e.stop(att.handle, 0.0)
        e.close()
        store.close()


def _gone(pid: int) -> bool:
    fields = _procfs.stat_fields(pid)
    return fields is None or fields[0] in "ZXx"


def test_a_stops_kill_deadline_holds_while_the_server_is_down(tmp_path: Path) -> None:
    """A workload whose command ignores SIGTERM (and so does a child it started), run by
    the scheduler with the local executor (the server's own account, no cgroups), stopped
    at its 1 s time limit with a 2 s grace, the server then gone at once (its executor
    closed and dropped, as a crash leaves it: nobody sends the server's SIGKILL): every
    process of the job is killed at the stop's deadline by its wrapper (gone within the
    grace and 1 s), and the server restarted 2 s after that ends the attempt, and charges
    it, at the deadline (``stop_issued_at + grace_s``, within 1 s), not at the restart."""
    from store_db import open_store

    from apportion.core import PolicyConfig, Status
    from apportion.service.clock import WallClock
    from apportion.service.scheduler import Scheduler

    grace = 2.0
    store = open_store("sqlite", tmp_path)
    store.add_budget("ai/llm", 1.0, "admin", create_parents=True)
    store.add_host("h0", 8, "admin", at=time.time())
    pids = tmp_path / "pids"
    script = f"trap '' TERM; sleep 300 & echo $$ $! > {pids}; while :; do sleep 0.05; done"
    wid = store.add_workload(
        budget="ai/llm", gpus=1, min_runtime=0.0, submit_time=time.time(),
        command=["sh", "-c", script], actor="alice", time_limit=1.0, chdir=str(tmp_path),
    ).id

    def executor() -> LocalExecutor:
        return LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run", cgroups=None)

    e = executor()
    sched = Scheduler(store, e, PolicyConfig(), WallClock(), grace_s=grace)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not any(x.stop_issued_at for x in store.get_workload(wid).attempts):
            assert time.monotonic() < deadline, store.get_workload(wid)
            sched.step()
            time.sleep(0.05)
    finally:
        e.close()  # the server is gone: its timer with it
    del sched, e
    a = store.get_workload(wid).attempts[0]
    assert a.stop_issued_at is not None
    kill_at = a.stop_issued_at + grace
    job = [int(p) for p in wait_file(pids).split()]
    try:
        assert not any(_gone(p) for p in job)  # SIGTERM ignored, within the grace
        while not all(_gone(p) for p in job):
            assert time.time() < kill_at + 1.0, "the job outlived its stop's deadline"
            time.sleep(0.02)
        assert time.time() >= kill_at - 0.1  # not before its grace ended
    finally:  # failing, leave nothing running
        for p in job:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    time.sleep(2.0)  # the outage goes on after the deadline
    e = executor()
    sched = Scheduler(store, e, PolicyConfig(), WallClock(), grace_s=grace)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while store.get_workload(wid).status is not Status.TIMEOUT:
            assert time.monotonic() < deadline, store.get_workload(wid)
            sched.step()
            time.sleep(0.05)
    finally:
        e.close()
        store.close()
    a = store.get_workload(wid).attempts[0]
    assert a.ended_at is not None and a.gpu_seconds is not None
    assert kill_at <= a.ended_at < kill_at + 1.0
    assert a.gpu_seconds == pytest.approx(a.ended_at - a.started_at)


@pytest.mark.parametrize("cgroups", ["auto", None])
def test_a_stop_sent_again_never_puts_the_wrappers_kill_later(
    tmp_path: Path, cgroups: str | None
) -> None:
    """A stop with a 2 s grace, then the same stop sent again by a restarted server's
    executor with a 30 s grace, both executors closed at once (no server kill): the
    command, which ignores SIGTERM, is killed by its wrapper at the first stop's deadline
    (its exit record written within 1 s of it, dated there, and marked SIGKILL), with the
    host's cgroups (as the other tests here, when root) and without."""
    def executor() -> LocalExecutor:
        return LocalExecutor([("h0", 8)], tmp_path / "logs", tmp_path / "run",
                             cgroups=cgroups)

    old = executor()
    ready = tmp_path / "ready"
    h = launch(old, f"trap '' TERM; touch {ready}; while true; do sleep 0.05; done")
    wait_file_exists(ready)
    kill_at = time.time() + 2.0
    old.stop(h, grace_s=2.0)
    old.close()
    new = executor()
    new.stop(h, grace_s=30.0)
    new.close()
    exit_file = tmp_path / "run" / "w-000001.1.exit"
    try:
        while not exit_file.exists():
            assert time.time() < kill_at + 1.0, "not killed at the first stop's deadline"
            time.sleep(0.02)
    finally:  # failing, leave nothing running
        executor().stop(h, grace_s=0)
    ex = _procfs.read_json(exit_file)
    assert ex is not None and ex["exit_code"] == -signal.SIGKILL
    assert kill_at - 0.1 <= ex["ended_at"] < kill_at + 1.0


def test_a_full_logs_file_system_is_said_once_in_the_servers_log_and_its_end_too(
        ex: LocalExecutor, caplog: pytest.LogCaptureFixture) -> None:
    """Exit records that say the logs' file system was full when the job ended (the
    wrapper's ``log_full``) are said in the server's log once, as a warning naming the
    logs directory, the first such attempt and what it costs (before, only the attempt's
    end reason said it, to an owner who can free nothing there); a job ending with room
    there again is said once at INFO, and a full file system after that is said again.
    Nothing is launched: the records are handed to the executor as its poll reads them."""
    for n, stem in enumerate(("w-000003.1", "w-000004.2", "w-000005.1", "w-000006.1")):
        ex._index[f"{100 + n}:1"] = stem
    record = {"exit_code": 0, "ended_at": 1.0}
    with caplog.at_level("INFO", logger="apportion.executor.local"):
        for n, full in enumerate((True, True, False, True)):
            assert ex._exited(f"{100 + n}:1", {**record, "log_full": full}).log_note == (
                LOG_FULL if full else None)
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    full_line = ("logs directory {}: its file system is full ({} ended with its log cut "
                 "short): every job writing there loses output until space is freed there")
    assert said == [
        ("WARNING", full_line.format(ex.logs_dir, "w-000003 attempt 1")),
        ("INFO", f"logs directory {ex.logs_dir}: its file system had room again when a job "
                 "ended"),
        ("WARNING", full_line.format(ex.logs_dir, "w-000006 attempt 1")),
    ]


def test_a_command_on_no_directory_of_path_is_not_found_though_one_cannot_be_searched(
    tmp_path: Path,
) -> None:
    """A bare command name whose search failed with EACCES (``execvpe`` prefers it to
    ENOENT: a directory of the exported PATH the job's account may not search, as root's
    ``/root/.cargo/bin`` for a researcher's account) is refused as ``command not found``
    when no directory of PATH holds a file of that name (it was ``permission denied``,
    for a command that exists nowhere); a file of that name it may not run is still
    ``permission denied``."""
    import errno

    empty, holding = tmp_path / "empty", tmp_path / "holding"
    empty.mkdir()
    holding.mkdir()
    (holding / "script").write_text("#!/bin/sh\n")  # there, but not executable
    denied = OSError(errno.EACCES, "Permission denied")
    path = {"PATH": f"{empty}:{holding}"}
    missing = {"argv": ["apportion-no-such-command"], "env": path}
    there = {"argv": ["script"], "env": path}
    assert _wrapper._reason("exec", denied, missing) == \
        "command not found: apportion-no-such-command"
    assert _wrapper._reason("exec", denied, there) == "permission denied: script"
