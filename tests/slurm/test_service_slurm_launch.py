"""The scheduler over the real Slurm backend when a launch gets no answer: a job Slurm
queued all the same is adopted (never launched twice), one it never got is retried as a new
attempt with nothing charged."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.core import PolicyConfig, Status
from apportion.service.clock import WallClock
from apportion.service.executor import Launch
from apportion.service.executors import slurm
from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import ACTIVE_JOB_STATES, SlurmExecutor, SlurmUnavailable
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store, WorkloadRow
from harness.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm


class HangingLaunch(SlurmExecutor):
    """The next launch meets a controller that does not answer: ``frozen`` SIGSTOPs
    slurmctld for the length of the sbatch call (which times out; the request waits in the
    socket and is carried out once the controller runs again), ``stopped`` stops it
    outright (the request is lost)."""

    def __init__(self, cluster: SlurmCluster, jobs_dir: Path) -> None:
        super().__init__(jobs_dir, partition=cluster.partition, env=cluster.env,
                         timeout_s=2.0, logs_dir=jobs_dir / "logs",
                         identity=Identity(single_user=True))
        self.cluster = cluster
        self.next_launch = ""  # "frozen" | "stopped" | "lost" | "" (normal)
        self.find_misses = 0  # the next finds say there is no such job, as too early
        self.lost: list[str] = []  # ids of the jobs whose launch answer was "lost"

    def launch(self, launch: Launch) -> str:
        mode, self.next_launch = self.next_launch, ""
        if mode == "frozen":
            pid = self.cluster.controller_pid()
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                return super().launch(launch)
            finally:
                os.kill(pid, signal.SIGCONT)
        if mode == "lost":  # sbatch went through, but its answer never came
            self.lost.append(super().launch(launch))
            raise SlurmUnavailable("sbatch: no answer within 2 s (slurmctld down or slow)")
        if mode == "stopped":
            self.cluster.stop_controller()
            try:
                return super().launch(launch)
            finally:
                self.cluster.start_controller()
        return super().launch(launch)

    def find(self, workload_id: str, attempt: int) -> str | None:
        if self.find_misses:
            self.find_misses -= 1
            return None  # a slow controller had not listed the job yet
        return super().find(workload_id, attempt)


@pytest.fixture
def setup(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> Iterator[tuple[Store, HangingLaunch, Scheduler]]:
    store = Store(f"sqlite:///{tmp_path / 'apportion.db'}")
    store.migrate()
    store.add_budget("ai/llm", 1.0, "admin", create_parents=True)
    ex = HangingLaunch(slurm_cluster, tmp_path / "jobs")
    sched = Scheduler(store, ex, PolicyConfig(), WallClock(), grace_s=2.0)
    sched.start()
    sched.step()  # takes the hosts from Slurm
    yield store, ex, sched
    store.close()
    slurm_cluster.run(["scancel", "--user", str(os.getuid())], check=False)
    slurm_cluster.wait_no_jobs_running()


def submit(store: Store, sleep_s: int = 1) -> str:
    return store.add_workload(
        budget="ai/llm", gpus=8, min_runtime=60, submit_time=time.time(), actor="alice",
        command=["bash", "-c", f"echo attempt $APPORTION_ATTEMPT; sleep {sleep_s}"],
    ).id


def our_jobs(ex: HangingLaunch) -> list[str]:
    """Ids of the Slurm jobs of this executor's scripts (other tests reuse workload ids)."""
    out = ex.cluster.run(["squeue", "-h", "-t", "all", "-o", "%i %o"]).stdout
    return [job for job, _, command in (line.partition(" ") for line in out.splitlines())
            if command.startswith(f"{ex.jobs_dir}/")]


def run_until_final(sched: Scheduler, store: Store, wid: str, timeout_s: float = 90) -> WorkloadRow:
    deadline = time.monotonic() + timeout_s
    while True:
        sched.step()
        w = store.get_workload(wid)
        if w.status not in (Status.PENDING, Status.RUNNING, Status.STOPPING):
            return w
        assert time.monotonic() < deadline, f"{wid} still {w.status} after {timeout_s} s"
        time.sleep(0.3)


def test_launch_that_timed_out_but_was_queued_is_adopted_not_repeated(
    setup: tuple[Store, HangingLaunch, Scheduler],
) -> None:
    """sbatch times out against a hung slurmctld that queues the job once it resumes: the
    next pass finds the job by its name and adopts it; it runs once, as attempt 1."""
    store, ex, sched = setup
    ex.next_launch = "frozen"
    wid = submit(store)
    sched.step()
    w = store.get_workload(wid)
    assert w.status is Status.RUNNING and w.attempt is not None and w.attempt.handle is None

    done = run_until_final(sched, store, wid)
    assert (done.status, done.exit_code, done.attempts_count) == (Status.COMPLETED, 0, 1)
    assert our_jobs(ex) == [done.attempts[0].handle]  # one sbatch reached Slurm, adopted
    assert ex.log_path(wid, 1).read_text() == "attempt 1\n"


def test_launch_that_never_reached_slurm_is_retried_with_nothing_charged(
    setup: tuple[Store, HangingLaunch, Scheduler],
) -> None:
    """sbatch fails against a stopped slurmctld: once Slurm answers again and has no such
    job, attempt 1 ends as never launched (0 GPU-seconds) and attempt 2 runs."""
    store, ex, sched = setup
    ex.next_launch = "stopped"
    wid = submit(store)
    sched.step()
    done = run_until_final(sched, store, wid)
    assert (done.status, done.exit_code, done.attempts_count) == (Status.COMPLETED, 0, 2)
    first, second = done.attempts
    assert (first.end_reason, first.gpu_seconds, first.handle) == ("never launched", 0.0, None)
    assert our_jobs(ex) == [second.handle]
    assert ex.log_path(wid, 2).read_text() == "attempt 2\n"


def test_a_job_of_an_attempt_ended_never_launched_is_stopped_while_the_server_runs(
    setup: tuple[Store, HangingLaunch, Scheduler], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """sbatch queues the job but its answer is lost, and ``find`` then finds nothing (a
    slow controller): attempt 1 ends never launched and attempt 2 runs. The job of attempt
    1, which no open attempt owns, is stopped a few passes later (once it has been seen so
    for STRAY_SETTLE_S), with a warning naming it; attempt 2's job runs on."""
    monkeypatch.setattr(slurm, "STRAY_SETTLE_S", 1.0)
    store, ex, sched = setup
    ex.next_launch, ex.find_misses = "lost", 1
    wid = submit(store, sleep_s=300)
    sched.step()
    [stray] = ex.lost
    passes = 0
    with caplog.at_level("WARNING", logger="apportion.executor.slurm"):
        while job_state(ex, stray) in ACTIVE_JOB_STATES:
            assert passes < 20, f"Slurm job {stray} still {job_state(ex, stray)}"
            sched.step()
            passes += 1
            time.sleep(0.5)
    first, second = store.get_workload(wid).attempts
    assert (first.end_reason, first.handle) == ("never launched", None)
    assert second.handle is not None and second.handle != stray
    assert job_state(ex, second.handle) in ACTIVE_JOB_STATES
    assert [r.getMessage() for r in caplog.records if r.name == slurm.log.name] == [
        f"{wid} attempt 1 (Slurm job {stray}) runs for no open attempt (a launch given up "
        "as never launched that Slurm queued late, or a second job of one attempt): stopped"]


def job_state(ex: HangingLaunch, job_id: str) -> str:
    """Slurm's state of a job (as long as Slurm lists it)."""
    return ex.cluster.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"]).stdout.strip()
