"""A Slurm job's ``APPORTION_CHECKPOINT_FILE``: set in the job, beside its log in its
owner's directory, and its time observed while the job runs (the nodes of the test cluster
share this machine's file system). Accounts made by the test setup: run under both
``flock /tmp/apportion-slurm.lock`` and ``flock /tmp/apportion-accounts.lock``."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor
from harness.accounts import UnixAccounts
from harness.slurm_cluster import SlurmCluster

from .helpers import wait_for_state, wait_for_text

pytestmark = pytest.mark.slurm
SET_BACK = 1700000000.25  # the time the job gives its file with touch -d


@pytest.fixture
def owner_executor(
    slurm_cluster: SlurmCluster, shared: Path, accounts: UnixAccounts
) -> Iterator[SlurmExecutor]:
    ex = SlurmExecutor(shared / "jobs", partition=slurm_cluster.partition,
                       env=slurm_cluster.env, logs_dir=shared / "logs", identity=Identity())
    yield ex
    slurm_cluster.run(["scancel", "--user", accounts.alice.name], check=False)
    slurm_cluster.wait_no_jobs_running()


def job(home: Path, touch: str) -> list[str]:
    """Prints its checkpoint path, waits for ``go``, runs ``touch``, says so, then sleeps."""
    go = shlex.quote(str(home / "go"))
    return ["bash", "-c", 'echo "path=$APPORTION_CHECKPOINT_FILE"; '
            f"while [ ! -e {go} ]; do sleep 0.05; done; {touch}; echo touched; sleep 120"]


def start(ex: SlurmExecutor, accounts: UnixAccounts, shared: Path, touch: str
          ) -> tuple[str, Path, Path]:
    """alice's job on gpu1; its handle, her directory and its log, once it runs."""
    a = accounts.alice
    home = shared / "alice"
    home.mkdir()
    os.chown(home, a.uid, a.gid)
    log = ex.log_path("w-000001", 1)
    handle = ex.launch(Launch(
        workload_id="w-000001", attempt=1, slots=(HostSlots("gpu1", (0,)),),
        command=job(home, touch), user="alice", account=a.name, chdir=str(home),
        log_path=str(log),
    ))
    wait_for_text(log, "path=")
    return handle, home, log


def test_a_slurm_job_touching_its_checkpoint_file_is_observed_with_its_time(
    owner_executor: SlurmExecutor, accounts: UnixAccounts, shared: Path
) -> None:
    """alice's Slurm job has ``APPORTION_CHECKPOINT_FILE`` beside its log, in her own log
    directory; it reports no checkpoint until it touches the file, then the time the job
    gave the file (``touch -d``)."""
    handle, home, log = start(owner_executor, accounts, shared,
                              f'touch -d @{SET_BACK} "$APPORTION_CHECKPOINT_FILE"')
    path = Path(wait_for_text(log, "path=").split("path=", 1)[1].split()[0])
    assert path.parent == log.parent and path.parent.stat().st_uid == accounts.alice.uid
    obs = owner_executor.observe([handle])[handle]
    assert (obs.state, obs.checkpoint_at) == (AttemptState.RUNNING, None)
    (home / "go").touch()
    wait_for_text(log, "touched")
    obs = owner_executor.observe([handle])[handle]
    assert (obs.state, obs.checkpoint_at) == (AttemptState.RUNNING, SET_BACK)
    owner_executor.stop(handle, grace_s=0)
    wait_for_state(owner_executor, handle, AttemptState.EXITED)


def test_a_symlink_as_a_slurm_jobs_checkpoint_file_is_ignored(
    owner_executor: SlurmExecutor, accounts: UnixAccounts, shared: Path
) -> None:
    """A job that makes its checkpoint path a link to a file (its own) reports no
    checkpoint: the server does not follow it."""
    handle, home, log = start(owner_executor, accounts, shared,
                              f'touch mine; ln -s {shlex.quote(str(shared / "alice" / "mine"))}'
                              ' "$APPORTION_CHECKPOINT_FILE"')
    (home / "go").touch()
    wait_for_text(log, "touched")
    path = Path(log.read_text().split("path=", 1)[1].split()[0])
    assert path.is_symlink() and path.resolve().is_file()
    obs = owner_executor.observe([handle])[handle]
    assert (obs.state, obs.checkpoint_at) == (AttemptState.RUNNING, None)
    owner_executor.stop(handle, grace_s=0)
    wait_for_state(owner_executor, handle, AttemptState.EXITED)
