"""One real Slurm cluster (4 nodes x 8 fake GPUs) for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor
from harness.slurm_cluster import SlurmCluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Started once; raises (the tests fail, never skip) when Slurm is not installed."""
    with SlurmCluster(nodes=4, gpus_per_node=8) as cluster:
        yield cluster


@pytest.fixture
def executor(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[SlurmExecutor]:
    """A fresh executor per test; every job is cancelled afterwards so nodes are free."""
    ex = SlurmExecutor(
        jobs_dir=tmp_path / "jobs", partition=slurm_cluster.partition, env=slurm_cluster.env,
        # jobs without an owner, run as the test's own user; owners: test_slurm_identity.py
        identity=Identity(single_user=True),
    )
    yield ex
    ex.close()
    slurm_cluster.run(["scancel", "--user", str(os.getuid())], check=False)
    slurm_cluster.wait_no_jobs_running()
