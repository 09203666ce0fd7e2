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
from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor
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
        self.next_launch = ""  # "frozen" | "stopped" | "" (normal)

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
        if mode == "stopped":
            self.cluster.stop_controller()
            try:
                return super().launch(launch)
            finally:
                self.cluster.start_controller()
        return super().launch(launch)


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


def submit(store: Store) -> str:
    return store.add_workload(
        budget="ai/llm", gpus=8, min_runtime=60, submit_time=time.time(), actor="alice",
        command=["bash", "-c", "echo attempt $APPORTION_ATTEMPT; sleep 1"],
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
