"""The dashboard's hosts grouped by pool, in a real headless Chromium against a real
``apportion serve`` process whose config names two pools (cluster east with H100 hosts,
cluster west with a B200 host) and the in-memory executor."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import free_port
from test_dashboard_browser import WAIT_MS, Served, _shot, _until, browser, page

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
    (d / "apportion.toml").write_text(CONFIG)
    port = free_port()
    log = d / "server.log"
    exe = Path(sys.executable).parent / "apportion"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(exe), "serve", "--config", str(d / "apportion.toml"), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=d)
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, timeout=30)

    def healthy() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"apportion serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            return client.get("/v1/health").status_code == 200
        except httpx.TransportError:
            return False

    try:
        _until("the server answering /v1/health", healthy, log)
        tokens = {p.name: p.read_text().strip() for p in (d / "data" / "tokens").iterdir()}
        s = Served(url, tokens, client)
        body = {"budget": "ai", "gpus": 8, "min_runtime": "1h", "gpu_kind": ["B200"],
                "command": ["sleep", "infinity"]}
        s.ids["running"] = run = str(s.call("alice", "POST", "/v1/workloads", body)["id"])
        _until("the B200 workload running",
               lambda: any(r["id"] == run for r in s.state()["running"]), log)
        yield s
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
