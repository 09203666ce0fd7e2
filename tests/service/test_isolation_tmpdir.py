"""Each attempt's private TMPDIR under the local executor, as root with real Unix accounts
and cgroups: made by the server for the job's account alone, removed with all in it when
the attempt ends however it ends, never following what the job left there. Run under
``flock /tmp/apportion-accounts.lock``."""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_isolation import DEADLINE_S, log_of, wait_end
from test_isolation import launch as _launch
from test_isolation import make_executor as _make_executor

from apportion.cli.jobs import read_script
from apportion.cli.serve import build_executor
from apportion.service.config import ConfigError, parse_config
from apportion.service.executor import AttemptState
from apportion.service.executors import _cgroup, _procfs
from apportion.service.executors.identity import Identity
from apportion.service.executors.local import LocalExecutor, UnsafeTmpDir
from harness.accounts import UnixAccounts

SHOW = 'echo "tmp=$TMPDIR"; stat -c "%u %a" "$TMPDIR"'


@pytest.fixture
def exs(shared: Path) -> Iterator[list[LocalExecutor]]:
    """The executors a test makes (``exs.append``); every attempt of theirs still running at
    the end is stopped, so a failed test leaves no process of the accounts behind."""
    made: list[LocalExecutor] = []
    yield made
    for e in made:
        for h in list(e._index):
            if _procfs.alive(h):
                e.stop(h, 0)
                wait_end(e, h)


def launch(ex: LocalExecutor, who: str, command: list[str], env: dict[str, str] | None = None,
           wid: str = "w-000001") -> str:
    """Launch ``command`` as ``who`` in "/" (the test accounts have no home directory)."""
    return _launch(ex, who, command, chdir="/", env=env, wid=wid)


def make_executor(shared: Path, exs: list[LocalExecutor]) -> LocalExecutor:
    e = _make_executor(shared)
    exs.append(e)
    return e


def wait_file(path: Path, ex: LocalExecutor, wid: str = "w-000001") -> str:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists() or not path.read_text().endswith("\n"):
        assert time.monotonic() < deadline, log_of(ex, wid)
        time.sleep(0.02)
    return path.read_text()


def drop(shared: Path) -> Path:
    """A directory every account may write (the jobs tell the test things there)."""
    d = shared / "drop"
    d.mkdir(exist_ok=True)
    os.chmod(d, 0o1777)
    return d


def test_jobs_of_two_users_each_get_their_own_tmpdir_the_other_cannot_read(
    accounts: UnixAccounts, shared: Path, exs: list[LocalExecutor]
) -> None:
    """alice's and bob's jobs, running at once, each see a TMPDIR of their own: made by the
    server in its own directory (0711), owned by the job's account, mode 0700, and not the
    one the submitter exported. bob's job writes a file there with a careless umask (000);
    alice's job can neither list his TMPDIR nor read the file (Permission denied)."""
    ex = make_executor(shared, exs)
    d = drop(shared)
    a, b = accounts.alice, accounts.bob
    hb = launch(ex, b.name, ["sh", "-c",
                             f'{SHOW}; umask 000; echo secret > "$TMPDIR/s"; '
                             f'echo "$TMPDIR" > {d}/bob; while [ ! -e {d}/done ]; do sleep '
                             "0.05; done"], env={"TMPDIR": "/tmp"}, wid="w-000002")
    bob_tmp = wait_file(d / "bob", ex, "w-000002").strip()
    ha = launch(ex, a.name, ["sh", "-c", f'{SHOW}; ls "{bob_tmp}"; cat "{bob_tmp}/s"; '
                             f"touch {d}/done"], env={"TMPDIR": "/tmp"})
    assert wait_end(ex, ha).exit_code == 0  # its last command, the touch
    assert wait_end(ex, hb).exit_code == 0
    alice_log, bob_log = log_of(ex).splitlines(), log_of(ex, "w-000002").splitlines()
    assert ex.tmp_dir is not None
    assert alice_log[:2] == [f"tmp={ex.tmp_dir}/w-000001.1", f"{a.uid} 700"]
    assert bob_log[:2] == [f"tmp={ex.tmp_dir}/w-000002.1", f"{b.uid} 700"]
    assert bob_tmp == f"{ex.tmp_dir}/w-000002.1"
    assert "secret" not in "\n".join(alice_log)
    assert sum("Permission denied" in line for line in alice_log[2:]) == 2, alice_log
    st = os.lstat(ex.tmp_dir)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o711)


@pytest.mark.parametrize("how", ["exits", "fails", "stopped", "stopped-at-once"])
def test_the_tmpdir_and_the_batch_scripts_copy_in_it_are_gone_when_the_attempt_ends(
    accounts: UnixAccounts, shared: Path, exs: list[LocalExecutor], how: str, tmp_path: Path
) -> None:
    """A batch script (run as `apportion submit` runs one: a private copy of its text) finds
    its copy in its TMPDIR and writes files and directories there; when it exits, fails,
    or is stopped (cancel, preemption: with a grace period, or at once), the TMPDIR is gone
    with all in it, and no copy of the script is left in /tmp."""
    ex = make_executor(shared, exs)
    d = drop(shared)
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/sh\necho "copy=$0"; mkdir -p "$TMPDIR/a/b"; '
                      'echo x > "$TMPDIR/a/b/f"; chmod 000 "$TMPDIR/a"; '
                      f"touch {d}/started; "
                      + {"exits": "exit 0", "fails": "exit 3",
                         "stopped": "sleep 300", "stopped-at-once": "sleep 300"}[how] + "\n")
    uid = accounts.alice.uid
    before = {p for p in Path("/tmp").glob("apportion.*") if p.lstat().st_uid == uid}
    h = launch(ex, accounts.alice.name, read_script(str(script), []).command)
    assert ex.tmp_dir is not None
    tmp = ex.tmp_dir / "w-000001.1"
    if how.startswith("stopped"):
        deadline = time.monotonic() + DEADLINE_S
        while not (d / "started").exists():
            assert time.monotonic() < deadline, log_of(ex)
            time.sleep(0.02)
        assert tmp.is_dir()
        ex.stop(h, 1.0 if how == "stopped" else 0.0)
    o = wait_end(ex, h)
    assert o.state is AttemptState.EXITED
    first = log_of(ex).splitlines()[0]
    assert first.startswith(f"copy={tmp}/apportion.") and first.endswith("/job.sh"), first
    assert not tmp.exists() and not os.path.lexists(tmp)
    assert {p for p in Path("/tmp").glob("apportion.*") if p.lstat().st_uid == uid} == before


def test_a_restart_removes_the_tmpdirs_of_attempts_that_ended_meanwhile_never_a_running_ones(
    accounts: UnixAccounts, shared: Path, exs: list[LocalExecutor]
) -> None:
    """With the server down (its executor closed), one attempt ends by itself, and another's
    wrapper and job are killed (SIGKILL: nothing of theirs can clean up). The executor of
    the restarted server, at its start, has removed both TMPDIRs, while the TMPDIR of a
    third attempt that still runs is kept, and that job goes on writing there; once it
    ends, its TMPDIR is gone too."""
    ex = make_executor(shared, exs)
    d = drop(shared)
    a = accounts.alice
    wait = "while [ ! -e {go} ]; do sleep 0.05; done"
    runs = launch(ex, a.name, ["sh", "-c", f'touch "$TMPDIR/f"; touch {d}/r1; '
                               + wait.format(go=d / "go-runs")
                               + f'; echo still > "$TMPDIR/f" && cat "$TMPDIR/f" > {d}/r2'],
                  wid="w-000001")
    ends = launch(ex, a.name, ["sh", "-c", f'touch "$TMPDIR/f"; touch {d}/e1; '
                               + wait.format(go=d / "go-ends")], wid="w-000002")
    killed = launch(ex, a.name, ["sh", "-c", f'touch "$TMPDIR/f"; touch {d}/k1; sleep 300'],
                    wid="w-000003")
    for name, wid in (("r1", "w-000001"), ("e1", "w-000002"), ("k1", "w-000003")):
        deadline = time.monotonic() + DEADLINE_S
        while not (d / name).exists():
            assert time.monotonic() < deadline, log_of(ex, wid)
            time.sleep(0.02)
    assert ex.tmp_dir is not None
    tmps = {w: ex.tmp_dir / f"{w}.1" for w in ("w-000001", "w-000002", "w-000003")}
    assert all(t.is_dir() for t in tmps.values())
    ex.close()  # the server is down from here

    (d / "go-ends").touch()  # ends by itself: its wrapper writes the exit record
    deadline = time.monotonic() + DEADLINE_S
    while (ex.run_dir / "w-000002.1.exit").exists() is False:
        assert time.monotonic() < deadline, log_of(ex, "w-000002")
        time.sleep(0.02)
    info = _procfs.read_json(ex.run_dir / "w-000003.1.run")
    assert info is not None
    os.kill(_procfs.parse_handle(killed)[0], signal.SIGKILL)  # the wrapper first
    cgroups = [str(c) for c in info.get("cgroups") or []]
    deadline = time.monotonic() + DEADLINE_S
    while _procfs.alive(killed) or cgroups and _cgroup.procs(cgroups):
        assert time.monotonic() < deadline
        _cgroup.kill(cgroups)
        time.sleep(0.02)
    assert tmps["w-000003"].is_dir()  # nothing of the attempt could remove it

    again = make_executor(shared, exs)  # the server restarted
    assert not os.path.lexists(tmps["w-000002"]) and not os.path.lexists(tmps["w-000003"])
    assert tmps["w-000001"].is_dir() and (tmps["w-000001"] / "f").exists()
    (d / "go-runs").touch()
    o = wait_end(again, runs)
    assert (o.state, o.exit_code) == (AttemptState.EXITED, 0), log_of(again)
    assert (d / "r2").read_text() == "still\n"
    assert not os.path.lexists(tmps["w-000001"])
    assert again.observe([ends])[ends].exit_code == 0
    assert again.observe([killed])[killed].state is AttemptState.GONE


def test_the_cleanup_never_follows_links_the_job_left(
    accounts: UnixAccounts, shared: Path, exs: list[LocalExecutor]
) -> None:
    """A job leaves in its TMPDIR links to a file of the server's, to a directory of the
    server's, and a link in place of a subdirectory: the TMPDIR is removed, links and
    all, and the server's file and directory, and what is in it, are untouched."""
    ex = make_executor(shared, exs)
    secret = shared / "server-file"
    secret.write_text("keep\n")
    sdir = shared / "server-dir"
    sdir.mkdir()
    (sdir / "inside").write_text("keep too\n")
    h = launch(ex, accounts.alice.name, ["sh", "-c",
               f'ln -s {secret} "$TMPDIR/file"; ln -s {sdir} "$TMPDIR/dir"; '
               f'mkdir "$TMPDIR/sub"; ln -s {sdir} "$TMPDIR/sub/d"; '
               'ls -l "$TMPDIR"'])
    assert wait_end(ex, h).exit_code == 0, log_of(ex)
    assert " -> " in log_of(ex)
    assert ex.tmp_dir is not None and not os.path.lexists(ex.tmp_dir / "w-000001.1")
    assert secret.read_text() == "keep\n"
    assert (sdir / "inside").read_text() == "keep too\n"


def test_what_cannot_be_removed_is_reported_and_the_attempt_still_ends(
    accounts: UnixAccounts, shared: Path, exs: list[LocalExecutor],
    caplog: pytest.LogCaptureFixture
) -> None:
    """A file in a job's TMPDIR made immutable (``chattr +i``, which root can do) cannot be
    removed: the attempt ends all the same, with its real exit code, the log of the attempt
    and the server's log say what was left, and everything else in it is removed."""
    ex = make_executor(shared, exs)
    d = drop(shared)
    h = launch(ex, accounts.alice.name, ["sh", "-c",
               f'echo x > "$TMPDIR/stuck"; echo y > "$TMPDIR/other"; echo "$TMPDIR" > {d}/t; '
               f"while [ ! -e {d}/go ]; do sleep 0.05; done; exit 4"])
    tmp = Path(wait_file(d / "t", ex).strip())
    subprocess.run(["chattr", "+i", str(tmp / "stuck")], check=True)
    try:
        (d / "go").touch()
        with caplog.at_level(logging.WARNING, "apportion.executor.local"):
            o = wait_end(ex, h)
        assert (o.state, o.exit_code) == (AttemptState.EXITED, 4)
        assert "the private TMPDIR was not removed whole" in log_of(ex)
        assert "stuck" in log_of(ex) and "Operation not permitted" in log_of(ex)
        assert any("private TMPDIR" in r.getMessage() and "stuck" in r.getMessage()
                   for r in caplog.records)
        assert sorted(os.listdir(tmp)) == ["stuck"]
    finally:
        subprocess.run(["chattr", "-i", str(tmp / "stuck")], check=False)


def test_the_tmpdirs_parent_is_the_servers_alone_and_what_is_in_the_way_is_not_used(
    accounts: UnixAccounts, shared: Path, exs: list[LocalExecutor]
) -> None:
    """The TMPDIRs' directory is the server's, 0711: bob's job cannot make a directory there
    at the name alice's next attempt will get (Permission denied). What is at that name
    anyway (only root could put it there: a directory of bob's with a link to a file of
    the server's, or a link to the server's directory) is removed, never followed, and
    alice's job gets a fresh directory of her own, 0700."""
    ex = make_executor(shared, exs)
    assert ex.tmp_dir is not None
    b, a = accounts.bob, accounts.alice
    hb = launch(ex, b.name, ["sh", "-c", f"mkdir {ex.tmp_dir}/w-000001.1"], wid="w-000009")
    assert wait_end(ex, hb).exit_code != 0
    assert "Permission denied" in log_of(ex, "w-000009")
    assert not os.path.lexists(ex.tmp_dir / "w-000001.1")

    secret = shared / "server-file"
    secret.write_text("keep\n")
    sdir = shared / "server-dir"
    sdir.mkdir()
    (sdir / "inside").write_text("keep too\n")
    for wid, put in (("w-000001", "dir"), ("w-000002", "link")):
        there = ex.tmp_dir / f"{wid}.1"
        if put == "dir":
            there.mkdir()
            (there / "f").symlink_to(secret)
            os.lchown(there / "f", b.uid, b.gid)
            os.chown(there, b.uid, b.gid)
        else:
            there.symlink_to(sdir)
        h = launch(ex, a.name, ["sh", "-c", f'{SHOW}; ls -A "$TMPDIR"'], wid=wid)
        assert wait_end(ex, h).exit_code == 0, log_of(ex, wid)
        assert log_of(ex, wid).splitlines() == [f"tmp={there}", f"{a.uid} 700"]
    assert secret.read_text() == "keep\n"
    assert sorted(os.listdir(sdir)) == ["inside"]


@pytest.mark.parametrize("case", ["bob's", "world-writable", "bob's link", "uncrossable"])
def test_a_tmp_dir_another_account_could_change_is_refused(
    accounts: UnixAccounts, shared: Path, case: str
) -> None:
    """``[executor.local] tmp_dir`` owned by bob, in a world-writable directory that is not
    sticky, reached through a link of bob's, or under a directory the jobs' accounts cannot
    cross is refused at start, naming the directory and the config key."""
    b = accounts.bob
    os.chmod(shared, 0o755)
    data = shared / "data"
    target = shared / "t"
    if case == "bob's":
        target.mkdir()
        os.chown(target, b.uid, b.gid)
    elif case == "world-writable":
        (shared / "open").mkdir()
        os.chmod(shared / "open", 0o777)
        target = shared / "open" / "t"
    elif case == "bob's link":
        (shared / "real").mkdir()
        target.symlink_to(shared / "real")
        os.lchown(target, b.uid, b.gid)
    else:
        (shared / "closed").mkdir(mode=0o700)
        target = shared / "closed" / "t"
    with pytest.raises(UnsafeTmpDir, match=str(target) if case != "bob's link" else "link"):
        LocalExecutor([("h0", 8)], data / "logs", data / "run", db_id="t",
                      identity=Identity(), tmp_dir=target)
    config = parse_config({"server": {"data_dir": str(data)},
                           "executor": {"local": {"tmp_dir": str(target)}},
                           "hosts": [{"name": "h0", "gpus": 8}]}, source="apportion.toml")
    with pytest.raises(ConfigError, match="apportion.toml: executor.local.tmp_dir: "):
        build_executor(config, None, db_id="t")


def test_without_accounts_the_job_keeps_the_exported_tmpdir(
    shared: Path, exs: list[LocalExecutor]
) -> None:
    """In single-user mode (no accounts switched to) nothing changes: the TMPDIR the owner
    exported is passed on, and no directory for TMPDIRs is made."""
    data = shared / "data"
    data.mkdir()
    ex = LocalExecutor([("h0", 8)], data / "logs", data / "run", db_id="t",
                       identity=Identity(single_user=True))
    exs.append(ex)
    h = launch(ex, "root", ["sh", "-c", 'echo "$TMPDIR"'], env={"TMPDIR": "/var/tmp"})
    assert wait_end(ex, h).exit_code == 0
    assert log_of(ex) == "/var/tmp\n"
    assert ex.tmp_dir is None and not (data / "tmp").exists()


def test_the_config_names_the_tmp_dir_relative_to_its_file(tmp_path: Path) -> None:
    """``[executor.local] tmp_dir`` is read relative to the config file's directory;
    unset, it is None (the executor's default: ``<data_dir>/tmp``)."""
    c = parse_config({"executor": {"local": {"tmp_dir": "scratch/jobs"}}}, base_dir=tmp_path)
    assert c.executor.tmp_dir == tmp_path / "scratch/jobs"
    assert parse_config({}, base_dir=tmp_path).executor.tmp_dir is None
