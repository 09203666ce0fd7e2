#!/usr/bin/env python3
"""Benchmark the Slurm backend on a private throw-away cluster (4 nodes x 8 fake GPUs).

Prints: launch latency (``sbatch`` return, through ``SlurmExecutor.launch``), submit to
Slurm RUNNING and to the command's first line, sustained launches per second, jobs finished
per second, and the cost of ``observe``/``inventory``. Run as root after
scripts/install-system.sh:  .venv/bin/python scripts/bench_slurm.py [--jobs 20] [--burst 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors.slurm import SlurmExecutor

# the Slurm test harness lives with the tests (tests/harness), not in the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness.slurm_cluster import SlurmCluster  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(name: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(f"{name:<40} n={len(ms):<4} median {statistics.median(ms):8.1f} ms   "
          f"p90 {pct(ms, 0.9):8.1f} ms   max {max(ms):8.1f} ms")


def wait_slurm_state(ex: SlurmExecutor, handle: str, states: set[str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = ex.list_jobs().get(handle)
        if job is not None and job.state in states:
            return
        time.sleep(0.02)
    raise SystemExit(f"job {handle} never reached {states}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="sequential jobs for latencies")
    parser.add_argument("--burst", type=int, default=64, help="jobs launched back to back")
    args = parser.parse_args()

    with SlurmCluster(nodes=4, gpus_per_node=8) as cluster, \
            tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        ex = SlurmExecutor(Path(tmp) / "jobs", partition=cluster.partition, env=cluster.env)
        hosts = cluster.node_names
        print(f"cluster: {len(hosts)} nodes x {cluster.gpus_per_node} GPUs in {cluster.dir}")

        launch_s, running_s, command_s = [], [], []
        for i in range(args.jobs):
            log = Path(tmp) / f"seq{i}.log"
            launch = Launch(
                workload_id=f"seq{i}", attempt=1, log_path=str(log),
                slots=(HostSlots(hosts[i % len(hosts)], (0, 1)),),
                command=["bash", "-c", "date +%s.%N; sleep 1"],
            )
            t0 = time.time()
            handle = ex.launch(launch)
            t1 = time.time()
            wait_slurm_state(ex, handle, {"RUNNING", "COMPLETING", "COMPLETED"})
            t2 = time.time()
            while not log.exists() or not log.read_text().strip():
                time.sleep(0.01)
            launch_s.append(t1 - t0)
            running_s.append(t2 - t1)
            command_s.append(float(log.read_text().split()[0]) - t1)
        summary("launch (sbatch return)", launch_s)
        summary("submit -> Slurm RUNNING (20 ms poll)", running_s)
        summary("submit -> command's first line", command_s)
        cluster.wait_no_jobs_running(timeout_s=60)

        handles = []
        t0 = time.monotonic()
        for i in range(args.burst):
            handles.append(ex.launch(Launch(
                workload_id=f"burst{i}", attempt=1, log_path=str(Path(tmp) / f"b{i}.log"),
                slots=(HostSlots(hosts[i % len(hosts)], (0,)),), command=["true"],
            )))
        elapsed = time.monotonic() - t0
        print(f"{'sustained launches':<40} {args.burst} in {elapsed:.2f} s = "
              f"{args.burst / elapsed:.1f} launches/s")

        observe_s = []
        while True:
            t = time.monotonic()
            seen = ex.observe(handles)
            observe_s.append(time.monotonic() - t)
            if all(o.state is AttemptState.EXITED for o in seen.values()):
                break
            time.sleep(0.1)
        done = time.monotonic() - t0
        print(f"{'burst finished (launch to all exited)':<40} {done:.2f} s = "
              f"{args.burst / done:.1f} jobs/s")
        summary(f"observe({args.burst} handles)", observe_s)
        inv_s = []
        for _ in range(10):
            t = time.monotonic()
            ex.inventory()
            inv_s.append(time.monotonic() - t)
        summary("inventory()", inv_s)


if __name__ == "__main__":
    main()
