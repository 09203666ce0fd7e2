"""The Slurm executor from a server running as root submits each job as its owner's Unix
account (accounts made by the test setup): Slurm sees alice, and so does the node."""

from __future__ import annotations

import os
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
