"""SlurmExecutor on a real cluster of two GPU kinds: gpu1-2 ``gpu:h100:8``, gpu3-4
``gpu:b200:8`` (each kind also in a partition of its own; all in the default ``gpu``)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors.identity import Identity
from apportion.service.executors.slurm import SlurmExecutor
from harness.slurm_cluster import SlurmCluster

from .helpers import wait_for_state

pytestmark = pytest.mark.slurm


def kinds_executor(on: SlurmCluster, tmp_path: Path, **options: object) -> SlurmExecutor:
    return SlurmExecutor(jobs_dir=tmp_path / "jobs", env=on.env,
                         identity=Identity(single_user=True), **options)  # type: ignore[arg-type]


@pytest.fixture
def clean(kinds_cluster: SlurmCluster) -> Iterator[None]:
    """Every job of the test is cancelled afterwards, so the nodes are free."""
    yield
    kinds_cluster.run(["scancel", "--user", str(os.getuid())], check=False)
    kinds_cluster.wait_no_jobs_running()


def scontrol_job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    out = cluster.run(["scontrol", "-o", "show", "job", job_id]).stdout.strip()
    return dict(item.partition("=")[::2] for item in out.split() if "=" in item)


def sacct_job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """The job's sacct line (Partition, NodeList, AllocTRES, State) once it has ended and
    has its partition (slurmctld reports to slurmdbd asynchronously, the partition last)."""
    fields = ("JobID", "Partition", "NodeList", "AllocTRES", "State")
    deadline = time.monotonic() + 60
    while True:
        out = cluster.run(["sacct", "--parsable2", "--noheader", "-j", job_id, "-X",
                           f"--format={','.join(fields)}"]).stdout
        rows = [dict(zip(fields, ln.split("|"), strict=True)) for ln in out.splitlines()]
        if rows and rows[0]["State"] == "COMPLETED" and rows[0]["Partition"]:
            return rows[0]
        assert time.monotonic() < deadline, f"sacct: job {job_id} not done in a partition: {out}"
        time.sleep(0.5)


def test_inventory_reports_each_nodes_kind_from_its_typed_gres(
    kinds_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """gpu:h100:8 reads as kind H100, gpu:b200:8 as B200 (the type in upper case); every
    node is in the executor's cluster ("" by default: the config's)."""
    hosts = kinds_executor(kinds_cluster, tmp_path).inventory()
    assert [(h.name, h.gpus, h.state, h.cluster, h.kind) for h in hosts] == [
        ("gpu1", 8, "healthy", "", "H100"), ("gpu2", 8, "healthy", "", "H100"),
        ("gpu3", 8, "healthy", "", "B200"), ("gpu4", 8, "healthy", "", "B200"),
    ]
    named = kinds_executor(kinds_cluster, tmp_path, cluster="west").inventory()
    assert {h.cluster for h in named} == {"west"}


def test_kinds_map_names_the_kinds_and_a_type_it_lacks_is_reported_down(
    kinds_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """With kinds = {Hopper = "h100"}, gpu1-2 are kind Hopper; gpu3-4 (b200, not in the map)
    read down with a reason naming the type and the map, so nothing is placed there."""
    hosts = kinds_executor(kinds_cluster, tmp_path, kinds={"Hopper": "h100"}).inventory()
    assert [(h.name, h.state, h.kind) for h in hosts] == [
        ("gpu1", "healthy", "Hopper"), ("gpu2", "healthy", "Hopper"),
        ("gpu3", "down", ""), ("gpu4", "down", ""),
    ]
    assert hosts[2].reason == (
        "gres gpu:b200:8: gres type 'b200' is not in executor.slurm kinds (Hopper = 'h100')"
    )


def test_launch_of_kind_b200_runs_on_its_b200_node_with_typed_gres(
    kinds_cluster: SlurmCluster, tmp_path: Path, clean: None
) -> None:
    """A Launch of kind B200 on gpu3 asks for --gres=gpu:b200:2 in partition b200 (the first
    partition holding gpu3: none is configured); it runs there, and sacct's AllocTRES has
    gres/gpu:b200=2."""
    ex = kinds_executor(kinds_cluster, tmp_path)
    ex.inventory()  # as every scheduling pass does before it launches
    log = tmp_path / "b200.log"
    handle = ex.launch(Launch(
        workload_id="w-b200", attempt=1, command=["bash", "-c", "echo on=$SLURMD_NODENAME"],
        slots=(HostSlots("gpu3", (0, 1)),), log_path=str(log), cluster="", kind="B200",
    ))
    obs = wait_for_state(ex, handle, AttemptState.EXITED)
    assert obs.exit_code == 0
    assert log.read_text().strip() == "on=gpu3"
    job = scontrol_job(kinds_cluster, handle)
    assert (job["NodeList"], job["Partition"], job["TresPerNode"]) == (
        "gpu3", "b200", "gres:gpu:b200:2")
    acct = sacct_job(kinds_cluster, handle)
    assert (acct["Partition"], acct["NodeList"]) == ("b200", "gpu3")
    assert "gres/gpu:b200=2" in acct["AllocTRES"].split(","), acct


def test_launch_without_kind_asks_for_untyped_gpus_as_before(
    kinds_cluster: SlurmCluster, tmp_path: Path, clean: None
) -> None:
    """A Launch with no kind (or one no node has as a gres type, like a config's default
    kind of untyped GPUs) asks for --gres=gpu:N in the default partition, as before; Slurm
    still accounts the node's type."""
    ex = kinds_executor(kinds_cluster, tmp_path)
    ex.inventory()
    for n, kind in enumerate(("", "gpu")):
        handle = ex.launch(Launch(
            workload_id=f"w-any-{n}", attempt=1, command=["true"],
            slots=(HostSlots("gpu3", (0,)),), log_path=str(tmp_path / f"{n}.log"), kind=kind,
        ))
        assert wait_for_state(ex, handle, AttemptState.EXITED).exit_code == 0
        job = scontrol_job(kinds_cluster, handle)
        assert (job["NodeList"], job["Partition"], job["TresPerNode"]) == (
            "gpu3", "gpu", "gres:gpu:1")
        assert "gres/gpu:b200=1" in sacct_job(kinds_cluster, handle)["AllocTRES"].split(",")


def test_configured_partition_wins_for_typed_launches(
    kinds_cluster: SlurmCluster, tmp_path: Path, clean: None
) -> None:
    """With partition = "gpu" configured, a B200 launch asks for gpu:b200 in partition gpu."""
    ex = kinds_executor(kinds_cluster, tmp_path, partition="gpu")
    ex.inventory()
    handle = ex.launch(Launch(
        workload_id="w-part", attempt=1, command=["true"], slots=(HostSlots("gpu4", (0,)),),
        log_path=str(tmp_path / "p.log"), kind="B200",
    ))
    assert wait_for_state(ex, handle, AttemptState.EXITED).exit_code == 0
    job = scontrol_job(kinds_cluster, handle)
    assert (job["NodeList"], job["Partition"], job["TresPerNode"]) == (
        "gpu4", "gpu", "gres:gpu:b200:1")


def test_whole_host_b200_gang_takes_both_b200_nodes_in_their_partition(
    kinds_cluster: SlurmCluster, tmp_path: Path, clean: None
) -> None:
    """A 16-GPU B200 gang on gpu3 and gpu4 is one job of --gres=gpu:b200:8 per node,
    exclusive, in partition b200 (the one both nodes share before the default)."""
    ex = kinds_executor(kinds_cluster, tmp_path)
    ex.inventory()
    handle = ex.launch(Launch(
        workload_id="w-gang", attempt=1, command=["true"], log_path=str(tmp_path / "g.log"),
        slots=(HostSlots("gpu3", tuple(range(8))), HostSlots("gpu4", tuple(range(8)))),
        whole_hosts=True, kind="B200",
    ))
    assert wait_for_state(ex, handle, AttemptState.EXITED).exit_code == 0
    job = scontrol_job(kinds_cluster, handle)
    assert (job["NodeList"], job["Partition"], job["TresPerNode"], job["OverSubscribe"]) == (
        "gpu[3-4]", "b200", "gres:gpu:b200:8", "NO")
    assert "gres/gpu:b200=16" in sacct_job(kinds_cluster, handle)["AllocTRES"].split(",")
