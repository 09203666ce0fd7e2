"""A stop's kill deadline holds while apportion's server is down: the batch script kills
its job itself (docs/slurm.md, Stop), on the session's real cluster."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor
from harness.slurm_cluster import SlurmCluster

from .helpers import BEAT, last_beat, wait_for_state, wait_for_text

pytestmark = pytest.mark.slurm


def test_a_stopped_job_ignoring_sigterm_is_killed_at_its_deadline_with_the_server_gone(
    executor: SlurmExecutor, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A job whose command and srun step ignore SIGTERM, stopped with a grace of 3 s by an
    executor that is then dropped without its tick (a server crash: nobody sends the
    server's SIGKILL), still dies at its deadline (``stop_issued_at + grace``): its last
    sign of life is within Slurm's latencies of it, its end marker is dated at it, and a
    restarted executor reads it ended, signalled, charged up to the deadline's second."""
    beat = BEAT
    log = executor.log_path("outage", 1)  # where the scheduler puts it (the stop file's dir)
    handle = executor.launch(Launch(
        workload_id="outage", attempt=1, slots=(HostSlots("gpu1", (0,)),),
        log_path=str(log),
        command=["bash", "-c", f"srun -n1 bash -c '{beat.format(tmp_path / 'step')}' & "
                               f"{beat.format(tmp_path / 'batch')}"],
    ))
    for name in ("batch", "step"):
        wait_for_text(tmp_path / name, ".")
    stopped_at = time.time()
    executor.stop(handle, grace_s=3.0)
    # the server is gone from here: no observe, no tick of that executor
    job_id, at = (log.parent / "apportion-outage-1.stop").read_text().split()
    deadline = float(at)
    assert job_id == handle and stopped_at + 3.0 <= deadline <= time.time() + 3.0

    def active() -> bool:
        out = slurm_cluster.run(["squeue", "-h", "-j", handle, "-o", "%T"], check=False)
        return out.stdout.strip() in {"RUNNING", "COMPLETING", "CONFIGURING"}

    while active() and time.time() < deadline + 10.0:
        time.sleep(0.2)
    assert time.time() < deadline + 5.0, "the job ran on past its deadline"
    time.sleep(1.0)  # a survivor would write again meanwhile
    last = max(last_beat(tmp_path / n) for n in ("batch", "step"))
    assert deadline - 1.0 < last < deadline + 2.0
    marker = (log.parent / "apportion-outage-1.end").read_text().split()
    assert marker[0] == handle and deadline <= float(marker[2]) < deadline + 0.5

    restarted = SlurmExecutor(executor.jobs_dir, partition=slurm_cluster.partition,
                              env=slurm_cluster.env, identity=Identity(single_user=True))
    obs = wait_for_state(restarted, handle, AttemptState.EXITED)
    assert obs.signalled and obs.ended_at is not None
    assert deadline <= obs.ended_at < deadline + 3.0
