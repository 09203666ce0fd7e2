#!/usr/bin/env python3
"""Submissions per second through the HTTP API, with the scheduler loop running.

    .venv/bin/python scripts/bench_api.py                       # SQLite in a temp dir
    scripts/with-services.sh sh -c \
        '.venv/bin/python scripts/bench_api.py --db "$APPORTION_TEST_PG_URL"'  # PostgreSQL

A real uvicorn server (one process, the default thread pool) serves ``create_app`` over a
Store on the given database; the Scheduler runs in its background thread with the memory
executor (nothing is launched), so each submission also wakes a scheduling pass. Client
threads POST workloads over keep-alive connections. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "service"))
from store_db import ServerThread  # noqa: E402

from apportion.service.api import create_app  # noqa: E402
from apportion.service.clock import WallClock  # noqa: E402
from apportion.service.config import parse_config  # noqa: E402
from apportion.service.executors.memory import MemoryExecutor  # noqa: E402
from apportion.service.scheduler import Scheduler  # noqa: E402
from apportion.service.store import Store  # noqa: E402
from apportion.service.store.seed import seed_store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default="", help="database URL (default: SQLite in a temp dir)")
    ap.add_argument("-n", type=int, default=400, help="submissions in total")
    ap.add_argument("--clients", type=int, default=4, help="concurrent client threads")
    ap.add_argument("--hosts", type=int, default=16, help="hosts of 8 GPUs")
    ap.add_argument("--idempotency-keys", action="store_true",
                    help="send an Idempotency-Key with every submission, as the CLI does")
    ap.add_argument("--no-scheduler", action="store_true",
                    help="do not run the scheduling loop (the API and store alone)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="apportion-bench-"))
    url = args.db or f"sqlite:///{tmp / 'apportion.db'}"
    if not url.startswith("sqlite"):
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        engine.dispose()
    config = parse_config({
        "server": {"data_dir": str(tmp)},
        "executor": {"kind": "memory"},
        "hosts": [{"name": f"h{i:03d}", "gpus": 8} for i in range(args.hosts)],
        "budgets": [{"path": f"team{t}/user{u}", "members": ["bench"]}
                    for t in range(5) for u in range(3)],
        "users": [{"name": "bench"}],
    }, source="bench")
    store = Store(url)
    store.migrate()
    token = seed_store(store, config, write_tokens=False)["bench"]
    clock = WallClock()
    executor = MemoryExecutor([(h.name, h.gpus) for h in config.hosts], clock)
    scheduler = Scheduler(store, executor, config.policy, clock)
    scheduler.start()
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run_forever, args=(1.0, stop), daemon=True)
    if not args.no_scheduler:
        loop.start()
    server = ServerThread(create_app(store, scheduler, config))

    per_client = args.n // args.clients
    latencies: list[float] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            mine = []
            for i in range(per_client):
                key = {"Idempotency-Key": f"bench-{c}-{i}"} if args.idempotency_keys else {}
                t0 = time.perf_counter()
                r = http.post("/v1/workloads", headers=key, json={
                    "budget": f"team{(c + i) % 5}/user{i % 3}", "gpus": 1 + i % 8,
                    "min_runtime": "30m", "resumable": True, "command": ["train"]})
                mine.append(time.perf_counter() - t0)
                if r.status_code != 201:
                    raise SystemExit(f"submit failed: {r.status_code} {r.text}")
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    done = len(latencies)
    latencies.sort()
    backend = url.split(":", 1)[0]
    print(f"database        {backend}")
    print(f"submissions     {done} from {args.clients} clients in {elapsed:.2f} s")
    print(f"throughput      {done / elapsed:.0f} submissions/s")
    print(f"latency p50     {1000 * statistics.median(latencies):.1f} ms")
    print(f"latency p99     {1000 * latencies[int(0.99 * (done - 1))]:.1f} ms")
    print(f"scheduler       {scheduler.passes} passes, {scheduler.errors} errors")
    stop.set()
    scheduler.wake()
    server.stop()
    if loop.is_alive():
        loop.join(timeout=30)
    store.close()


if __name__ == "__main__":
    main()
