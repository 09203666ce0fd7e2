#!/usr/bin/env python3
"""Benchmark of the live service: scheduling pass latency and HTTP submission throughput.

    .venv/bin/python scripts/bench_service.py [--pending 10000] [--passes 40]
        [--requests 1000] [--clients 4] [--pg-url URL]
    scripts/with-services.sh .venv/bin/python scripts/bench_service.py   # adds PostgreSQL

1. **Pass latency**: a full cluster (128 hosts x 8 GPUs, protected work on every GPU) and
   ``--pending`` workloads waiting in 15 leaf budgets; the wall time of
   ``Scheduler.step()`` (store sync + executor observation + decide, all of it) over
   ``--passes`` passes, p50 and p99, with the share of it spent in ``decide``.
2. **Submissions per second**: a real ``apportion serve`` process (memory executor, so no
   processes are spawned) on loopback; ``--clients`` threads post ``--requests`` workloads
   in total; each answer is a durable commit, and each submission wakes the scheduler.

Runs against SQLite, and against PostgreSQL when ``--pg-url`` or APPORTION_TEST_PG_URL is
set. Prints one table; nothing is asserted (figures depend on the machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "service"))  # the test helpers start real servers

from server_proc import Server, free_port, write_config  # noqa: E402

from apportion.core import PolicyConfig  # noqa: E402
from apportion.core import policy as core_policy  # noqa: E402
from apportion.service import scheduler as sched_mod  # noqa: E402
from apportion.service.clock import FakeClock  # noqa: E402
from apportion.service.executors.memory import MemoryExecutor  # noqa: E402
from apportion.service.scheduler import Scheduler  # noqa: E402
from apportion.service.store import Store  # noqa: E402
from apportion.service.store.models import WorkloadModel  # noqa: E402

HOSTS = 128
GPUS = 8
LEAVES = [f"p{p}/t{t}" for p in range(3) for t in range(5)]


def reset_pg(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def bulk_pending(store: Store, n: int, t: float) -> None:
    """``n`` pending workloads in one transaction (the bench's setup, not what it measures)."""
    with store._tx() as s:  # noqa: SLF001 - setup shortcut; add_workload is one commit each
        for i in range(n):
            m = WorkloadModel(
                budget=LEAVES[i % len(LEAVES)], user="bench", gpus=[1, 2, 4, 8][i % 4],
                min_runtime=3600.0, resumable=True, priority=0, checkpoint_interval=0.0,
                command=["train"], submit_time=t + i * 1e-3, queued_at=t + i * 1e-3,
                status="pending", cancel_requested=False, attempts_count=0, created_at=t,
            )
            s.add(m)
            s.flush()
            m.id = f"w-{m.seq:06d}"


def bench_pass(url: str, pending: int, passes: int) -> dict[str, float]:
    clock = FakeClock(0.0)
    store = Store(url, clock=clock.now)
    store.migrate()
    for leaf in LEAVES:
        store.add_budget(leaf, 1.0, "bench", create_parents=True)
    hosts = [(f"h{i:03d}", GPUS) for i in range(HOSTS)]
    for name, gpus in hosts:
        store.add_host(name, gpus, "bench", at=0.0)
    executor = MemoryExecutor(hosts, clock)
    config = PolicyConfig()
    sched = Scheduler(store, executor, config, clock, grace_s=0.0)
    sched.start()
    # fill every GPU with protected allocated work (8 h minimum runtime): nothing can move
    for i in range(HOSTS):
        store.add_workload(budget=LEAVES[i % len(LEAVES)], gpus=GPUS, min_runtime=8 * 3600.0,
                           submit_time=0.0, command=["train"], actor="bench")
    sched.step(0.0)
    bulk_pending(store, pending, 1.0)
    clock.set(10.0)
    sched.step(10.0)  # loads the queue
    decide_s: list[float] = []
    real_decide = core_policy.decide

    def timed_decide(*args: object) -> object:
        t0 = time.perf_counter()
        try:
            return real_decide(*args)  # type: ignore[arg-type]
        finally:
            decide_s.append(time.perf_counter() - t0)

    sched_mod.decide = timed_decide  # type: ignore[assignment]
    try:
        walls = []
        for k in range(passes):
            t = 20.0 + 5.0 * k
            clock.set(t)
            t0 = time.perf_counter()
            sched.step(t)
            walls.append(time.perf_counter() - t0)
    finally:
        sched_mod.decide = real_decide
    st = sched.state
    assert st is not None and len(st.pending) == pending, len(st.pending) if st else None
    store.close()
    return {
        "p50_ms": 1000 * float(np.percentile(walls, 50)),
        "p99_ms": 1000 * float(np.percentile(walls, 99)),
        "decide_share": sum(decide_s) / sum(walls),
    }


def bench_http(tmp: Path, db_url: str, requests: int, clients: int) -> dict[str, float]:
    config = write_config(tmp / "apportion.toml", free_port(), db_url=db_url, hosts=16,
                          interval_s=5.0, executor="memory")
    server = Server(config, tmp / "server.log")
    server.start()
    try:
        token = server.token("alice")
        counter = iter(range(requests))
        lock = threading.Lock()
        latencies: list[float] = []
        errors = 0

        def client() -> None:
            nonlocal errors
            headers = {"Authorization": f"Bearer {token}"}
            body = {"budget": "ai/llm", "gpus": 1, "min_runtime": 600, "command": ["true"]}
            with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        return
                    t0 = time.perf_counter()
                    r = c.post("/v1/workloads", json=body)
                    dt = time.perf_counter() - t0
                    with lock:
                        latencies.append(dt)
                        errors += r.status_code != 201

        threads = [threading.Thread(target=client) for _ in range(clients)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
    finally:
        server.stop()
    return {
        "per_s": requests / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * float(np.percentile(latencies, 99)),
        "errors": float(errors),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--passes", type=int, default=40)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--pg-url", default=os.environ.get("APPORTION_TEST_PG_URL", ""))
    args = ap.parse_args()
    backends = [("sqlite", "")]
    if args.pg_url:
        backends.append(("postgresql", args.pg_url))
    print(f"machine: {os.cpu_count()} CPUs; cluster {HOSTS}x{GPUS} GPUs, "
          f"{len(LEAVES)} leaf budgets, {args.pending} pending")
    rows = []
    for name, url in backends:
        with tempfile.TemporaryDirectory(prefix="apportion-bench-") as d:
            tmp = Path(d)
            if url:
                reset_pg(url)
            p = bench_pass(url or f"sqlite:///{tmp / 'pass.db'}", args.pending, args.passes)
            if url:
                reset_pg(url)
            h = bench_http(tmp, url, args.requests, args.clients)
        rows.append((name, p, h))
        print(f"{name}: pass p50 {p['p50_ms']:.0f} ms, p99 {p['p99_ms']:.0f} ms "
              f"(decide {100 * p['decide_share']:.0f}%); submissions {h['per_s']:.0f}/s "
              f"(latency p50 {h['p50_ms']:.1f} ms, p99 {h['p99_ms']:.1f} ms, "
              f"{h['errors']:.0f} errors)", flush=True)
    print()
    print("| database | pass p50 (ms) | pass p99 (ms) | decide share | submissions/s "
          "| submit p50 (ms) | submit p99 (ms) |")
    print("|---|---|---|---|---|---|---|")
    for name, p, h in rows:
        print(f"| {name} | {p['p50_ms']:.0f} | {p['p99_ms']:.0f} | "
              f"{100 * p['decide_share']:.0f}% | {h['per_s']:.0f} | {h['p50_ms']:.1f} | "
              f"{h['p99_ms']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
