"""A live ``apportion serve`` (local executor, real processes) for the end-to-end tests:
config, HTTP and CLI calls, polling with deadlines, and workload scripts."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from server_proc import Server, free_port
from store_db import pg_url, reset_pg

from apportion.service.executors import _procfs

T = TypeVar("T")
DEADLINE_S = 90.0  # bounds a hang only; nothing asserts how long anything took
POLL_S = 0.1
GRACE_S = 2

# root: admin; carol manages ai; dave manages ai/llm; alice is a member of ai/llm, bob of
# ai/vision
USERS_AND_BUDGETS = """
[[budgets]]
path = "ai"
weight = 1
managers = ["carol"]

[[budgets]]
path = "ai/llm"
weight = 2
managers = ["dave"]
members = ["alice"]

[[budgets]]
path = "ai/vision"
weight = 1
members = ["bob"]

[[users]]
name = "root"
admin = true

[[users]]
name = "carol"

[[users]]
name = "dave"

[[users]]
name = "alice"

[[users]]
name = "bob"
"""


def write_config(path: Path, port: int, db_url: str, hosts: dict[str, int]) -> Path:
    """A config for one test: the local executor with ``hosts``, short grace, quick passes."""
    host_tables = "".join(f'[[hosts]]\nname = "{n}"\ngpus = {g}\n\n' for n, g in hosts.items())
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
kind = "local"
grace_s = {GRACE_S}

[scheduler]
interval_s = 0.2

{host_tables}{USERS_AND_BUDGETS}"""
    )
    return path


@dataclass
class Live:
    """One running server and the ways to talk to it."""

    server: Server
    http: httpx.Client
    tmp: Path
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.tmp / "data"

    # ---- HTTP ------------------------------------------------------------------------
    def call(self, method: str, path: str, who: str | None = None, body: Any = None,
             token: str | None = None) -> httpx.Response:
        """One request; ``who`` picks a configured user's token, ``token`` a literal one."""
        if who is not None:
            token = self.tokens[who]
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return self.http.request(method, path, headers=headers, json=body)

    def ok(self, method: str, path: str, who: str = "root", body: Any = None) -> Any:
        r = self.call(method, path, who, body)
        assert r.status_code in (200, 201), f"{method} {path} as {who}: {r.status_code} {r.text}"
        return r.json()

    def submit(self, who: str, budget: str, gpus: int, min_runtime: float | str,
               script: str, resumable: bool = False) -> str:
        """Submit ``bash -c script``; returns the workload id."""
        body = {"budget": budget, "gpus": gpus, "min_runtime": min_runtime,
                "resumable": resumable, "command": ["bash", "-c", script]}
        return str(self.ok("POST", "/v1/workloads", who, body)["id"])

    def workload(self, wid: str) -> dict[str, Any]:
        """The workload with all its attempts."""
        w: dict[str, Any] = self.ok("GET", f"/v1/workloads/{wid}")
        return w

    def hosts(self) -> dict[str, dict[str, Any]]:
        return {h["name"]: h for h in self.ok("GET", "/v1/hosts")}

    # ---- CLI -------------------------------------------------------------------------
    def cli(self, who: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``apportion ARGS`` as a separate process, with url and token from the env."""
        # TMPDIR is exported to the work: what it leaves there (a batch script's copy) is
        # the test's, not /tmp's
        env = {**os.environ, "APPORTION_URL": self.server.url,
               "APPORTION_TOKEN": self.tokens[who], "APPORTION_CLIENT_CONFIG": "/dev/null",
               "TMPDIR": str(self.tmp)}
        return subprocess.run(
            [sys.executable, "-m", "apportion.cli.main", *args],
            env=env, capture_output=True, text=True, timeout=DEADLINE_S,
        )

    # ---- waiting ---------------------------------------------------------------------
    def wait(self, what: str, probe: Callable[[], T | None]) -> T:
        """Poll ``probe`` until it returns something true."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            got = probe()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.server_log()}")
            if self.server.proc is not None and self.server.proc.poll() is not None:
                raise AssertionError(f"server died while waiting for {what}\n"
                                     f"{self.server_log()}")
            time.sleep(POLL_S)

    def wait_status(self, wid: str, *statuses: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            w = self.workload(wid)
            return w if w["status"] in statuses else None

        return self.wait(f"{wid} to be {' or '.join(statuses)}", probe)

    def wait_file(self, path: Path) -> str:
        """Wait for ``path`` to exist; returns its text."""
        def probe() -> tuple[str] | None:
            return (path.read_text(),) if path.exists() else None

        return self.wait(f"file {path}", probe)[0]

    def wait_host(self, name: str, state: str) -> dict[str, Any]:
        return self.wait(f"host {name} to be {state}",
                         lambda: (h := self.hosts()[name])["state"] == state and h)

    # ---- files -----------------------------------------------------------------------
    def log(self, wid: str, attempt: int) -> str:
        """An attempt's log file, as the executor wrote it."""
        return (self.data / "logs" / wid / f"{attempt}.log").read_text()

    def server_log(self) -> str:
        return "--- server log (tail) ---\n" + self.server.log.read_text()[-3000:]


def database_url(backend: str) -> str:
    """'' (the server's default SQLite file) or the emptied test PostgreSQL database."""
    if backend == "sqlite":
        return ""
    url = pg_url()  # fails with instructions when APPORTION_TEST_PG_URL is missing
    reset_pg(url)
    return url


@contextlib.contextmanager
def live_server(backend: str, tmp: Path, hosts: dict[str, int]) -> Iterator[Live]:
    """Start ``apportion serve`` on a fresh database; on exit stop it, kill whatever
    workload processes are still running (attempts outlive the server by design), and
    fail if the server logged a traceback (a failed pass or request) along the way."""
    config = write_config(tmp / "apportion.toml", free_port(), database_url(backend), hosts)
    server = Server(config, tmp / "server.log")
    try:
        server.start()
        tokens = {p.name: p.read_text().strip() for p in (tmp / "data" / "tokens").iterdir()}
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield Live(server, http, tmp, tokens)
    finally:
        server.stop()
        kill_leftovers(tmp / "data" / "run")
    log = server.log.read_text()
    assert "Traceback" not in log, f"the server logged a traceback:\n{log[-6000:]}"


def kill_leftovers(run_dir: Path) -> None:
    """SIGKILL the wrapper and command process groups of every attempt still alive."""
    for run in sorted(run_dir.glob("*.run")):
        info = _procfs.read_json(run)
        if not info:
            continue
        handle, pgid = info.get("handle"), info.get("child_pgid")
        if isinstance(pgid, int) and _procfs.group_alive(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        if isinstance(handle, str) and _procfs.alive(handle):
            pid, _ = _procfs.parse_handle(handle)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # the wrapper leads its own session


# ---- workload scripts (bash) -------------------------------------------------------------
def q(path: Path) -> str:
    return shlex.quote(str(path))


def until_sigterm(ready: Path, marker: Path, seconds: int = 60) -> str:
    """Runs until SIGTERM; on it writes ``marker`` (which attempt got it) and exits 143.
    ``ready`` appears once the trap is set, so a stop sent after it is caught."""
    return (
        f"trap 'echo \"SIGTERM attempt $APPORTION_ATTEMPT\" > {q(marker)}; exit 143' TERM; "
        f"touch {q(ready)}; sleep {seconds} & wait"
    )


def checkpointing(ready: Path, checkpoint: Path) -> str:
    """Counts steps; on SIGTERM saves the step to ``checkpoint`` and exits 143. A later
    attempt that finds the checkpoint resumes from it and finishes (exit 0)."""
    return (
        'echo "attempt=$APPORTION_ATTEMPT"; '
        f'if [ -f {q(checkpoint)} ]; then '
        f'echo "resumed from step $(cat {q(checkpoint)})"; exit 0; fi; '
        "step=0; "
        f"trap 'echo \"$step\" > {q(checkpoint)}; echo \"checkpoint at step $step\"; "
        "exit 143' TERM; "
        f"touch {q(ready)}; "
        "while :; do step=$((step+1)); sleep 0.2 & wait; done"
    )
