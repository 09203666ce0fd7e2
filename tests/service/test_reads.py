"""Reads of the scheduler (the queue, the dashboard's state, the metrics) use what the last
pass published, without the scheduler's lock, so they never wait for a pass in progress;
a caller's own writes are in its next read (docs/operations.md, "Reads during a pass")."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_env import Env, start_env

from apportion.service.executor import InventoryHost

SUBMIT = {"budget": "ai/llm", "gpus": 1, "min_runtime": "10m", "command": ["train"]}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = start_env(tmp_path, "sqlite")
    yield e
    e.close()


class Gate:
    """Holds each pass of ``env``'s scheduler in its executor's inventory (under the
    scheduler's lock, as a slow executor or store would) until :meth:`open` is called."""

    def __init__(self, env: Env) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        real = env.scheduler.executor.inventory

        def inventory() -> list[InventoryHost]:
            self.entered.set()
            assert self.go.wait(30), "the gate was never opened"
            return real()

        env.scheduler.executor.inventory = inventory  # type: ignore[method-assign]

    def open(self) -> None:
        self.go.set()


def _get(env: Env, url: str, who: str, timeout: float) -> httpx.Response:
    with httpx.Client(base_url=env.server.url, timeout=timeout) as c:
        return c.get(url, headers={"Authorization": f"Bearer {env.tokens[who]}"})


def test_reads_do_not_wait_for_a_pass_in_progress(env: Env) -> None:
    """While a pass holds the scheduler's lock (here: blocked in the executor's inventory),
    ``GET /v1/queue``, ``/v1/dashboard/state`` and ``/metrics`` answer at once (within
    5 s) with what the last finished pass published: the workload it placed, and the
    metrics' gauges."""
    wid = env.call("POST", "/v1/workloads", "alice", SUBMIT).json()["id"]
    env.scheduler.step()
    gate = Gate(env)
    busy = threading.Thread(target=env.scheduler.step)
    busy.start()
    try:
        assert gate.entered.wait(10)
        queue = _get(env, "/v1/queue", "bob", 5)
        assert queue.status_code == 200
        assert [r["id"] for r in queue.json()["running"]] == [wid]
        dash = _get(env, "/v1/dashboard/state", "bob", 5)
        assert dash.status_code == 200
        assert dash.json()["cluster"]["running"] == 1
        metrics = _get(env, "/metrics", "bob", 5)
        assert metrics.status_code == 200
        running = [float(ln.rsplit(" ", 1)[1]) for ln in metrics.text.splitlines()
                   if ln.startswith("apportion_running_workloads{")]
        assert sum(running) == 1
    finally:
        gate.open()
        busy.join(30)


def test_a_caller_sees_its_own_submission_in_its_next_queue_read(env: Env) -> None:
    """With the loop running: a submission made while a pass is in progress (a pass that
    read the store before it) is listed by the submitter's next ``GET /v1/queue``, which
    waits for the pass that takes it in; another caller's read does not wait."""
    env.scheduler.step()
    gate = Gate(env)
    stop = threading.Event()
    loop = threading.Thread(target=env.scheduler.run_forever, args=(60.0, stop))
    loop.start()
    got: dict[str, Any] = {}
    try:
        assert gate.entered.wait(10)  # a pass holds the lock, its store sync done
        wid = env.call("POST", "/v1/workloads", "alice", SUBMIT).json()["id"]
        other = _get(env, "/v1/queue", "bob", 5)  # wrote nothing: answered at once
        assert other.status_code == 200

        def read() -> None:
            got["alice"] = _get(env, "/v1/queue", "alice", 30)

        reader = threading.Thread(target=read)
        reader.start()
        gate.open()
        reader.join(30)
        view = got["alice"].json()
        assert wid in [r["id"] for r in view["pending"] + view["running"]]
    finally:
        gate.open()
        stop.set()
        env.scheduler.wake()
        loop.join(30)


def test_dashboard_usage_does_not_wait_for_a_pass_in_progress(env: Env) -> None:
    """While a pass holds the scheduler's lock, ``/v1/dashboard/usage`` answers at once
    (within 5 s; before, it took the lock and waited for the pass) with the hourly series
    the last finished pass published, ending at its time: exactly the series worked out
    from the ledger at that time, for the hours asked lately (168) and for fewer (24)."""
    from apportion.service.dashboard import usage_of

    env.call("POST", "/v1/workloads", "alice", SUBMIT)
    env.scheduler.step()
    env.clock.advance(3 * 3600.0)
    assert _get(env, "/v1/dashboard/usage?hours=168", "bob", 5).status_code == 200
    env.scheduler.step()  # publishes the series of the 168 hours just asked for
    gate = Gate(env)
    env.clock.advance(600.0)
    busy = threading.Thread(target=env.scheduler.step)
    busy.start()
    try:
        assert gate.entered.wait(10)
        week = _get(env, "/v1/dashboard/usage?hours=168", "bob", 5)
        day = _get(env, "/v1/dashboard/usage?hours=24", "bob", 5)
    finally:
        gate.open()
        busy.join(30)
    assert week.status_code == day.status_code == 200
    end = week.json()["end"]
    assert day.json()["end"] == end < env.clock.now()  # the last finished pass's time
    assert week.json()["usage"]["ai/llm"][-1] == 1.0  # its one GPU, all of the last hour
    with env.scheduler.lock:
        st = env.scheduler.state
        assert st is not None
        for got, hours in ((week, 168), (day, 24)):
            assert got.json() == usage_of(st, end, hours).last(hours).model_dump()
