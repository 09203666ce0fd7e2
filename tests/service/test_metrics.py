"""GET /metrics (and the dashboard JSON) of a real app (real store, real Scheduler, in-memory
executor, fake clock), the metrics parsed with prometheus_client's own parser.

The situation (2 hosts x 8 GPUs; ai/llm has share 1/3, ai/vision 1/6, ops 1/2):
t0      alice submits U (8 GPUs, unallocated); it starts at once.
t0+50   alice submits C (16 GPUs, 1 h): it waits for the pass at t0+100, which preempts U
        (unallocated displaced) and starts C on both hosts (wait 50 s).
t0+1900 bob submits B (8 GPUs, 10 min: debug); C is protected, so B waits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from store_db import ServerThread, write_config

from apportion.core import HostState
from apportion.service.api import create_app
from apportion.service.clock import FakeClock
from apportion.service.config import load_config
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store
from apportion.service.store.seed import seed_store

T0 = 1_000_000.0


@dataclass
class Live:
    client: httpx.Client
    clock: FakeClock
    sched: Scheduler
    tokens: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)  # U, C, B -> workload id

    def submit(self, who: str, budget: str, gpus: int, min_runtime: float) -> str:
        r = self.client.post(
            "/v1/workloads", headers={"Authorization": f"Bearer {self.tokens[who]}"},
            json={"budget": budget, "gpus": gpus, "min_runtime": min_runtime, "command": ["x"]},
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def at(self, t: float) -> None:
        self.clock.set(t)
        self.sched.step()

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample as (name, sorted labels) -> value."""
        r = self.client.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        out = {}
        for fam in text_string_to_metric_families(r.text):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out


def start_live(tmp_path: Path) -> tuple[Live, Callable[[], None]]:
    """The situation of this module's docstring, served by a real uvicorn; and its cleanup."""
    config = load_config(write_config(tmp_path))
    clock = FakeClock(T0)
    store = Store(f"sqlite:///{tmp_path / 'apportion.db'}")
    store.clock = clock.now
    store.migrate()
    tokens = seed_store(store, config)
    executor = MemoryExecutor([(h.name, h.gpus) for h in config.hosts], clock)
    sched = Scheduler(store, executor, config.policy, clock, grace_s=0.0)
    server = ServerThread(create_app(store, sched, config))
    # reads here use a scrape token, as Prometheus does (public_read is off by default)
    r = httpx.post(f"{server.url}/v1/users/root/tokens", json={"kind": "scrape"},
                   headers={"Authorization": f"Bearer {tokens['root']}"}, timeout=30)
    assert r.status_code == 201, r.text
    client = httpx.Client(base_url=server.url, timeout=30,
                          headers={"Authorization": f"Bearer {r.json()['token']}"})
    live = Live(client, clock, sched, tokens)
    live.ids["U"] = live.submit("alice", "ai/llm", 8, 0)
    live.at(T0)
    clock.set(T0 + 50)
    live.ids["C"] = live.submit("alice", "ai/llm", 16, 3600)
    live.at(T0 + 100)
    clock.set(T0 + 1900)
    live.ids["B"] = live.submit("bob", "ai/vision", 8, 600)
    live.at(T0 + 1900)

    def close() -> None:
        client.close()
        server.stop()
        store.close()

    return live, close


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    service, close = start_live(tmp_path)
    try:
        yield service
    finally:
        close()


def test_budget_gauges_follow_the_definitions(live: Live) -> None:
    """Usage ratio = charged / (share x healthy GPU-seconds); owed = min(share x healthy,
    asked); delivered = GPUs held by allocated work."""
    m = live.scrape()

    def g(name: str, budget: str) -> float:
        return m[(name, (("budget", budget),))]

    # C: 16 GPUs for 1800 s; the cluster: 16 healthy GPUs for 1900 s; share of ai/llm 1/3
    assert g("apportion_budget_usage_ratio", "ai/llm") == pytest.approx(
        16 * 1800 / (16 * 1900 / 3))
    assert g("apportion_budget_usage_ratio", "ops") == 0.0
    assert g("apportion_budget_share", "ai/vision") == pytest.approx(1 / 6)
    assert g("apportion_budget_owed_gpus", "ai/llm") == pytest.approx(16 / 3)  # capped
    assert g("apportion_budget_owed_gpus", "ai/vision") == pytest.approx(16 / 6)  # asks 8
    assert g("apportion_budget_owed_gpus", "ops") == 0.0
    assert g("apportion_budget_delivered_gpus", "ai/llm") == 16.0
    assert g("apportion_budget_delivered_gpus", "ai") == 16.0
    assert g("apportion_budget_delivered_gpus", "ai/vision") == 0.0


def test_queue_and_running_by_class(live: Live) -> None:
    """B waits as debug work; C runs as allocated work on all 16 GPUs of the one pool."""
    m = live.scrape()
    assert m[("apportion_queue_length", (("class", "debug"),))] == 1.0
    assert m[("apportion_queue_length", (("class", "allocated"),))] == 0.0
    assert m[("apportion_queue_length", (("class", "unallocated"),))] == 0.0
    assert m[("apportion_running_gpus", (("class", "allocated"),))] == 16.0
    assert m[("apportion_gpus_used", (("pool", "default/gpu"),))] == 16.0
    assert m[("apportion_pool_occupancy", (("pool", "default/gpu"),))] == 1.0


def test_wait_histogram_observes_starts(live: Live) -> None:
    """U started without waiting, C after 50 s; B has not started, so no debug sample."""
    m = live.scrape()
    assert m[("apportion_wait_seconds_count", (("class", "allocated"),))] == 1.0
    assert m[("apportion_wait_seconds_sum", (("class", "allocated"),))] == 50.0
    assert m[("apportion_wait_seconds_bucket", (("class", "allocated"), ("le", "30.0")))] == 0.0
    assert m[("apportion_wait_seconds_bucket", (("class", "allocated"), ("le", "60.0")))] == 1.0
    assert m[("apportion_wait_seconds_count", (("class", "unallocated"),))] == 1.0
    assert m[("apportion_wait_seconds_count", (("class", "debug"),))] == 0.0
    assert m[("apportion_starts_total", (("class", "allocated"),))] == 1.0


def test_wait_by_size_histogram_observes_starts(live: Live) -> None:
    """U (8 GPUs) started at once, C (16 GPUs) after 50 s; every size class has a series."""
    m = live.scrape()

    def count(size: str) -> float:
        return m[("apportion_wait_by_size_seconds_count", (("size", size),))]

    assert (count("1"), count("2-8"), count("9-64"), count("65+")) == (0.0, 1.0, 1.0, 0.0)
    assert m[("apportion_wait_by_size_seconds_sum", (("size", "9-64"),))] == 50.0
    assert m[("apportion_wait_by_size_seconds_sum", (("size", "2-8"),))] == 0.0


def test_preemptions_counted_by_reason(live: Live) -> None:
    """One unallocated workload was displaced; every reason has a series."""
    m = live.scrape()
    assert m[("apportion_preemptions_total", (("reason", "unallocated"),))] == 1.0
    for reason in ("rebalance", "drain", "host_failure"):
        assert m[("apportion_preemptions_total", (("reason", reason),))] == 0.0


def test_hosts_by_state_follow_a_drain(live: Live) -> None:
    """Draining h2 moves one host (and its 8 GPUs) of the one pool from healthy to
    draining."""
    before = live.scrape()
    assert before[("apportion_hosts", (("pool", "default/gpu"), ("state", "healthy"),))] == 2.0
    r = live.client.post("/v1/hosts/h2/drain", json={"reason": "fan"},
                         headers={"Authorization": f"Bearer {live.tokens['root']}"})
    assert r.status_code == 200, r.text
    after = live.scrape()
    assert after[("apportion_hosts", (("pool", "default/gpu"), ("state", "healthy"),))] == 1.0
    assert after[("apportion_hosts", (("pool", "default/gpu"), ("state", "draining"),))] == 1.0
    assert after[("apportion_host_gpus", (("pool", "default/gpu"), ("state", "draining"),))] == 8.0


def test_host_failure_counts_as_a_preemption_reason(live: Live) -> None:
    """A host that dies under running work counts one host_failure on the next pass."""
    live.sched.set_host_state("h1", HostState.DOWN, "dead", "root")
    live.at(T0 + 2000)
    m = live.scrape()
    assert m[("apportion_preemptions_total", (("reason", "host_failure"),))] == 1.0


def test_pass_latency_and_pass_count(live: Live) -> None:
    """Every pass is timed: as many latency samples as passes, all positive."""
    m = live.scrape()
    passes = m[("apportion_scheduler_passes_total", ())]
    assert passes >= 3
    assert m[("apportion_pass_seconds_count", ())] == passes
    assert m[("apportion_pass_seconds_sum", ())] > 0


def test_dashboard_state_integrates_owed_and_delivered(live: Live) -> None:
    """ai/llm's share of the healthy GPUs is 16/3 from T0 on, and it asked for 16 from the
    pass at T0+100 (C) on: in each UTC hour (one ends at T0+800) the lesser of the two
    averaged is its share, so it was owed 16/3 x 1900 s = 2.81 GPU-hours, and got 16 GPUs
    from T0+100, 8 GPU-hours; the queue holds B, first, with its wait reason, and C runs
    protected until T0+3700."""
    s = live.client.get("/v1/dashboard/state").json()
    llm = next(b for b in s["budgets"] if b["path"] == "ai/llm")
    assert llm["owed_gpu_hours"] == pytest.approx(16 / 3 * 1900 / 3600)
    assert llm["delivered_gpu_hours"] == pytest.approx(8.0)
    assert (llm["owed_gpus"], llm["delivered_gpus"]) == (pytest.approx(16 / 3), 16.0)
    assert [(p["id"], p["position"], p["wait_reason"], p["class"]) for p in s["pending"]] == [
        (live.ids["B"], 1, "no_capacity", "debug")]
    assert [(r["id"], r["protected_until"]) for r in s["running"]] == [
        (live.ids["C"], T0 + 3700)]
    assert s["cluster"] == {"hosts": 2, "gpus": 16, "healthy_gpus": 16, "used_gpus": 16,
                            "pending": 1, "held": 0, "running": 1}


def test_dashboard_owed_and_delivered_gpu_hours_are_report_usages(live: Live) -> None:
    """The dashboard's owed and delivered GPU-hours of every node over the lookback window
    are those ``apportion report usage`` gives for the same 7 days (GET /v1/reports/usage):
    owed in each hour is the lesser of the share of the healthy GPUs and the GPUs asked,
    both averaged over the hour. The page integrated the lesser of the two at each
    instant, so it gave ai/llm 2.67 owed GPU-hours where the report gives 2.81 (in the hour
    ending at T0+800 it asked nothing for 100 s and 16 GPUs for 700 s, more than its share
    of 16/3 on average)."""
    s = live.client.get("/v1/dashboard/state").json()
    r = live.client.get("/v1/reports/usage", params={"from": "7d", "format": "json"})
    assert r.status_code == 200, r.text
    report = {row["budget"]: row for row in r.json()["rows"]}
    page = {b["path"]: (b["owed_gpu_hours"], b["delivered_gpu_hours"]) for b in s["budgets"]}
    assert page == {p: (pytest.approx(report[p]["owed_gpu_hours"]),
                        pytest.approx(report[p]["delivered_gpu_hours"])) for p in page}
    assert page["ai/llm"][0] == pytest.approx(16 / 3 * 1900 / 3600)


def test_dashboard_usage_series_from_the_ledger(live: Live) -> None:
    """The last hour: ai/llm held 16 GPUs for 1800 of its 3600 s (8 on average), against a
    share of 1/3 of 16 GPUs healthy for the 1900 s the cluster has existed."""
    u = live.client.get("/v1/dashboard/usage", params={"hours": 1}).json()
    assert u["usage"]["ai/llm"] == [8.0]
    assert u["fair"]["ai/llm"] == [round(16 / 3 * 1900 / 3600, 3)]
    assert u["usage"]["ops"] == [0.0]


def test_a_clock_set_back_is_in_the_health_check_and_the_metrics(live: Live) -> None:
    """The wall clock set back 400 s behind the last pass (at t0+1900): after a pass,
    ``GET /v1/health`` has ``clock_behind_s`` 400 and ``/metrics``
    ``apportion_clock_behind_seconds`` 400; once the clock is past it again, both are 0."""
    def both() -> tuple[float, float]:
        health = live.client.get("/v1/health").json()["clock_behind_s"]
        return health, live.scrape()[("apportion_clock_behind_seconds", ())]

    assert both() == (0.0, 0.0)
    live.clock = live.sched.clock = FakeClock(T0 + 1500)
    live.sched.step()
    assert both() == (400.0, 400.0)
    live.at(T0 + 1910)
    assert both() == (0.0, 0.0)
