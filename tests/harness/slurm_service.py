"""A real ``apportion serve`` process scheduling onto a :class:`SlurmCluster`.

For the end-to-end tests and the benchmark of the Slurm backend: it writes a config with
``[executor] kind = "slurm"`` (SQLite in its own directory, no ``[[hosts]]``: the hosts come
from Slurm), starts the server as a child process with the cluster's environment, waits
until the API answers and every Slurm node is listed as a host, and offers small HTTP
helpers. The users are ``alice`` (member of every budget) and ``admin``.

Usage::

    with SlurmCluster(nodes=4) as cluster, SlurmService(cluster, tmp_dir) as service:
        w = service.submit(budget="ai/llm", gpus=8, min_runtime=60, command=["sleep", "5"])
        service.wait_workload(w["id"], "completed")
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from harness.slurm_cluster import SlurmCluster

__all__ = ["DEFAULT_BUDGETS", "SlurmService", "SlurmServiceError"]

DEFAULT_BUDGETS: Mapping[str, float] = {"ai/llm": 2.0, "ai/vision": 1.0}
FINAL = ("completed", "failed", "cancelled", "preempted", "lost")
ACTIVE = ("pending", "running", "stopping")


class SlurmServiceError(AssertionError):
    """The service did not start, or did not reach an awaited state in time."""


class SlurmService:
    """``apportion serve`` on ``cluster``, in ``base_dir`` (config, data, server log).
    ``unix_user``: the Unix account alice's work runs as (the server then is not
    single-user); None: everyone's work runs as the server's own user."""

    def __init__(
        self,
        cluster: SlurmCluster,
        base_dir: str | os.PathLike[str],
        interval_s: float = 0.5,
        grace_s: float = 3.0,
        timeout_s: float = 3.0,
        budgets: Mapping[str, float] = DEFAULT_BUDGETS,
        start_timeout_s: float = 60.0,
        slurm_options: str = "",
        extra_config: str = "",
        unix_user: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.dir = Path(base_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.timeout_s = timeout_s
        self.budgets = dict(budgets)
        self.start_timeout_s = start_timeout_s
        self.slurm_options = slurm_options  # TOML lines added to [executor.slurm]
        self.extra_config = extra_config  # TOML tables added at the end (e.g. [billing])
        # alice's Unix account: her work runs as it (None: single-user, as the server's user)
        self.unix_user = unix_user
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = self.dir / "apportion.toml"
        self.log_path = self.dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._clients: dict[str, httpx.Client] = {}

    # ---- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> SlurmService:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def write_config(self) -> Path:
        budgets = "".join(
            f'[[budgets]]\npath = "{path}"\nweight = {weight}\nmembers = ["alice"]\n\n'
            for path, weight in self.budgets.items()
        )
        self.config_path.write_text(f"""[server]
host = "127.0.0.1"
port = {self.port}
data_dir = "data"
# without a Unix account for alice, her work runs as the server's own user
single_user = {"false" if self.unix_user else "true"}

[executor]
kind = "slurm"
grace_s = {self.grace_s}

[executor.slurm]
partition = "{self.cluster.partition}"
timeout_s = {self.timeout_s}
{self.slurm_options}

[scheduler]
interval_s = {self.interval_s}

{budgets}[[users]]
name = "alice"
{f'unix_user = "{self.unix_user}"' if self.unix_user else ""}

[[users]]
name = "admin"
admin = true

{self.extra_config}""")
        return self.config_path

    def start(self) -> None:
        """Start the server and wait until it answers and lists every Slurm node."""
        self.write_config()
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "apportion.cli.main", "serve", "--config",
                 str(self.config_path)],
                cwd=self.dir, env=self.cluster.env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise SlurmServiceError(
                    f"apportion serve exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    names = {h["name"] for h in self.get("/v1/hosts")}
                    if set(self.cluster.node_names) <= names:
                        return
            except (httpx.TransportError, OSError):
                pass
            if time.monotonic() > deadline:
                raise SlurmServiceError(f"apportion serve not ready:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM the server (SIGKILL after 30 s); close the HTTP clients."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    # ---- HTTP ------------------------------------------------------------------------
    def token(self, user: str) -> str:
        return (self.dir / "data" / "tokens" / user).read_text().strip()

    def client(self, user: str = "admin") -> httpx.Client:
        if user not in self._clients:
            self._clients[user] = httpx.Client(
                base_url=self.url, headers={"Authorization": f"Bearer {self.token(user)}"},
                timeout=30,
            )
        return self._clients[user]

    def get(self, path: str, user: str = "admin") -> Any:
        r = self.client(user).get(path)
        if r.status_code != 200:
            raise SlurmServiceError(f"GET {path}: {r.status_code} {r.text}")
        return r.json()

    def submit(self, user: str = "alice", **body: Any) -> dict[str, Any]:
        """POST /v1/workloads; fails unless the answer is 201."""
        r = self.client(user).post("/v1/workloads", json=body)
        if r.status_code != 201:
            raise SlurmServiceError(f"submit {body}: {r.status_code} {r.text}")
        return dict(r.json())

    def workload(self, wid: str) -> dict[str, Any]:
        return dict(self.get(f"/v1/workloads/{wid}"))

    def hosts(self) -> dict[str, dict[str, Any]]:
        return {h["name"]: h for h in self.get("/v1/hosts")}

    def logs(self, wid: str, attempt: int | None = None) -> str:
        q = f"?attempt={attempt}" if attempt is not None else ""
        r = self.client("admin").get(f"/v1/workloads/{wid}/logs{q}")
        return r.text if r.status_code == 200 else ""

    def wait_workload(
        self, wid: str, status: str | Sequence[str], timeout_s: float = 60.0,
        check: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """Poll until the workload has one of ``status`` (and ``check`` holds); return it."""
        wanted = (status,) if isinstance(status, str) else tuple(status)
        return dict(self.wait(
            lambda: _if(self.workload(wid), lambda w: w["status"] in wanted
                        and (check is None or check(w))),
            f"workload {wid} {'/'.join(wanted)}", timeout_s,
            lambda: self.workload(wid),
        ))

    def wait_started(self, wid: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Until the workload runs with its Slurm job id stored; returns the workload."""
        return self.wait_workload(
            wid, "running", timeout_s,
            check=lambda w: bool(w["attempts"]) and w["attempts"][-1]["handle"] is not None,
        )

    def wait_host(self, name: str, state: str, timeout_s: float = 60.0) -> dict[str, Any]:
        return dict(self.wait(
            lambda: _if(self.hosts()[name], lambda h: h["state"] == state),
            f"host {name} {state}", timeout_s, lambda: self.hosts()[name],
        ))

    def wait(
        self, probe: Callable[[], Any], what: str, timeout_s: float = 60.0,
        last: Callable[[], Any] | None = None,
    ) -> Any:
        """Poll ``probe`` until it returns something truthy (a deadline only to fail)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                seen = last() if last is not None else None
                raise SlurmServiceError(
                    f"{what}: not reached after {timeout_s} s; last: {seen}\n"
                    f"--- server log\n{self.log_tail(2500)}"
                )
            time.sleep(0.1)

    def cancel_all(self, timeout_s: float = 60.0) -> None:
        """Cancel every active workload and wait until none is active."""
        for w in self.get("/v1/workloads?status=pending,running,stopping"):
            self.client("admin").post(f"/v1/workloads/{w['id']}/cancel")
        self.wait(lambda: not self.get("/v1/workloads?status=pending,running,stopping"),
                  "no active workloads", timeout_s)

    # ---- Slurm's view ----------------------------------------------------------------
    def slurm_job(self, job_id: str) -> dict[str, str]:
        """``scontrol -o show job`` as a dict (JobState, NodeList, TresPerNode, ...)."""
        out = self.cluster.run(["scontrol", "-o", "show", "job", job_id]).stdout.strip()
        fields: dict[str, str] = {}
        for item in out.split():
            key, sep, value = item.partition("=")
            if sep and key not in fields:
                fields[key] = value
        return fields

    def wait_slurm_state(self, job_id: str, state: str, timeout_s: float = 60.0) -> dict[str, str]:
        return dict(self.wait(
            lambda: _if(self.slurm_job(job_id), lambda j: j.get("JobState") == state),
            f"Slurm job {job_id} {state}", timeout_s, lambda: self.slurm_job(job_id),
        ))


def _if(value: Any, test: Callable[[Any], bool]) -> Any:
    return value if test(value) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
