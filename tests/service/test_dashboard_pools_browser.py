"""The dashboard's hosts grouped by pool, in a real headless Chromium against a real
``apportion serve`` process whose config names two pools (cluster east with H100 hosts,
cluster west with a B200 host) and the in-memory executor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_dashboard_browser import WAIT_MS, Served, _shot, _until, browser, page, serving

pytestmark = pytest.mark.browser
__all__ = ["browser", "page"]  # fixtures, used by name

CONFIG = """
billing = { H100 = 1.0, B200 = 2.2 }
[server]
host = "127.0.0.1"
data_dir = "data"
[executor]
kind = "memory"
grace_s = 0
[scheduler]
interval_s = 1
[[hosts]]
name = "e1"
gpus = 8
cluster = "east"
kind = "H100"
[[hosts]]
name = "e2"
gpus = 8
cluster = "east"
kind = "H100"
[[hosts]]
name = "w1"
gpus = 8
cluster = "west"
kind = "B200"
[[budgets]]
path = "ai"
members = ["alice", "bob"]
[[users]]
name = "alice"
[[users]]
name = "bob"
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``apportion serve`` on the two-pool config, with one B200 workload running."""
    d = tmp_path_factory.mktemp("serve-pools")
    with serving(d, CONFIG) as s:
        body = {"budget": "ai", "gpus": 8, "min_runtime": "1h", "gpu_kind": ["B200"],
                "command": ["sleep", "infinity"]}
        s.ids["running"] = run = str(s.call("alice", "POST", "/v1/workloads", body)["id"])
        _until("the B200 workload running",
               lambda: any(r["id"] == run for r in s.state()["running"]), d / "server.log")
        yield s


def test_dashboard_groups_hosts_by_pool(served: Served, page: Any) -> None:
    """The hosts table has a heading row per pool, in pool order, each followed by its own
    hosts and saying how many GPUs of the pool are used (the B200 host is full)."""
    page.goto(served.url + "/#token=" + served.tokens["alice"])
    page.wait_for_selector('#hosts tr.pool[data-pool="west/B200"]', timeout=WAIT_MS)
    west = page.inner_text('#hosts tr.pool[data-pool="west/B200"]')
    assert "1 host, 8 / 8 GPUs used" in west, west
    rows = page.eval_on_selector_all(
        "#hosts tbody tr",
        "rows => rows.map(r => r.classList.contains('pool') ? 'pool ' + r.dataset.pool"
        " : 'host ' + r.dataset.host + ' ' + r.dataset.pool)")
    assert rows == ["pool east/H100", "host e1 east/H100", "host e2 east/H100",
                    "pool west/B200", "host w1 west/B200"]
    east = page.inner_text('#hosts tr.pool[data-pool="east/H100"]')
    assert "2 hosts, 0 / 16 GPUs used" in east
    _shot(page, "dashboard-pools.png")
