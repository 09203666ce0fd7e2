"""A Slurm accounting dump (``sacct --parsable2``) from a real cluster with slurmdbd and two GPU
kinds (gpu1 ``gpu:h100:8``, gpu2 ``gpu:b200:8``), read by the simulator's trace importer and
replayed by ``apportion simulate``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from apportion.sim.traces import load_trace
from harness.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm

FORMAT = "JobID,User,Account,Partition,Submit,Start,End,Elapsed,AllocTRES,ReqTRES,State"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A cluster with accounting runs a few jobs; returns the sacct dump and, by job id, the
    account of each GPU job that ran (in that order: gpu1, gpu2, typed on gpu2, both)."""
    out = tmp_path_factory.mktemp("sacct")
    since = (datetime.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    with SlurmCluster(nodes=2, accounting=True, accounts=("llm", "vision"),
                      gres_types=("h100", "b200")) as cluster:

        def sbatch(*args: str) -> str:
            return cluster.run(["sbatch", "--parsable", "-o", str(cluster.jobs_dir / "%j.log"),
                                *args]).stdout.strip()

        ran = {
            sbatch("--account=llm", "--gres=gpu:2", "-w", "gpu1", "--wrap", "sleep 2"): "llm",
            sbatch("--account=vision", "--gres=gpu:8", "-w", "gpu2", "--wrap",
                   "sleep 2; exit 3"): "vision",
        }
        # waits behind the job on gpu2 and is cancelled there: it never runs
        cluster.run(["scancel", sbatch("--account=llm", "--gres=gpu:8", "-w", "gpu2",
                                       "--wrap", "true")])
        # asks for the type itself, in the type's own partition
        ran[sbatch("--account=vision", "--partition=b200", "--gres=gpu:b200:3", "--wrap",
                   "sleep 1")] = "vision"
        ran[sbatch("--account=llm", "-N2", "--exclusive", "--gres=gpu:8", "--wrap",
                   "sleep 1")] = "llm"
        sbatch("--account=vision", "--wrap", "sleep 1")  # no GPUs: not a GPU job

        def accounted() -> str:
            return cluster.run(["sacct", "--parsable2", "--allusers", f"--starttime={since}",
                                f"--format={FORMAT}"]).stdout

        deadline = time.monotonic() + 60
        while True:  # slurmctld reports to slurmdbd asynchronously
            text = accounted()
            rows = [ln.split("|") for ln in text.splitlines()[1:]]
            states = [r[-1].split(" ")[0] for r in rows]
            # the partition of a job reaches slurmdbd last
            placed = all(r[3] for r in rows if "." not in r[0])
            if len(states) >= 6 and all(s in FINAL for s in states) and placed:
                break
            assert time.monotonic() < deadline, f"sacct never showed the jobs ended:\n{text}"
            time.sleep(0.5)
        path = out / "sacct.txt"
        path.write_text(text)
    yield path, ran


def test_sacct_dump_loads_as_a_trace(dump: tuple[Path, dict[str, str]]) -> None:
    """Every GPU job that ran becomes a job with its GPUs, run time and account as budget;
    job steps, the job without GPUs and the one that never started are skipped."""
    path, ran = dump
    trace = load_trace(path, format="sacct", budget_column="Account")
    by_id = {j.spec.id: j for j in trace.jobs}
    assert sorted(by_id) == sorted(ran)
    gpus = {job: by_id[job].spec.gpus for job in ran}
    assert sorted(gpus.values()) == [2, 3, 8, 16]
    for job, account in ran.items():
        assert by_id[job].spec.budget.split("/")[-1] == account
        assert 1 <= by_id[job].duration <= 10
    assert trace.skipped.get("no GPUs") == 1
    assert trace.skipped.get("job step", 0) >= 4
    others = {k: n for k, n in trace.skipped.items() if k not in ("no GPUs", "job step")}
    assert sum(others.values()) == 1, trace.skipped  # the cancelled one: never started


def test_sacct_dump_of_two_kinds_imports_each_jobs_kind_and_partition(
    dump: tuple[Path, dict[str, str]],
) -> None:
    """Typed AllocTRES gives each job its kinds (gres/gpu:h100=2 -> H100, even when it asked
    for untyped GPUs; a job on both nodes has both), and Partition its cluster."""
    path, ran = dump
    by_id = {j.spec.id: j.spec for j in load_trace(path, format="sacct").jobs}
    on_h100, on_b200, typed, both = ran
    assert [(by_id[j].gpu_kinds, by_id[j].cluster) for j in (on_h100, on_b200, typed, both)] == [
        (("H100",), "gpu"), (("B200",), "gpu"), (("B200",), "b200"), (("B200", "H100"), "gpu"),
    ]


def test_sacct_dump_replays_in_the_simulator(
    dump: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """`apportion simulate --trace DUMP --format sacct` replays it on a 4x8 cluster for a
    day and writes its summary with every imported job."""
    path, ran = dump
    out = tmp_path / "sim"
    done = subprocess.run(
        [sys.executable, "-m", "apportion.cli.main", "simulate", "--trace", str(path),
         "--format", "sacct", "--cluster", "4x8", "--days", "1", "--quiet", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "report.html").exists()
    text = json.dumps(summary)
    assert "fairshare" in text
    rows = (out / "workloads-fairshare.csv").read_text().splitlines()
    assert len(rows) == 1 + len(ran)
