"""kill -9 of a real server, again and again, in the middle of a burst of submissions, while
work runs.

Clients retry every submission that got no answer with its Idempotency-Key until it is
acknowledged. After the restarts: every submission is acknowledged and stored exactly once,
no workload ever ran two attempts at once, and the ledger (GPU-seconds charged per attempt)
matches what the processes themselves recorded, up to process start/stop latency.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from server_proc import Server, free_port, write_config
from store_db import BACKENDS, pg_url, reset_pg

from apportion.core import FINAL, Status
from apportion.service.store import Store

SUBMISSIONS = 200
KILLS_AT = (40, 90, 140)  # acknowledged submissions before each kill -9
# bound on launch + exit bookkeeping per attempt: measured at most 0.78 s over 400 attempts
# (both databases) on a loaded 2-core machine; twice that is the bound
LATENCY_S = 1.5
FINISH_DEADLINE_S = 300.0  # bounds a hang only


def workload_command(record: Path, seconds: float) -> list[str]:
    """Appends ``start|end <workload> <attempt> <gpus> <time>`` lines to ``record``; on
    SIGTERM (preemption) it records its end and exits at once."""
    script = (
        f'rec() {{ echo "$1 $APPORTION_WORKLOAD_ID $APPORTION_ATTEMPT $APPORTION_GPUS '
        f'$EPOCHREALTIME" >> {record}; }}; '
        "trap 'trap \"\" TERM; rec end; exit 143' TERM; rec start; "
        f"sleep {seconds} & wait; trap '' TERM; rec end"
    )
    # bash: $EPOCHREALTIME needs no subprocess (a SIGTERM to the group could kill one)
    return ["bash", "-c", script]


class Burst:
    """Submits in a few client threads, each submission with its own Idempotency-Key; a
    request that got no answer (or a 5xx) waits for the server to be back and is sent
    again, with the same key, until it is acknowledged."""

    def __init__(self, server: Server, record: Path) -> None:
        self.server = server
        self.record = record
        self.acked: dict[int, str] = {}  # submission -> workload id
        self.retries = 0
        self.lock = threading.Lock()
        self.next = 0
        rng = random.Random(7)
        self.bodies = [
            {
                "budget": rng.choice(["ai/llm", "ai/vision"]),
                "gpus": rng.choice([1, 1, 2, 4]),
                # unallocated resumable work gets displaced by allocated work: requeues
                "min_runtime": rng.choice([60, 60, 0]),
                "resumable": True,
                "command": workload_command(record, rng.choice([0.1, 0.2, 0.3])),
            }
            for _ in range(SUBMISSIONS)
        ]

    def run(self, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=self.server.url, headers=headers, timeout=30) as client:
            while True:
                with self.lock:
                    i = self.next
                    self.next += 1
                if i >= SUBMISSIONS:
                    return
                key = {"Idempotency-Key": f"burst-{i}"}
                deadline = time.monotonic() + FINISH_DEADLINE_S
                while True:
                    assert time.monotonic() < deadline, f"submission {i}: never acknowledged"
                    try:
                        r = client.post("/v1/workloads", json=self.bodies[i], headers=key)
                    except httpx.TransportError:
                        r = None
                    if r is not None and r.status_code < 500:
                        break
                    with self.lock:
                        self.retries += 1
                    self._wait_back(client)
                assert r.status_code == 201, r.text
                with self.lock:
                    self.acked[i] = r.json()["id"]

    def _wait_back(self, client: httpx.Client) -> None:
        deadline = time.monotonic() + FINISH_DEADLINE_S
        while time.monotonic() < deadline:
            try:
                if client.get("/v1/health").status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)


def read_records(record: Path) -> dict[tuple[str, int], dict[str, float]]:
    """(workload, attempt) -> {"start", "end", "gpus"} from the processes' own lines."""
    runs: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for line in record.read_text().splitlines():
        kind, wid, attempt, gpus, t = line.split()
        run = runs[(wid, int(attempt))]
        assert kind not in run, f"{wid} attempt {attempt}: {kind} recorded twice"
        run[kind] = float(t)
        run["gpus"] = float(gpus)
    return runs


@pytest.mark.parametrize("backend", BACKENDS)
def test_repeated_kill_minus_9_mid_burst_loses_nothing_and_charges_exactly(
    backend: str, tmp_path: Path
) -> None:
    """Across three kill -9 every submission, retried with its key, is acknowledged and
    stored once; attempts never overlap; every attempt is charged for the time its process
    really ran (plus bounded launch/exit latency)."""
    db_url = ""
    if backend == "postgres":
        db_url = pg_url()
        reset_pg(db_url)
    config = write_config(tmp_path / "apportion.toml", free_port(), db_url=db_url)
    record = tmp_path / "runs.txt"
    record.touch()
    server = Server(config, tmp_path / "server.log")
    server.start()
    try:
        burst = Burst(server, record)
        token = server.token("alice")
        clients = [threading.Thread(target=burst.run, args=(token,)) for _ in range(4)]
        for c in clients:
            c.start()
        for at in KILLS_AT:
            while len(burst.acked) < at:
                time.sleep(0.005)
            server.kill9()
            server.start()
        for c in clients:
            c.join()
        acked = set(burst.acked.values())
        assert sorted(burst.acked) == list(range(SUBMISSIONS))
        assert len(acked) == SUBMISSIONS  # one workload per submission, none answered twice
        store = Store(db_url or f"sqlite:///{tmp_path / 'data' / 'apportion.db'}")
        deadline = time.monotonic() + FINISH_DEADLINE_S
        while True:
            rows = {w.id: w for w in store.list_workloads(limit=10_000)}
            if all(w.status in FINAL for w in rows.values()):
                break
            assert time.monotonic() < deadline, "workloads did not finish"
            time.sleep(0.2)
    finally:
        server.stop()

    # every submission is in the store once, and ran to completion; some were retried
    assert set(rows) == acked
    assert {rows[w].status for w in acked} == {Status.COMPLETED}
    assert burst.retries > 0

    # no workload ran two attempts at once (from the processes' own timestamps)
    runs = read_records(record)
    by_workload: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (wid, _), run in runs.items():
        by_workload[wid].append((run.get("start", run["end"]), run["end"]))
    for wid, spans in by_workload.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start, f"{wid}: two attempts overlapped"

    # the ledger equals the GPU-seconds actually run, attempt by attempt
    charged_total = ran_total = 0.0
    for w in rows.values():
        for a in store.get_workload(w.id).attempts:
            assert a.ended_at is not None and a.gpu_seconds is not None
            charged_total += a.gpu_seconds
            run = runs.get((w.id, a.n))
            if run is None:
                # never launched (crash before the launch: nothing charged), or stopped
                # while its wrapper was starting: charged the reservation, no longer
                assert a.gpu_seconds <= a.gpus_held * LATENCY_S, f"{w.id} attempt {a.n}"
                continue
            start = run.get("start", run["end"])
            ran_total += run["gpus"] * (run["end"] - start)
            assert a.started_at <= start and run["end"] <= a.ended_at, (
                f"{w.id} attempt {a.n}: charged [{a.started_at}, {a.ended_at}] does not cover "
                f"the run [{start}, {run['end']}]"
            )
            assert (a.ended_at - a.started_at) - (run["end"] - start) <= LATENCY_S
    assert {k for k in runs if k[0] in rows} <= {
        (w.id, a.n) for w in rows.values() for a in store.get_workload(w.id).attempts
    }
    held = sum(a.gpus_held for w in rows.values() for a in store.get_workload(w.id).attempts)
    assert ran_total <= charged_total <= ran_total + held * LATENCY_S
    store.close()
