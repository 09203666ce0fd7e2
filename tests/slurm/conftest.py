"""Real Slurm clusters for the whole test session: one of 4 nodes x 8 untyped fake GPUs (one
pool), and one of two GPU kinds with accounting (gpu1-2 ``gpu:h100:8``, gpu3-4
``gpu:b200:8``), started by the first test that needs it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor
from harness.slurm_cluster import SlurmCluster

KIND_TYPES = ("h100", "h100", "b200", "b200")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Started once; raises (the tests fail, never skip) when Slurm is not installed."""
    with SlurmCluster(nodes=4, gpus_per_node=8) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kinds_cluster() -> Iterator[SlurmCluster]:
    """gpu1-2 with ``gpu:h100:8`` (partition ``h100``), gpu3-4 with ``gpu:b200:8`` (partition
    ``b200``), all four in the default partition ``gpu``; slurmdbd, so sacct lists typed
    AllocTRES (``gres/gpu:b200=2``)."""
    with SlurmCluster(nodes=4, gpus_per_node=8, gres_types=KIND_TYPES, accounting=True,
                      accounts=("llm", "vision")) as cluster:
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
