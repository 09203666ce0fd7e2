"""The SlurmCluster test harness itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.slurm_cluster import SlurmCluster, SlurmClusterError

pytestmark = pytest.mark.slurm


def test_second_cluster_runs_beside_the_first_and_cleans_up(
    slurm_cluster: SlurmCluster,
) -> None:
    """A second cluster gets its own directory and ports, runs a job while the session's
    cluster is up, and on exit leaves no daemon and no directory behind."""
    with SlurmCluster(nodes=1, gpus_per_node=2) as other:
        assert other.dir != slurm_cluster.dir
        pids = other.daemon_pids()
        assert len(pids) == 3  # munged, slurmctld, one slurmd
        out = other.run(["srun", "--gres=gpu:2", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES"])
        assert out.stdout.strip() == "0,1"
        assert other.run(["sinfo", "-h", "-o", "%D"]).stdout.strip() == "1"
        directory = other.dir
    assert not directory.exists()
    assert not [p for p in pids if Path(f"/proc/{p}").exists()]
    assert slurm_cluster.run(["sinfo", "-h", "-o", "%D"]).stdout.strip() == "4"


def test_missing_slurm_fails_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the Slurm programs on PATH the harness refuses to start and says how to
    install them (the tests then fail, they are never skipped)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmClusterError, match="scripts/install-system.sh"):
        SlurmCluster(nodes=1).start()
