"""apportion serve on the real two-kind Slurm cluster (gpu1-2 ``gpu:h100:8``, gpu3-4
``gpu:b200:8``), end to end: hosts in pools by their gres type, work routed by the kind it
asks for, and usage charged at the configured billing weight of the kind it ran on."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.slurm_cluster import SlurmCluster
from harness.slurm_service import SlurmService

pytestmark = pytest.mark.slurm

B200_WEIGHT = 2.2
BILLING = f"[billing]\nH100 = 1.0\nB200 = {B200_WEIGHT}\n"


@pytest.fixture(scope="module")
def service(
    kinds_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlurmService]:
    """One server on the two-kind cluster, B200 billed at 2.2 and H100 at 1."""
    with SlurmService(kinds_cluster, tmp_path_factory.mktemp("kinds-service"),
                      extra_config=BILLING) as svc:
        yield svc
        svc.cancel_all()
    kinds_cluster.run(["scancel", "--user", str(os.getuid())], check=False)
    kinds_cluster.wait_no_jobs_running()


def ledger_charged_s(service: SlurmService) -> dict[str, float]:
    """Charged units (GPU-seconds times billing) of each budget in the lookback window, from
    the scheduler's ledger: what fair share ranks by."""
    usage = service.get("/v1/budgets/usage")
    assert usage["source"] == "scheduler", usage
    assert usage["billed"] is True  # B200 is billed 2.2
    return {b["path"]: b["charged_units"] * 3600.0 for b in usage["budgets"]}


def test_hosts_are_in_the_pool_of_their_gres_type(service: SlurmService) -> None:
    """GET /v1/hosts: gpu1-2 are kind H100, gpu3-4 B200, all in the default cluster."""
    hosts = service.hosts()
    assert {n: (h["cluster"], h["kind"]) for n, h in hosts.items()} == {
        "gpu1": ("default", "H100"), "gpu2": ("default", "H100"),
        "gpu3": ("default", "B200"), "gpu4": ("default", "B200"),
    }


def test_b200_workload_runs_on_a_b200_node_and_is_charged_at_the_b200_weight(
    service: SlurmService,
) -> None:
    """A workload asking for gpu_kind ["B200"] runs on gpu3 or gpu4 as a Slurm job with
    gres/gpu:b200; one asking for H100 runs on gpu1 or gpu2 with gres/gpu:h100.

    Charges, against each attempt's recorded GPU-seconds: `report usage` charges exactly
    2.2 units per B200 GPU-second and 1 per H100 one; the ledger charges the same weight for
    the run as the scheduler saw it, which ends when a pass observed the end: at least the
    recorded run, at most the run plus the time until the test saw it completed."""
    cmd = ["bash", "-c", "echo on=$SLURMD_NODENAME; sleep 3"]
    b200 = service.submit(budget="ai/llm", gpus=2, min_runtime=60, gpu_kind=["B200"],
                          command=cmd)
    h100 = service.submit(budget="ai/vision", gpus=2, min_runtime=60, gpu_kind=["H100"],
                          command=cmd)
    done, seen_at = {}, {}
    for kind, w in (("b200", b200), ("h100", h100)):
        done[kind] = service.wait_workload(w["id"], "completed")
        seen_at[kind] = time.time()
    for kind, nodes in (("b200", ("gpu3", "gpu4")), ("h100", ("gpu1", "gpu2"))):
        (attempt,) = done[kind]["attempts"]
        ((host, gpus, _),) = attempt["placement"]
        assert host in nodes and gpus == 2, attempt
        job = service.slurm_job(attempt["handle"])
        assert (job["NodeList"], job["TresPerNode"]) == (host, f"gres:gpu:{kind}:2"), job
        assert service.logs(done[kind]["id"]).strip() == f"on={host}"

    used = {kind: done[kind]["attempts"][0]["gpu_seconds"] for kind in done}
    assert used["b200"] >= 2 * 3 and used["h100"] >= 2 * 3  # each ran its 3 s on 2 GPUs
    report = {r["budget"]: r for r in service.get("/v1/reports/usage?from=1d")["budgets"]}
    for budget, kind, weight in (("ai/llm", "b200", B200_WEIGHT), ("ai/vision", "h100", 1.0)):
        row = report[budget]
        assert row["charged_gpu_hours"] * 3600 == pytest.approx(used[kind], rel=1e-9)
        assert row["charged_units"] * 3600 == pytest.approx(weight * used[kind], rel=1e-9)

    ledger = ledger_charged_s(service)
    for budget, kind, weight in (("ai/llm", "b200", B200_WEIGHT), ("ai/vision", "h100", 1.0)):
        lag = seen_at[kind] - done[kind]["attempts"][0]["ended_at"]
        assert weight * used[kind] <= ledger[budget] + 1e-9
        assert ledger[budget] <= weight * (used[kind] + 2 * lag), (budget, lag)


def test_nodes_of_a_gres_type_without_a_kind_are_down_with_the_reason(
    kinds_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """With [executor.slurm] kinds = {H100 = "h100"}, the b200 nodes have no kind: the
    service lists them down with Slurm's gres and the map as the reason, and a submission
    asking for B200 is refused naming the kinds there are. Restarted without the map, the
    same database has them healthy, of kind B200."""
    with SlurmService(kinds_cluster, tmp_path, slurm_options='kinds = { H100 = "h100" }',
                      extra_config=BILLING) as svc:
        hosts = svc.hosts()
        assert {n: (h["state"], h["kind"]) for n, h in hosts.items()} == {
            "gpu1": ("healthy", "H100"), "gpu2": ("healthy", "H100"),
            "gpu3": ("down", "gpu"), "gpu4": ("down", "gpu"),
        }
        assert hosts["gpu3"]["reason"] == (
            "executor: gres gpu:b200:8: gres type 'b200' is not in executor.slurm kinds "
            "(H100 = 'h100')"
        )
        r = svc.client("alice").post("/v1/workloads", json={
            "budget": "ai/llm", "gpus": 1, "min_runtime": 60, "gpu_kind": ["B200"],
            "command": ["true"]})
        assert r.status_code == 422, r.text
        assert "B200" in r.text and "H100" in r.text, r.text
        # the map fixed, after a restart: the b200 nodes are healthy hosts of kind B200
        svc.stop()
        svc.slurm_options = ""
        svc.start()
        for node in ("gpu3", "gpu4"):
            h = svc.wait_host(node, "healthy")
            assert (h["kind"], h["cluster"]) == ("B200", "default"), h
