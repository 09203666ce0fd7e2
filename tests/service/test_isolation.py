"""The local executor as root: each job runs as its owner's real Unix account, in its own
cgroup, with only the environment its owner exported (accounts made by the test setup)."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from apportion.service.executor import (
    AttemptState,
    HostSlots,
    Launch,
    LaunchRefused,
    Observation,
)
from apportion.service.executors import _procfs
from apportion.service.executors._cgroup import CgroupHost
from apportion.service.executors.identity import Identity
from apportion.service.executors.local import LocalExecutor
from harness.accounts import UnixAccounts

DEADLINE_S = 30.0  # bounds a hang only
OPEN = "/usr/bin/python3"  # opens files for the job and prints the errno's name
SERVER_VARS_ALLOWED = {"HOME", "USER", "LOGNAME", "SHELL", "PATH", "PWD", "CUDA_VISIBLE_DEVICES",
                       "APPORTION_CHECKPOINT_FILE",
                       "APPORTION_WORKLOAD_ID", "APPORTION_ATTEMPT", "APPORTION_GPUS",
                       "APPORTION_HOSTS", "TMPDIR", "SLURM_JOB_ID", "SLURM_JOBID",
                       "SLURM_GPUS_ON_NODE", "SLURM_SUBMIT_DIR"}


def make_executor(shared: Path, cgroups: CgroupHost | str | None = "auto") -> LocalExecutor:
    data = shared / "data"
    data.mkdir(exist_ok=True)
    os.chmod(data, 0o711)  # as serve makes it: jobs cross it to their logs and TMPDIR
    return LocalExecutor([("h0", 8)], data / "logs", data / "run", db_id="t",
                         identity=Identity(), cgroups=cgroups)


def launch(ex: LocalExecutor, who: str, command: list[str], chdir: str | None = None,
           env: dict[str, str] | None = None, gpus: tuple[int, ...] = (0,),
           wid: str = "w-000001") -> str:
    return ex.launch(Launch(wid, 1, command, (HostSlots("h0", gpus),), env=env, user=who,
                            account=who, chdir=chdir))


def wait_end(ex: LocalExecutor, handle: str) -> Observation:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        o = ex.observe([handle])[handle]
        if o.state is not AttemptState.RUNNING:
            return o
        time.sleep(0.05)
    raise AssertionError(f"{handle}: still running after {DEADLINE_S} s")


def log_of(ex: LocalExecutor, wid: str = "w-000001") -> str:
    return ex.log_path(wid, 1).read_text()


def test_job_runs_as_its_owner_in_its_directory_with_only_its_exported_env(
    accounts: UnixAccounts, alice_dir: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alice's job has alice's uid, gid and supplementary groups, runs in the directory she
    chose, and sees what she exported plus apportion's own variables (which win over hers),
    and nothing of the server's environment (a secret set there is absent). Its log file
    is hers, readable by her only."""
    monkeypatch.setenv("APPORTION_TEST_SERVER_SECRET", "hunter2")
    ex = make_executor(shared)
    a = accounts.alice
    h = launch(ex, a.name, ["sh", "-c", "id -u; id -g; id -G; pwd; env"], chdir=str(alice_dir),
               env={"FOO": "from alice", "CUDA_VISIBLE_DEVICES": "7", "APPORTION_GPUS": "99"},
               gpus=(2, 3))
    o = wait_end(ex, h)
    assert (o.state, o.exit_code, o.refused) == (AttemptState.EXITED, 0, None)
    uid, gid, groups, cwd, *env_lines = log_of(ex).splitlines()
    assert (int(uid), int(gid)) == (a.uid, a.gid)
    assert sorted(int(g) for g in groups.split()) == sorted(set(a.groups))
    assert accounts.gid in {int(g) for g in groups.split()}
    assert cwd == str(alice_dir)
    env = dict(line.split("=", 1) for line in env_lines)
    assert "APPORTION_TEST_SERVER_SECRET" not in env and "hunter2" not in log_of(ex)
    assert env["FOO"] == "from alice"
    assert (env["CUDA_VISIBLE_DEVICES"], env["APPORTION_GPUS"]) == ("2,3", "2")
    assert (env["USER"], env["LOGNAME"], env["HOME"]) == (a.name, a.name, a.home)
    assert set(env) - {"FOO"} <= SERVER_VARS_ALLOWED
    st = ex.log_path("w-000001", 1).stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (a.uid, 0o600)


def test_export_none_gives_only_the_accounts_basics(
    accounts: UnixAccounts, alice_dir: Path, shared: Path
) -> None:
    """With nothing exported (``--export=NONE``) the job gets HOME, USER, LOGNAME, SHELL and
    PATH of its account and apportion's variables, nothing else."""
    ex = make_executor(shared)
    h = launch(ex, accounts.alice.name, ["env"], chdir=str(alice_dir), env=None)
    assert wait_end(ex, h).exit_code == 0
    env = dict(line.split("=", 1) for line in log_of(ex).splitlines())
    assert set(env) == SERVER_VARS_ALLOWED - {"PWD"}
    assert env["SHELL"] == "/bin/sh" and env["PATH"] == "/usr/local/bin:/usr/bin:/bin"


@pytest.mark.parametrize(("case", "reason"), [
    ("dir", "chdir {d}: Permission denied"),
    ("missing", "command not found: apportion-no-such-command"),
    ("not-executable", "permission denied: {d}/script"),
])
def test_what_the_owner_cannot_do_ends_the_attempt_with_the_reason(
    accounts: UnixAccounts, alice_dir: Path, shared: Path, case: str, reason: str
) -> None:
    """A directory alice may not enter, a command that does not exist, or a file she may
    not execute ends the attempt at once with the reason (``refused``), nothing started."""
    private = shared / "root-only"
    private.mkdir(mode=0o700)
    (private / "script").write_text("#!/bin/sh\necho ran\n")
    os.chmod(private / "script", 0o700)
    (alice_dir / "script").write_text("#!/bin/sh\necho ran\n")  # hers, but not executable
    os.chown(alice_dir / "script", accounts.alice.uid, accounts.alice.gid)
    ex = make_executor(shared)
    command, chdir = {
        "dir": (["true"], str(private)),
        "missing": (["apportion-no-such-command"], str(alice_dir)),
        "not-executable": ([str(alice_dir / "script")], str(alice_dir)),
    }[case]
    o = wait_end(ex, launch(ex, accounts.alice.name, command, chdir=chdir))
    d = private if case == "dir" else alice_dir
    assert o.state is AttemptState.EXITED and o.refused == reason.format(d=d)
    assert "ran" not in log_of(ex)


CGROUPS = {
    "v1": "auto",  # these machines mount cgroup v1
    "v2": CgroupHost(2, Path("/sys/fs/cgroup/unified")),  # the v2 hierarchy mounted beside it
    "none": None,  # process groups and the wrapper as subreaper only
}


def _alive(pid: int) -> bool:
    f = _procfs.stat_fields(pid)
    return f is not None and f[0] not in ("Z", "X", "x")


@pytest.mark.parametrize("cgroups", list(CGROUPS))
@pytest.mark.parametrize("how", ["ends", "stopped", "stopped-at-once"])
def test_every_process_of_the_job_ends_with_it(
    accounts: UnixAccounts, alice_dir: Path, shared: Path, how: str, cgroups: str
) -> None:
    """A double-forked child and a ``setsid`` one, both ignoring SIGTERM, are killed when
    the job ends by itself, is stopped at once, or is stopped with a grace period (the
    command ignoring the TERM too: the job is seen running through the grace, then killed);
    and never, at any observation, is the attempt reported ended (its GPUs free) while
    either lives."""
    assert cgroups == "none" or CgroupHost.detect() is not None, "cgroups not mounted here"
    ex = make_executor(shared, CGROUPS[cgroups])
    p1, p2, ready = alice_dir / "p1", alice_dir / "p2", alice_dir / "ready"
    script = (
        f"(setsid sh -c 'trap \"\" TERM; echo $$ > {p1}; exec sleep 300' &); "
        f"(sh -c 'trap \"\" TERM; echo $$ > {p2}; exec sleep 300' &); "
        f"while [ ! -s {p1} ] || [ ! -s {p2} ]; do sleep 0.05; done; touch {ready}; "
        # stopped with a grace period, the command ignores the TERM too, so the whole job
        # lives through the grace (were the command to end on the TERM, its wrapper would
        # kill the others at once, and whether an observation came first would be a race)
        + {"ends": "exit 0", "stopped": "trap '' TERM; sleep 300 & wait",
           "stopped-at-once": "sleep 300 & wait"}[how]
    )
    h = launch(ex, accounts.alice.name, ["sh", "-c", script], chdir=str(alice_dir))
    deadline = time.monotonic() + DEADLINE_S
    while not ready.exists():
        assert time.monotonic() < deadline, log_of(ex)
        time.sleep(0.05)
    pids = [int(p1.read_text()), int(p2.read_text())]
    if how != "ends":
        ex.stop(h, grace_s=1.0 if how == "stopped" else 0.0)
    seen_running_with_survivors = False
    while True:
        assert time.monotonic() < deadline, f"not ended; alive: {[p for p in pids if _alive(p)]}"
        o = ex.observe([h])[h]
        if o.state is not AttemptState.RUNNING:
            assert not [p for p in pids if _alive(p)], "reported ended while its processes live"
            break
        seen_running_with_survivors |= any(_alive(p) for p in pids)
        time.sleep(0.02)
    if how == "stopped":  # they ignored the TERM: they lived through the grace period
        assert seen_running_with_survivors
    assert o.signalled == (how != "ends")
    if cgroups != "none":  # and its cgroup is gone with it
        assert not (Path(CGROUP_DIRS[cgroups]) / "t-w-000001.1").exists()


CGROUP_DIRS = {"v1": "/sys/fs/cgroup/pids/apportion", "v2": "/sys/fs/cgroup/unified/apportion"}


@pytest.mark.parametrize("recorded", [True, False], ids=["pgid-recorded", "pgid-not-yet"])
@pytest.mark.parametrize("cgroups", list(CGROUPS))
def test_a_kill_after_the_job_ended_leaves_its_wrapper_to_write_the_exit_record(
    accounts: UnixAccounts, alice_dir: Path, shared: Path, cgroups: str, recorded: bool
) -> None:
    """A stop that finds every process of the job already ended, while its wrapper has not
    yet written the exit record (the wrapper is held stopped to keep that moment open, as a
    loaded machine or the grace timer racing an observation does), does not kill the
    wrapper: once it runs on, the attempt is reported ended, by the signal that killed it,
    never gone without a record. ``pgid-not-yet``: the same moment one step earlier, when
    the command has started and ended before the wrapper recorded its process group in the
    run file (the file is put back as it was before that write). The wrapper is held only
    once its command runs and it has recorded the command's group (its last write of the
    run file: held in the middle of it, it would finish it after the test's), and only
    once it is really stopped."""
    assert cgroups == "none" or CgroupHost.detect() is not None, "cgroups not mounted here"
    ex = make_executor(shared, CGROUPS[cgroups])
    h = launch(ex, accounts.alice.name, ["sleep", "300"], chdir=str(alice_dir))
    wrapper = _procfs.parse_handle(h)[0]
    deadline = time.monotonic() + DEADLINE_S

    def the_sleep() -> int | None:
        for pid in _procfs.descendants(wrapper):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                    return pid
        return None

    def recorded_group() -> Path | None:
        for p in ex.run_dir.glob("*.run"):
            claim = _procfs.read_json(p) or {}
            if claim.get("handle") == h and claim.get("child_pgid") is not None:
                return p
        return None

    while True:
        job, run_file = the_sleep(), recorded_group()
        if job is not None and run_file is not None:
            break
        assert time.monotonic() < deadline, log_of(ex)
        time.sleep(0.02)
    os.kill(wrapper, signal.SIGSTOP)
    try:
        while (f := _procfs.stat_fields(wrapper)) is not None and f[0] not in "tT":
            assert time.monotonic() < deadline, f"the wrapper never stopped: {f[0]}"
            time.sleep(0.005)
        if not recorded:
            claim = _procfs.read_json(run_file)
            assert claim is not None and claim["child_pgid"] is not None
            _procfs.write_json_atomic(run_file, {**claim, "child_pgid": None})
        os.kill(job, signal.SIGKILL)
        while (f := _procfs.stat_fields(job)) is not None and f[0] != "Z":
            assert time.monotonic() < deadline, f"{job} not ended: {f[0]}"
            time.sleep(0.02)
        ex.stop(h, grace_s=0.0)
        assert _procfs.alive(h), "the stop killed the wrapper before it wrote the exit record"
    finally:
        os.kill(wrapper, signal.SIGCONT)
    o = wait_end(ex, h)
    assert (o.state, o.exit_code, o.signalled) == (AttemptState.EXITED, -signal.SIGKILL, True)


def test_gpu_device_nodes_not_given_cannot_be_opened(
    accounts: UnixAccounts, alice_dir: Path, shared: Path
) -> None:
    """With the v1 devices controller a job given GPU 0 opens /dev/nvidia0-like nodes of
    GPU 0 (ENXIO: no driver behind the test's node) but not of GPU 1 (EPERM); without the
    fence (no cgroups) both open as far as the driver (ENXIO), so the fence is what denies."""
    host = CgroupHost.detect()
    assert host is not None and host.devices, "the v1 devices controller is not mounted"
    dev = shared / "dev"
    dev.mkdir(mode=0o755)
    for n in (0, 1):
        os.mknod(dev / f"nvidia{n}", 0o666 | stat.S_IFCHR, os.makedev(195, n))
        os.chmod(dev / f"nvidia{n}", 0o666)  # as the driver's nodes are (umask aside)
    probe = ("import errno, os, sys\n"
             "for p in sys.argv[1:]:\n"
             "    try:\n        os.close(os.open(p, os.O_RDWR)); print(p, 'opened')\n"
             "    except OSError as e:\n        print(p, errno.errorcode[e.errno])\n")
    nodes = [str(dev / "nvidia0"), str(dev / "nvidia1")]
    results = {}
    for name, cg in (("fenced", "auto"), ("open", None)):
        (shared / name).mkdir()
        ex = make_executor(shared / name, cg)
        h = launch(ex, accounts.alice.name, [OPEN, "-c", probe, *nodes], chdir=str(alice_dir),
                   gpus=(0,))
        assert wait_end(ex, h).exit_code == 0, log_of(ex)
        results[name] = dict(line.rsplit(" ", 1) for line in log_of(ex).splitlines())
    assert results["fenced"] == {nodes[0]: "ENXIO", nodes[1]: "EPERM"}
    assert results["open"] == {nodes[0]: "ENXIO", nodes[1]: "ENXIO"}


def test_two_hosts_on_one_machine_fence_different_gpus(
    accounts: UnixAccounts, alice_dir: Path, shared: Path
) -> None:
    """Local hosts are consecutive slices of the machine's GPUs: with h0 and h1 of 2 GPUs,
    GPU 0 of h1 is the machine's GPU 2. A job given it sees CUDA_VISIBLE_DEVICES=2 and may
    open /dev/nvidia2-like nodes but not h0's GPU 0 (EPERM), so jobs of two users on the
    two hosts never share a device."""
    host = CgroupHost.detect()
    assert host is not None and host.devices, "the v1 devices controller is not mounted"
    dev = shared / "dev"
    dev.mkdir(mode=0o755)
    for n in (0, 2):
        os.mknod(dev / f"nvidia{n}", 0o666 | stat.S_IFCHR, os.makedev(195, n))
        os.chmod(dev / f"nvidia{n}", 0o666)
    probe = ("import errno, os, sys\n"
             "print('cuda', os.environ['CUDA_VISIBLE_DEVICES'])\n"
             "for p in sys.argv[1:]:\n"
             "    try:\n        os.close(os.open(p, os.O_RDWR)); print(p, 'opened')\n"
             "    except OSError as e:\n        print(p, errno.errorcode[e.errno])\n")
    nodes = [str(dev / "nvidia0"), str(dev / "nvidia2")]
    data = shared / "data"
    data.mkdir()
    os.chmod(data, 0o711)
    ex = LocalExecutor([("h0", 2), ("h1", 2)], data / "logs", data / "run", db_id="t",
                       identity=Identity())
    h = ex.launch(Launch("w-000001", 1, [OPEN, "-c", probe, *nodes], (HostSlots("h1", (0,)),),
                         user=accounts.alice.name, account=accounts.alice.name,
                         chdir=str(alice_dir)))
    assert wait_end(ex, h).exit_code == 0, log_of(ex)
    seen = dict(line.rsplit(" ", 1) for line in log_of(ex).splitlines())
    assert seen == {"cuda": "2", nodes[0]: "EPERM", nodes[1]: "ENXIO"}


def test_a_stale_run_file_of_the_same_attempt_is_set_aside(
    accounts: UnixAccounts, alice_dir: Path, shared: Path
) -> None:
    """Run and exit files of the same workload and attempt from another timeline (a restored
    backup of this database) are neither read nor in the way: the new attempt runs, and is
    observed with its own exit. The old wrapper is waited for until it has left (it writes
    its exit record just before), so the files found are those of a wrapper that has ended;
    one still leaving, and one still running, are test_local_executor's cases."""
    ex = make_executor(shared)
    h = launch(ex, accounts.alice.name, ["true"], chdir=str(alice_dir))
    assert wait_end(ex, h).exit_code == 0
    deadline = time.monotonic() + DEADLINE_S
    while _procfs.alive(h) and time.monotonic() < deadline:
        ex.observe([h])  # reaps the wrapper, a child of this process
        time.sleep(0.02)
    assert not _procfs.alive(h), "the first wrapper did not leave after its exit record"
    ex2 = make_executor(shared)  # the server again, its database restored to before w-000001
    h2 = launch(ex2, accounts.alice.name, ["sh", "-c", "exit 3"], chdir=str(alice_dir))
    o = wait_end(ex2, h2)
    assert (o.state, o.exit_code) == (AttemptState.EXITED, 3)
    assert len(list((ex2.run_dir / "stale").glob("w-000001.1.*"))) == 3  # run, exit, spec


def test_an_attempt_that_never_started_leaves_no_cgroup(
    accounts: UnixAccounts, alice_dir: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cgroups of an attempt are made before its wrapper starts. When the wrapper cannot
    start (here the interpreter is missing), and when the server died between the two (the
    attempt is then found never started, void, by the next server), they are removed: they
    were left behind, empty, in /sys/fs/cgroup/*/apportion."""
    ex = make_executor(shared)
    assert ex.cgroups is not None, "cgroups are not available here"

    def ours() -> set[str]:  # this test's cgroups (db_id "t"), in every hierarchy
        return {str(p) for p in Path("/sys/fs/cgroup").glob("**/apportion/t-w-*")}

    before = ours()
    monkeypatch.setattr(ex, "python", str(shared / "no-such-python"))
    with pytest.raises(LaunchRefused, match="no-such-python"):
        launch(ex, accounts.alice.name, ["true"], chdir=str(alice_dir))
    assert ours() == before
    monkeypatch.undo()

    # as if the server died after making them and writing the spec, before the wrapper ran
    dirs = ex.cgroups.create("t-w-000002.1", {0})
    assert dirs and all(Path(d).is_dir() for d in dirs)
    _procfs.write_json_atomic(ex.run_dir / "w-000002.1.spec", {"cgroups": dirs}, durable=False)
    again = make_executor(shared)
    assert again.find("w-000002", 1) is None
    assert not any(Path(d).exists() for d in dirs)
