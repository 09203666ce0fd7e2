"""A real ``apportion serve`` process for end-to-end tests (and the service benchmark)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

START_DEADLINE_S = 120.0  # bounds a hang only


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(
    path: Path,
    port: int,
    db_url: str = "",
    hosts: int = 2,
    gpus: int = 8,
    interval_s: float = 0.2,
    grace_s: float = 5.0,
    executor: str = "local",
) -> Path:
    host_tables = "".join(
        f'[[hosts]]\nname = "h{i}"\ngpus = {gpus}\n\n' for i in range(hosts)
    )
    path.write_text(
        f"""[server]
host = "127.0.0.1"
port = {port}
data_dir = "data"
# the test users have no Unix accounts: their work runs as the test's own user
single_user = true

[database]
url = "{db_url}"

[executor]
kind = "{executor}"
grace_s = {grace_s}

[scheduler]
interval_s = {interval_s}

{host_tables}[[budgets]]
path = "ai/llm"
weight = 2
members = ["alice"]

[[budgets]]
path = "ai/vision"
weight = 1
members = ["alice"]

[[users]]
name = "alice"

[[users]]
name = "admin"
admin = true
"""
    )
    return path


class Server:
    """``apportion serve --config CONFIG`` as a child process in its own session."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.port = int(
            next(ln for ln in config.read_text().splitlines() if ln.startswith("port")).split(
                "="
            )[1]
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "apportion.cli.main", "serve", "--config",
                 str(self.config)],
                cwd=self.config.parent, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_healthy()

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"server exited with {self.proc.returncode}:\n{self.log.read_text()[-4000:]}"
                )
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"server not healthy:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.1)

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def token(self, user: str) -> str:
        return (self.config.parent / "data" / "tokens" / user).read_text().strip()
