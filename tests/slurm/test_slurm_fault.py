"""The Slurm backend while slurmctld is down, and after it comes back with its saved state."""

from __future__ import annotations

from pathlib import Path

import pytest

from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor, SlurmUnavailable
from harness.slurm_cluster import SlurmCluster

from .helpers import wait_for_state, wait_for_text

pytestmark = pytest.mark.slurm


def test_controller_outage_raises_unavailable_and_jobs_survive(
    slurm_cluster: SlurmCluster, executor: SlurmExecutor, tmp_path: Path
) -> None:
    """With slurmctld down every call raises SlurmUnavailable (bounded by timeout_s); once it
    is back, a fresh executor (a restarted scheduler) sees the job that ended during the
    outage with its exit code, and the long job still running."""
    ex = SlurmExecutor(tmp_path / "jobs", partition=slurm_cluster.partition,
                       env=slurm_cluster.env, timeout_s=2, identity=Identity(single_user=True))

    def launch(wid: str, host: str, script: str) -> str:
        return ex.launch(Launch(
            workload_id=wid, attempt=1, slots=(HostSlots(host, (0, 1)),),
            log_path=str(tmp_path / f"{wid}.log"), command=["bash", "-c", script],
        ))

    short = launch("short", "gpu1", "echo started; sleep 3; echo done; exit 7")
    long = launch("long", "gpu2", "echo started; sleep 300")
    wait_for_text(tmp_path / "short.log", "started")
    wait_for_text(tmp_path / "long.log", "started")

    slurm_cluster.stop_controller()
    try:
        with pytest.raises(SlurmUnavailable):
            ex.observe([short, long])
        with pytest.raises(SlurmUnavailable):
            ex.inventory()
        with pytest.raises(SlurmUnavailable):
            launch("during", "gpu3", "true")
        with pytest.raises(SlurmUnavailable):
            ex.set_host_drain("gpu4", True, "test")
        with pytest.raises(SlurmUnavailable):
            ex.stop(long, grace_s=5)
        wait_for_text(tmp_path / "short.log", "done")  # it ends while nobody listens
    finally:
        slurm_cluster.start_controller()

    restarted = SlurmExecutor(tmp_path / "jobs", partition=slurm_cluster.partition,
                              env=slurm_cluster.env, identity=Identity(single_user=True))
    obs = wait_for_state(restarted, short, AttemptState.EXITED)
    assert (obs.exit_code, obs.signalled) == (7, False)
    assert restarted.observe([long])[long].state is AttemptState.RUNNING
    jobs = restarted.list_jobs()
    assert (jobs[short].workload_id, jobs[long].workload_id) == ("short", "long")
    assert not restarted.find_by_workload("during")
