"""kill -9 of a real server, again and again, in the middle of a burst of submissions, while
work runs.

Clients retry every submission that got no answer with its Idempotency-Key until it is
acknowledged. After the restarts: every submission is acknowledged and stored exactly once,
no workload ever ran two attempts at once, and each attempt's charge (GPU-seconds in the
ledger) is exactly its GPUs from its launch to the exit its executor recorded, to the
microsecond; that span holds what the process itself recorded, with the launch and the
wrapper's overhead on each side within bounds measured on a loaded machine.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import Server, free_port, write_config
from store_db import BACKENDS, pg_url, reset_pg

from apportion.core import FINAL, Status
from apportion.service.store import Store

SUBMISSIONS = 200
KILLS_AT = (40, 90, 140)  # acknowledged submissions before each kill -9
# the charge is compared with the executor's own record, which the store keeps as floats of
# the same clock: equal up to a microsecond
CLOCK_S = 1e-6
# What lies between the charged span and the process's own record, bounded at twice the
# most measured over 401 attempts (both databases) on a 2-core machine at load 11-13:
LAUNCH_S = 1.6  # launch -> the wrapper's first instruction (Python's start-up): 0.81 s
WRAPPER_START_S = 1.5  # the wrapper's start -> the command's first line (fork, exec): 0.74 s
WRAPPER_END_S = 0.35  # the command's last line -> the wrapper's exit record: 0.17 s
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


def read_exits(run_dir: Path) -> dict[str, dict[str, Any]]:
    """handle -> the exit record the local executor's wrapper wrote for that attempt
    (``started_at`` and ``ended_at`` by the wrapper's clock; ``voided`` for an attempt
    stopped before its wrapper claimed it)."""
    out: dict[str, dict[str, Any]] = {}
    for path in run_dir.rglob("*.exit"):
        ex = json.loads(path.read_text())
        assert ex["handle"] not in out, f"{path}: a second exit record for {ex['handle']}"
        out[str(ex["handle"])] = ex
    return out


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
    stored once; attempts never overlap; every attempt is charged its GPUs from its launch to
    the exit time in its executor's record (to the microsecond), nothing for one never
    launched, and that span holds its process's own start and end lines."""
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

    # the ledger is the executor's own record, attempt by attempt, and that record covers
    # what the process itself recorded
    exits = read_exits(tmp_path / "data" / "run")
    for w in rows.values():
        for a in store.get_workload(w.id).attempts:
            what = f"{w.id} attempt {a.n}"
            assert a.ended_at is not None and a.gpu_seconds is not None, what
            # the charge is exactly the GPUs held over the charged span
            assert a.gpu_seconds == pytest.approx(
                a.gpus_held * (a.ended_at - a.started_at), rel=1e-9, abs=CLOCK_S), what
            run = runs.get((w.id, a.n))
            if a.handle is None:
                # never launched (the server died before its wrapper claimed it): nothing
                # ran, nothing is charged
                assert run is None and a.gpu_seconds == 0.0, what
                continue
            # launched: it ends when the executor says it exited (the wrapper's exit record,
            # written by it even while the server was down), not when a pass noticed
            assert a.handle in exits, f"{what}: no exit record of {a.handle}"
            ex = exits[a.handle]
            assert a.ended_at == pytest.approx(ex["ended_at"], abs=CLOCK_S), what
            if run is None:
                # stopped before its command wrote a line: voided before its wrapper
                # claimed it, or signalled while starting
                assert ex.get("voided") is True or ex["signalled"] is True, what
                continue
            start = run.get("start", run["end"])
            assert run["gpus"] == a.gpus_held, what
            # launch <= the wrapper's start <= the command's first line, and its last line
            # <= the exit record, each step within its measured bound
            assert 0.0 <= ex["started_at"] - a.started_at <= LAUNCH_S, what
            assert 0.0 <= start - ex["started_at"] <= WRAPPER_START_S, what
            assert 0.0 <= ex["ended_at"] - run["end"] <= WRAPPER_END_S, what
    # every process that ran is an attempt of the ledger
    assert {k for k in runs if k[0] in rows} <= {
        (w.id, a.n) for w in rows.values() for a in store.get_workload(w.id).attempts
    }
    store.close()
