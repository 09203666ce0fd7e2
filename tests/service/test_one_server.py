"""One ``apportion serve`` per database: a second one started on the same database (by
mistake, or a service manager starting one while another runs) refuses to start, and the
first one's work is untouched. Without the lock, the second server's start reconciled the
first one's running work as its own (the memory executor ended it as lost; the local and
Slurm executors would have had two schedulers launching and charging it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from server_proc import Server, free_port, write_config
from store_db import BACKENDS, db_url


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_server_on_the_same_database_refuses_to_start(
    backend: str, tmp_path: Path
) -> None:
    """Server A runs a workload; server B, same database, another port: B exits 1 saying
    another server schedules with the database, A's workload still runs, A still answers;
    once A has stopped, B starts (the lock goes with its holder)."""
    url = db_url(backend, tmp_path)
    config = write_config(tmp_path / "apportion.toml", free_port(), db_url=url,
                          executor="memory")
    a = Server(config, tmp_path / "a.log")
    a.start()
    try:
        headers = {"Authorization": f"Bearer {a.token('alice')}"}
        w = httpx.post(f"{a.url}/v1/workloads", headers=headers, json={
            "budget": "ai/llm", "gpus": 1, "min_runtime": "1h", "command": ["sleep", "600"]})
        assert w.status_code == 201, w.text
        wid = w.json()["id"]
        b = subprocess.run(
            [sys.executable, "-m", "apportion.cli.main", "serve", "--config", str(config),
             "--port", str(free_port())],
            capture_output=True, text=True, timeout=60)
        assert b.returncode == 1, b.stdout + b.stderr
        assert "another apportion server is scheduling with it" in b.stderr, b.stderr
        if backend == "sqlite":
            assert "(pid " in b.stderr
        got = httpx.get(f"{a.url}/v1/workloads/{wid}", headers=headers)
        assert got.status_code == 200 and got.json()["status"] == "running", got.text
    finally:
        a.stop()
    again = Server(config, tmp_path / "again.log")
    again.start()  # A has stopped: its lock went with it
    again.stop()
