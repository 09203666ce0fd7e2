"""How the Slurm executor reads the end of a job, on the session's real cluster: the hard
kill of a stop, the job's umask, refusals found by the batch script, Slurm's own job states
(NODE_FAIL, CANCELLED outside apportion). An end marker its owner forged:
test_slurm_identity.py (it needs a job that is not root's)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors import slurm as slurm_module
from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor
from harness.slurm_cluster import SlurmCluster

from .helpers import BEAT, last_beat, wait_for_state, wait_for_text

pytestmark = pytest.mark.slurm


def launch(ex: SlurmExecutor, tmp_path: Path, wid: str, command: list[str], host: str = "gpu1",
           gpus: int = 1, chdir: str | None = None, umask: int | None = None) -> str:
    return ex.launch(Launch(
        workload_id=wid, attempt=1, slots=(HostSlots(host, tuple(range(gpus))),),
        log_path=str(tmp_path / f"{wid}.log"), command=command, chdir=chdir, umask=umask,
    ))


@pytest.fixture
def server_umask() -> Iterator[None]:
    """The umask `apportion serve` runs with (077), for the test's own Slurm calls."""
    old = os.umask(0o077)
    yield
    os.umask(old)


def test_the_hard_kill_after_the_grace_is_a_sigkill_to_every_process_of_the_job(
    executor: SlurmExecutor, tmp_path: Path
) -> None:
    """A job whose command and srun step ignore SIGTERM dies at the end of the grace
    period, not a second SIGTERM and Slurm's KillWait (5 s here) later; its end as observed
    covers the last moment its processes were alive (Slurm's whole seconds)."""
    beat = BEAT
    command = ["bash", "-c", f"srun -n1 bash -c '{beat.format(tmp_path / 'step')}' & "
                             f"{beat.format(tmp_path / 'batch')}"]
    handle = launch(executor, tmp_path, "stubborn", command)
    for name in ("batch", "step"):
        wait_for_text(tmp_path / name, ".")
    grace = 1.0
    stopped_at = time.time()
    executor.stop(handle, grace_s=grace)
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    time.sleep(1.0)  # a survivor would write again meanwhile
    last = max(last_beat(tmp_path / n) for n in ("batch", "step"))
    assert last < stopped_at + grace + 1.5  # KillWait would give stopped_at + grace + 5
    assert obs.signalled and obs.ended_at is not None
    assert last - 1.0 <= obs.ended_at <= time.time()


@pytest.mark.parametrize(("submitted", "shown"), [(None, "0022"), (0o027, "0027")])
def test_a_job_gets_its_submitters_umask_or_022_whatever_the_server_runs_with(
    executor: SlurmExecutor, tmp_path: Path, server_umask: None, submitted: int | None,
    shown: str,
) -> None:
    """The batch script and an srun step inside it run with the submitter's umask (0027
    here), or 0022 when none was sent, as the local executor's commands do, though the
    server (and so sbatch) runs with 077."""
    handle = launch(executor, tmp_path, "umask", ["bash", "-c", "umask; srun -n1 bash -c umask"],
                    umask=submitted)
    wait_for_state(executor, handle, AttemptState.EXITED)
    assert (tmp_path / "umask.log").read_text().split() == [shown, shown]


def test_a_jobs_slurm_submit_dir_is_its_working_directory_not_the_servers(
    executor: SlurmExecutor, tmp_path: Path
) -> None:
    """$SLURM_SUBMIT_DIR in the batch script and in an srun step inside it is the
    workload's working directory, not the directory the server (and so sbatch) runs in."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    assert Path.cwd() != workdir
    handle = launch(executor, tmp_path, "submitdir",
                    ["bash", "-c", 'echo "$SLURM_SUBMIT_DIR"; srun -n1 bash -c '
                                   "'echo \"$SLURM_SUBMIT_DIR\"'"],
                    chdir=str(workdir))
    wait_for_state(executor, handle, AttemptState.EXITED)
    assert (tmp_path / "submitdir.log").read_text().split() == [str(workdir), str(workdir)]


@pytest.mark.parametrize(("chdir", "command", "refused"), [
    ("/nonexistent/dir", ["true"], "chdir /nonexistent/dir: No such file or directory"),
    (None, ["no-such-program-xsf"], "command not found: no-such-program-xsf"),
    ("/etc", ["./no-such-file-xsf"], "command not found: ./no-such-file-xsf"),
    ("/etc", ["./passwd"], "permission denied: ./passwd"),
])
def test_a_command_that_cannot_start_is_a_refusal_not_a_run_elsewhere(
    executor: SlurmExecutor, tmp_path: Path, chdir: str | None, command: list[str],
    refused: str,
) -> None:
    """A directory that cannot be entered (Slurm itself would run the job in /tmp) or a
    program that is not found or not executable ends the job without running anything,
    observed as refused with the local executor's reason (exit 127), and said in its log."""
    handle = launch(executor, tmp_path, "refused", command, chdir=chdir)
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    assert (obs.refused, obs.exit_code) == (refused, 127)
    # (Slurm's own complaint about the directory may come first)
    assert (tmp_path / "refused.log").read_text().endswith(
        f"apportion: not started: {refused}\n")


def test_a_command_exiting_127_by_itself_is_no_refusal(
    executor: SlurmExecutor, tmp_path: Path
) -> None:
    """Exit 127 of the command itself (a shell's own 'not found') is an exit, not a
    refusal: only the script's own refusal, confirmed by Slurm's exit status, is one."""
    handle = launch(executor, tmp_path, "own127", ["bash", "-c", "exit 127"])
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    assert (obs.refused, obs.exit_code) == (None, 127)


def test_a_node_failure_under_a_job_reads_as_a_host_death(
    executor: SlurmExecutor, tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    """A node marked DOWN under a running job (Slurm ends it NODE_FAIL, exit 0:0) reads as
    its host's death, naming the node, not as a failure of the work."""
    handle = launch(executor, tmp_path, "nodefail", ["bash", "-c", "echo up; sleep 60"],
                    host="gpu4")
    wait_for_text(tmp_path / "nodefail.log", "up")
    slurm_cluster.set_node_state("gpu4", "DOWN", "ecc errors")
    try:
        obs = wait_for_state(executor, handle, AttemptState.EXITED)
    finally:
        slurm_cluster.set_node_state("gpu4", "RESUME")
        slurm_cluster.wait_nodes_idle(["gpu4"])
    assert (obs.host_died, obs.reason, obs.exit_code) == (
        True, "node gpu4 failed (Slurm NODE_FAIL)", None)


def test_a_job_cancelled_in_slurm_says_so(
    executor: SlurmExecutor, tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    """A job its owner cancels with scancel, not through apportion, reads as cancelled in
    Slurm (this cluster has no slurmdbd, so not by whom; see the kinds cluster below)."""
    handle = launch(executor, tmp_path, "scancelled", ["bash", "-c", "echo up; sleep 60"])
    wait_for_text(tmp_path / "scancelled.log", "up")
    slurm_cluster.run(["scancel", handle])
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    assert (obs.reason, obs.signalled) == ("cancelled in Slurm, not through apportion", True)


def test_with_slurmdbd_a_job_cancelled_in_slurm_names_who_cancelled_it(
    kinds_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """With accounting, sacct says who cancelled the job (``CANCELLED by 0``): the reason
    names the account."""
    ex = SlurmExecutor(tmp_path / "jobs", partition=kinds_cluster.partition,
                       env=kinds_cluster.env, identity=Identity(single_user=True))
    handle = launch(ex, tmp_path, "byroot", ["bash", "-c", "echo up; sleep 60"])
    wait_for_text(tmp_path / "byroot.log", "up")
    kinds_cluster.run(["scancel", handle])
    deadline = time.monotonic() + 30
    while (obs := ex.observe([handle])[handle]).reason != "cancelled in Slurm by root":
        assert time.monotonic() < deadline, obs  # slurmdbd hears of the cancel shortly after
        time.sleep(0.3)


def test_a_job_slurm_keeps_pending_behind_a_foreign_job_is_warned_about_once(
    executor: SlurmExecutor, tmp_path: Path, slurm_cluster: SlurmCluster,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A job submitted to Slurm directly holds gpu3's 8 GPUs, so apportion's job there waits
    PENDING (Resources): it still reads as running (apportion placed it), and once past
    PENDING_WARN_S a warning says, once however often it is observed, that Slurm keeps it
    PENDING, why, and that it is charged meanwhile (it was charged with nothing said)."""
    monkeypatch.setattr(slurm_module, "PENDING_WARN_S", 0.0)
    foreign = slurm_cluster.run(["sbatch", "--parsable", "-w", "gpu3", "--gres=gpu:8", "-o",
                                 "/dev/null", "--wrap", "sleep 300"]).stdout.strip()
    try:
        handle = launch(executor, tmp_path, "behind", ["true"], host="gpu3")
        deadline = time.monotonic() + 30
        # Slurm's reason is Priority until its scheduler has looked at the job
        while slurm_cluster.run(["squeue", "-h", "-j", handle, "-o", "%T %r"]
                                ).stdout.strip() != "PENDING Resources":
            assert time.monotonic() < deadline, f"job {handle} not PENDING (Resources)"
            time.sleep(0.2)
        with caplog.at_level(logging.WARNING, logger="apportion.executor.slurm"):
            for _ in range(3):
                assert executor.observe([handle])[handle].state is AttemptState.RUNNING
    finally:
        slurm_cluster.run(["scancel", foreign], check=False)
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"Slurm job {handle} (behind) is still PENDING in "
                              "Slurm ")
    assert message.endswith(" s after its launch (Resources): apportion counts it as running "
                            "and charges its GPUs meanwhile; a job not submitted through "
                            "apportion may hold its nodes")
