"""apportion serve on Slurm: how a workload's end is recorded when the job's own files or
Slurm say more than an exit code (a forged end marker, a node failure, a refusal found by
the batch script, a cancel outside apportion). alice's work runs as her own Unix account,
as in production, so that her job cannot write what only the server may."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.service.executors.slurm import parse_exit_code
from harness.accounts import UnixAccounts, open_dir
from harness.slurm_cluster import SlurmCluster
from harness.slurm_service import SlurmService

pytestmark = pytest.mark.slurm
ENDED = ("completed", "failed", "lost", "cancelled", "timeout")


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """Where the server keeps its data and alice's work runs: a directory every account
    may cross (alice's account has no home)."""
    with open_dir("apportion-outcomes-") as d:
        yield d


@pytest.fixture(scope="module")
def service(
    slurm_cluster: SlurmCluster, accounts: UnixAccounts, workdir: Path
) -> Iterator[SlurmService]:
    """One server for this module, running alice's work as her account; the cluster is
    left idle and in service afterwards."""
    with SlurmService(slurm_cluster, workdir / "server",
                      unix_user=accounts.alice.name) as svc:
        yield svc
    slurm_cluster.run(["scancel", "--user", accounts.alice.name], check=False)
    slurm_cluster.wait_no_jobs_running()
    # a job Slurm has ended (NODE_FAIL) may keep its processes until its KillWait: the
    # account can only be removed once they are gone
    deadline = time.monotonic() + 30
    while subprocess.run(["pgrep", "-u", str(accounts.alice.uid)],
                         capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "alice's processes outlived her jobs"
        time.sleep(0.2)


@pytest.fixture(autouse=True)
def clean(service: SlurmService, slurm_cluster: SlurmCluster) -> Iterator[None]:
    """Each test ends with no active workload and every node back in service."""
    yield
    service.cancel_all()
    for node in slurm_cluster.node_names:
        if "DOWN" in slurm_cluster.node_state(node) or "DRAIN" in slurm_cluster.node_state(node):
            slurm_cluster.set_node_state(node, "RESUME")
    for node in slurm_cluster.node_names:
        service.wait_host(node, "healthy")
    slurm_cluster.wait_no_jobs_running()


def epoch(service: SlurmService, handle: str, key: str) -> float:
    """A job's StartTime or EndTime from scontrol, as epoch seconds."""
    return time.mktime(time.strptime(service.slurm_job(handle)[key], "%Y-%m-%dT%H:%M:%S"))


def test_a_forged_end_marker_neither_lowers_the_charge_nor_halts_scheduling(
    service: SlurmService, workdir: Path,
) -> None:
    """Three 8-GPU jobs write their own end marker at their start (the current time, inf,
    nan) and make it read-only, then run 4 s: each is charged 8 x its run as Slurm dates
    it (within Slurm's whole seconds and the launch), ends within Slurm's EndTime second,
    and stores finite figures; after a restart of the server the next workload still runs."""
    marker = '"$(dirname "$APPORTION_CHECKPOINT_FILE")/apportion-$APPORTION_WORKLOAD_ID-1.end"'
    forged = {}
    for at in ("$EPOCHREALTIME", "inf", "nan"):
        script = f'echo "$SLURM_JOB_ID 0 {at}" > {marker}; chmod 0444 {marker}; sleep 4'
        w = service.submit(budget="ai/llm", gpus=8, min_runtime=60, chdir=str(workdir),
                           command=["bash", "-c", script])
        forged[at] = w["id"]
    for at, wid in forged.items():
        w = service.wait_workload(wid, ENDED)
        a = w["attempts"][-1]
        assert (w["status"], w["exit_code"]) == ("completed", 0), at
        slurm_run = epoch(service, a["handle"], "EndTime") - epoch(
            service, a["handle"], "StartTime")
        end = epoch(service, a["handle"], "EndTime")
        assert end <= a["ended_at"] < end + 1, at  # within Slurm's second, never before
        assert a["gpu_seconds"] == pytest.approx(8 * (a["ended_at"] - a["started_at"]))
        assert 8 * (slurm_run - 1) <= a["gpu_seconds"] <= 8 * (slurm_run + 2), at
        assert slurm_run >= 4, at

    service.stop()
    service.start()
    after = service.submit(budget="ai/llm", gpus=2, min_runtime=60, chdir=str(workdir),
                           command=["true"])
    assert service.wait_workload(after["id"], ENDED)["status"] == "completed"


def test_a_node_failure_requeues_resumable_work_and_loses_the_rest(
    service: SlurmService, slurm_cluster: SlurmCluster, workdir: Path
) -> None:
    """A node marked DOWN under running work (Slurm ends the jobs NODE_FAIL; with
    ReturnToService=2 it may be back before a pass sees it down) ends each attempt as a
    host failure: the resumable workload is requeued and runs again, the other is lost;
    neither reads as failed by itself."""
    sleeper = ["bash", "-c", "sleep 60"]
    resumable = service.submit(budget="ai/llm", gpus=8, min_runtime=60, resumable=True,
                               nodelist=["gpu3"], command=sleeper, chdir=str(workdir))
    other = service.submit(budget="ai/llm", gpus=8, min_runtime=60, nodelist=["gpu4"],
                           command=sleeper, chdir=str(workdir))
    for w in (resumable, other):
        service.wait_slurm_state(service.wait_started(w["id"])["attempts"][-1]["handle"],
                                 "RUNNING")
    for node in ("gpu3", "gpu4"):
        slurm_cluster.set_node_state(node, "DOWN", "ecc errors")
    lost = service.wait_workload(other["id"], ENDED)
    assert lost["status"] == "lost"
    assert lost["end_reason"].startswith("host_failure")
    again = service.wait_workload(resumable["id"], ("pending", "running"),
                                  check=lambda w: w["attempts_count"] >= 1 and
                                  w["attempts"][0]["ended_at"] is not None)
    assert again["attempts"][0]["end_reason"].startswith("host_failure")


@pytest.mark.parametrize(("chdir", "command", "reason"), [
    ("/nonexistent/dir", ["true"],
     "launch refused: chdir /nonexistent/dir: No such file or directory"),
    (None, ["no-such-program-xsf"], "launch refused: command not found: no-such-program-xsf"),
])
def test_a_job_that_cannot_start_fails_its_workload_as_a_refused_launch(
    service: SlurmService, workdir: Path, chdir: str | None, command: list[str], reason: str
) -> None:
    """A directory that does not exist (Slurm would run the job in /tmp) or a program that
    is not found ends the workload failed with the local executor's refusal, after one
    try."""
    w = service.submit(budget="ai/llm", gpus=1, min_runtime=60, command=command,
                       chdir=chdir or str(workdir))
    done = service.wait_workload(w["id"], ENDED)
    assert (done["status"], done["end_reason"], done["attempts_count"]) == (
        "failed", reason, 1)


def test_a_job_cancelled_in_slurm_by_its_owner_says_so(
    service: SlurmService, slurm_cluster: SlurmCluster, accounts: UnixAccounts, workdir: Path
) -> None:
    """scancel of apportion's job (not `apportion cancel`) ends the workload failed with
    the reason that it was cancelled in Slurm, not as an exit status of its own."""
    w = service.submit(budget="ai/llm", gpus=1, min_runtime=60, command=["sleep", "60"],
                       chdir=str(workdir))
    handle = service.wait_started(w["id"])["attempts"][-1]["handle"]
    service.wait_slurm_state(handle, "RUNNING")
    slurm_cluster.run(["runuser", "-u", accounts.alice.name, "--", "scancel", handle])
    done = service.wait_workload(w["id"], ENDED)
    assert (done["status"], done["end_reason"]) == (
        "failed", "cancelled in Slurm, not through apportion")


def test_a_job_slurm_ends_at_its_time_limit_ends_as_timeout_as_on_the_local_executor(
    service: SlurmService, slurm_cluster: SlurmCluster, workdir: Path
) -> None:
    """A job given a Slurm time limit of 1 min (as a partition's MaxTime would) that runs
    on past it ends TIMEOUT in Slurm; the workload ends ``timeout`` (not ``failed``), with
    the reason ``timeout: reached Slurm's time limit (TIMEOUT)``, the exit code Slurm
    recorded for the job (scontrol's ExitCode, never 0: 143 after its SIGTERM as a rule,
    255 by chance of timing, as a CI run found), and ``why`` says it was stopped at its time
    limit, as for work apportion stops there."""
    w = service.submit(budget="ai/llm", gpus=1, min_runtime=60, command=["sleep", "600"],
                       chdir=str(workdir))
    handle = service.wait_started(w["id"])["attempts"][-1]["handle"]
    service.wait_slurm_state(handle, "RUNNING")
    slurm_cluster.run(["scontrol", "update", f"JobId={handle}", "TimeLimit=1"])
    done = service.wait_workload(w["id"], ENDED, timeout_s=180)
    job = service.slurm_job(handle)
    assert job["JobState"] == "TIMEOUT"
    code, sig = parse_exit_code(job["ExitCode"])
    slurm_code = 128 + sig if sig else code
    assert slurm_code != 0, job["ExitCode"]
    reason = "timeout: reached Slurm's time limit (TIMEOUT)"
    assert (done["status"], done["end_reason"], done["exit_code"]) == (
        "timeout", reason, slurm_code)
    assert (done["attempts"][-1]["end_reason"], done["attempts"][-1]["exit_code"]) == (
        reason, slurm_code)
    why = service.get(f"/v1/workloads/{w['id']}/why")
    assert "stopped at its time limit (timeout)" in str(why), why
