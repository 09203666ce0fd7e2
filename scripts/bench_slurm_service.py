#!/usr/bin/env python3
"""Benchmark apportion serve on Slurm: a real server (SQLite) on a private Slurm cluster.

Prints:
* latency from ``POST /v1/workloads`` answered (2xx) to the job RUNNING under Slurm (polled
  with squeue every 20 ms) and to the command's first line, over ``--jobs`` submissions
  made one at a time (median, p90, max);
* a burst of one-GPU submissions that fits the cluster (``--burst``, default: every GPU)
  from 4 client threads: submissions accepted per second by the API, and starts per
  second into Slurm (sbatch calls, and jobs RUNNING);
* a sustained run of ``--sustained`` short jobs (1 s each, 4 threads submitting): accepted
  per second, and workloads completed per second end to end.

Run as root after scripts/install-system.sh:
    .venv/bin/python scripts/bench_slurm_service.py [--jobs 20] [--sustained 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# the Slurm test harness lives with the tests (tests/harness), not in the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness.slurm_cluster import SlurmCluster  # noqa: E402
from harness.slurm_service import SlurmService  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(name: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(f"{name:<44} n={len(ms):<4} median {statistics.median(ms):8.1f} ms   "
          f"p90 {pct(ms, 0.9):8.1f} ms   max {max(ms):8.1f} ms")


def slurm_states(cluster: SlurmCluster) -> dict[str, str]:
    """Job name -> Slurm state of every job the controller holds."""
    out = cluster.run(["squeue", "-h", "-t", "all", "-o", "%j %T"]).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def burst(service: SlurmService, bodies: list[dict[str, Any]], threads: int = 4
          ) -> tuple[list[str], list[float]]:
    """Submit ``bodies`` from ``threads`` clients; ids and 2xx times, in submission order."""
    ids: list[str] = [""] * len(bodies)
    times: list[float] = [0.0] * len(bodies)
    lock = threading.Lock()
    nxt = [0]

    def work() -> None:
        client = service.client("alice")
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(bodies):
                return
            r = client.post("/v1/workloads", json=bodies[i])
            if r.status_code != 201:
                raise SystemExit(f"submit: {r.status_code} {r.text}")
            ids[i], times[i] = r.json()["id"], time.time()

    service.client("alice")  # one shared client; httpx.Client is thread-safe
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return ids, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="one-at-a-time submissions")
    parser.add_argument("--burst", type=int, default=0, help="burst size (default: all GPUs)")
    parser.add_argument("--sustained", type=int, default=200, help="short jobs, end to end")
    args = parser.parse_args()

    with SlurmCluster(nodes=4, gpus_per_node=8) as cluster, \
            tempfile.TemporaryDirectory(prefix="bench-slurm-service-") as tmp, \
            SlurmService(cluster, Path(tmp) / "service", interval_s=1.0) as service:
        marks = Path(tmp) / "marks"
        marks.mkdir()
        marks.chmod(0o777)
        gpus = cluster.nodes * cluster.gpus_per_node
        print(f"cluster: {cluster.nodes} nodes x {cluster.gpus_per_node} GPUs; "
              f"apportion serve at {service.url} (SQLite, timer pass {service.interval_s} s)")

        # 1. latency, one submission at a time
        to_running, to_command, http = [], [], []
        for _ in range(args.jobs):
            body = {"budget": "ai/llm", "gpus": 1, "min_runtime": 60, "command": [
                "bash", "-c", f"echo $EPOCHREALTIME > {marks}/$APPORTION_WORKLOAD_ID; sleep 600"]}
            t0 = time.time()
            wid = service.submit(**body)["id"]
            t1 = time.time()
            http.append(t1 - t0)
            name = wid  # the Slurm job is named after its workload
            deadline = time.monotonic() + 60
            while slurm_states(cluster).get(name) != "RUNNING":
                if time.monotonic() > deadline:
                    raise SystemExit(f"{wid}: not RUNNING in Slurm after 60 s")
                time.sleep(0.02)
            to_running.append(time.time() - t1)
            mark = marks / wid
            while not mark.exists() or not mark.read_text().strip():
                time.sleep(0.01)
            to_command.append(float(mark.read_text()) - t1)
        summary("submit HTTP round trip", http)
        summary("2xx -> RUNNING in Slurm (squeue, 20 ms poll)", to_running)
        summary("2xx -> command's first line", to_command)
        service.cancel_all()
        cluster.wait_no_jobs_running()

        # 2. a burst that fits the cluster: API acceptance and starts into Slurm
        n = args.burst or gpus
        bodies = [{"budget": "ai/vision" if i % 3 else "ai/llm", "gpus": 1, "min_runtime": 60,
                   "command": ["sleep", "600"]} for i in range(n)]
        t0 = time.time()
        ids, acked = burst(service, bodies)
        names = set(ids)
        while True:
            states = slurm_states(cluster)
            if all(states.get(nm) == "RUNNING" for nm in names):
                break
            time.sleep(0.02)
        all_running = time.time()
        starts = sorted(service.workload(w)["attempts"][-1]["started_at"] for w in ids)
        print(f"burst of {n} one-GPU submissions (4 threads):")
        print(f"  accepted by the API: {n / (max(acked) - t0):8.1f} /s "
              f"({max(acked) - t0:.2f} s for all)")
        span = max(starts[-1] - starts[0], 1e-9)
        print(f"  launched into Slurm (sbatch): {n / max(starts[-1] - t0, 1e-9):8.1f} /s from the "
              f"first submission ({span:.2f} s from first to last launch)")
        print(f"  RUNNING in Slurm: all {n} after {all_running - t0:.2f} s "
              f"({n / (all_running - t0):.1f} starts/s)")
        service.cancel_all()
        cluster.wait_no_jobs_running()

        # 3. sustained: more short jobs than GPUs, end to end
        m = args.sustained
        bodies = [{"budget": "ai/vision" if i % 3 else "ai/llm", "gpus": 1, "min_runtime": 60,
                   "command": ["sleep", "1"]} for i in range(m)]
        t0 = time.time()
        ids, acked = burst(service, bodies)
        service.wait(lambda: not service.get("/v1/workloads?status=pending,running,stopping"),
                     "all sustained jobs done", timeout_s=600)
        done = time.time()
        rows = [service.workload(w) for w in ids]
        completed = sum(1 for w in rows if w["status"] == "completed")
        print(f"sustained: {m} one-GPU jobs of 1 s on {gpus} GPUs (4 threads submitting):")
        print(f"  accepted by the API: {m / (max(acked) - t0):8.1f} /s")
        print(f"  completed end to end: {completed}/{m} in {done - t0:.1f} s = "
              f"{completed / (done - t0):.1f} /s (bound by capacity: {gpus} GPUs / 1 s of work "
              f"+ Slurm's start and end)")


if __name__ == "__main__":
    main()
