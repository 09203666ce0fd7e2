"""The Slurm executor from a server running as root submits each job as its owner's Unix
account (accounts made by the test setup): Slurm sees alice, and so does the node."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.service.executor import AttemptState, HostSlots, Launch, LaunchRefused
from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor
from harness.accounts import UnixAccounts
from harness.slurm_cluster import SlurmCluster

from .helpers import wait_for_state

pytestmark = pytest.mark.slurm
SECRET = "APPORTION_TEST_SERVER_SECRET"


@pytest.fixture
def owner_executor(
    slurm_cluster: SlurmCluster, shared: Path, accounts: UnixAccounts
) -> Iterator[SlurmExecutor]:
    env = {**slurm_cluster.env, SECRET: "hunter2"}  # the server's environment
    ex = SlurmExecutor(shared / "jobs", partition=slurm_cluster.partition, env=env,
                       logs_dir=shared / "logs", identity=Identity())
    yield ex
    for name in (accounts.alice.name, accounts.bob.name):
        slurm_cluster.run(["scancel", "--user", name], check=False)
    slurm_cluster.wait_no_jobs_running()


@pytest.mark.parametrize("via", ["sbatch --uid", "runuser"])
def test_job_runs_as_its_owner_in_slurm_and_on_the_node(
    owner_executor: SlurmExecutor, slurm_cluster: SlurmCluster, accounts: UnixAccounts,
    shared: Path, via: str,
) -> None:
    """alice's job is alice's in Slurm (``squeue -o %u``, ``scontrol`` UserId) and runs as her
    uid and gid on the node, in her directory, with what she exported and not the server's
    environment (a secret in it is absent); submitted with ``sbatch --uid/--gid`` (this
    Slurm has them) or, as on a Slurm without them, through ``runuser``."""
    assert owner_executor._sbatch_has_uid()  # Slurm 22.05 here
    owner_executor._has_uid = via == "sbatch --uid"
    a = accounts.alice
    home = shared / "alice"
    home.mkdir()
    os.chown(home, a.uid, a.gid)
    handle = owner_executor.launch(Launch(
        workload_id="w-000001", attempt=1, slots=(HostSlots("gpu2", (0,)),),
        command=["sh", "-c", "id -u; id -g; pwd; env"], user="alice", account=a.name,
        chdir=str(home), env={"FOO": "from alice"},
        log_path=str(owner_executor.log_path("w-000001", 1)),
    ))
    obs = wait_for_state(owner_executor, handle, AttemptState.EXITED)
    assert obs.exit_code == 0
    squeue = slurm_cluster.run(["squeue", "-h", "-t", "all", "-j", handle, "-o", "%u"])
    assert squeue.stdout.strip() == a.name
    scontrol = slurm_cluster.run(["scontrol", "-o", "show", "job", handle]).stdout
    assert f"UserId={a.name}({a.uid})" in scontrol and f"GroupId={a.name}({a.gid})" in scontrol
    uid, gid, cwd, *env_lines = owner_executor.log_path("w-000001", 1).read_text().splitlines()
    assert (int(uid), int(gid), cwd) == (a.uid, a.gid, str(home))
    env = dict(line.split("=", 1) for line in env_lines if "=" in line)
    assert env["FOO"] == "from alice" and env["USER"] == a.name
    assert SECRET not in env and env["APPORTION_WORKLOAD_ID"] == "w-000001"
    assert owner_executor.log_path("w-000001", 1).stat().st_uid == a.uid


def test_a_user_without_an_account_is_refused_before_slurm_sees_it(
    owner_executor: SlurmExecutor,
) -> None:
    """A launch for a user with no Unix account raises LaunchRefused naming it, and no job
    is submitted."""
    with pytest.raises(LaunchRefused, match="user carol: Unix account 'carol' does not exist"):
        owner_executor.launch(Launch(
            workload_id="w-000002", attempt=1, slots=(HostSlots("gpu1", (0,)),),
            command=["true"], user="carol", account="carol",
        ))
    assert owner_executor.find("w-000002", 1) is None


def test_a_directory_its_owner_may_not_enter_refuses_the_job_not_run_it_in_tmp(
    owner_executor: SlurmExecutor, accounts: UnixAccounts, shared: Path
) -> None:
    """alice's job in a directory only bob may enter (Slurm's own chdir falls back to /tmp)
    never starts its command: it reads as refused, ``chdir <dir>: Permission denied``, as
    the local executor says it, and the command printed nothing."""
    a, b = accounts.alice, accounts.bob
    bobs = shared / "bob"
    bobs.mkdir(mode=0o700)
    os.chown(bobs, b.uid, b.gid)
    handle = owner_executor.launch(Launch(
        workload_id="w-000003", attempt=1, slots=(HostSlots("gpu1", (0,)),),
        command=["echo", "the command ran"], user="alice", account=a.name,
        chdir=str(bobs), log_path=str(owner_executor.log_path("w-000003", 1)),
    ))
    obs = wait_for_state(owner_executor, handle, AttemptState.EXITED)
    assert (obs.refused, obs.exit_code) == (f"chdir {bobs}: Permission denied", 127)
    assert "the command ran" not in owner_executor.log_path("w-000003", 1).read_text()


@pytest.mark.parametrize("forged", ["now", "inf", "nan", "-1"])
def test_an_end_marker_its_owner_forged_does_not_move_the_end_before_slurms(
    owner_executor: SlurmExecutor, accounts: UnixAccounts, slurm_cluster: SlurmCluster,
    shared: Path, forged: str,
) -> None:
    """alice's job writes its own end marker at its start (the current time, inf, nan, a
    time before it started) and makes it read-only, so that the script's real one fails;
    it still ends at Slurm's EndTime: without a controller outage since it was last seen
    running, a marker only places the end within Slurm's second, never before it."""
    marker = '"$(dirname "$APPORTION_CHECKPOINT_FILE")/apportion-w-000004-1.end"'
    at = "$EPOCHREALTIME" if forged == "now" else forged
    log = owner_executor.log_path("w-000004", 1)
    handle = owner_executor.launch(Launch(
        workload_id="w-000004", attempt=1, slots=(HostSlots("gpu1", (0,)),),
        command=["bash", "-c", f'echo "$SLURM_JOB_ID 0 {at}" > {marker}; '
                               f"chmod 0444 {marker}; sleep 3"],
        user="alice", account=accounts.alice.name, log_path=str(log), chdir=str(shared),
    ))
    obs = wait_for_state(owner_executor, handle, AttemptState.EXITED)
    line = slurm_cluster.run(["scontrol", "-o", "show", "job", handle]).stdout
    start, end = (time.mktime(time.strptime(line.split(f" {key}=", 1)[1].split()[0],
                                            "%Y-%m-%dT%H:%M:%S"))
                  for key in ("StartTime", "EndTime"))
    written = float((log.parent / "apportion-w-000004-1.end").read_text().split()[2])
    assert not end <= written < end + 1  # still the forged time: the script's write failed
    assert obs.ended_at == end and end - start >= 3
