"""A seeded service (real store on SQLite or PostgreSQL, real Scheduler with the memory
executor and a fake clock, real FastAPI app under uvicorn) for the API-wide tests: hostile
input, the authorization matrix and the schema fuzzing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
from store_db import ServerThread, db_url, write_config

from apportion.core import Status
from apportion.service.api import create_app
from apportion.service.clock import FakeClock
from apportion.service.config import AuthConfig, ServiceConfig, load_config
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store
from apportion.service.store.seed import seed_store


@dataclass
class Env:
    client: httpx.Client
    server: ServerThread
    store: Store
    scheduler: Scheduler
    clock: FakeClock
    config: ServiceConfig
    tokens: dict[str, str]

    def call(self, method: str, url: str, who: str | None = None, body: Any = None,
             raw: bytes | str | None = None, headers: dict[str, str] | None = None,
             ) -> httpx.Response:
        h = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        h.update(headers or {})
        if raw is not None:
            h.setdefault("Content-Type", "application/json")
            return self.client.request(method, url, headers=h, content=raw)
        return self.client.request(method, url, headers=h, json=body)

    def fingerprint(self) -> tuple[Any, ...]:
        """Everything a write could change."""
        return (
            [w.as_dict() for w in self.store.list_workloads(statuses=list(Status))],
            self.store.budgets(), self.store.hosts(), self.store.users(),
            self.store.tokens(), [a.id for a in self.store.audit(limit=100_000)],
        )

    def close(self) -> None:
        self.client.close()
        self.server.stop()
        self.store.close()


def start_env(tmp_path: Path, backend: str, public_read: bool = False,
              auth: AuthConfig | None = None) -> Env:
    config = load_config(write_config(tmp_path))
    config = replace(config, server=replace(config.server, public_read=public_read),
                     auth=auth or config.auth)
    store = Store(db_url(backend, tmp_path))
    store.migrate()
    tokens = seed_store(store, config)
    clock = FakeClock(1_000_000.0)
    executor = MemoryExecutor([(h.name, h.gpus) for h in config.hosts], clock)
    sched = Scheduler(store, executor, config.policy, clock, grace_s=0.0)
    server = ServerThread(create_app(store, sched, config))
    client = httpx.Client(base_url=server.url, timeout=60)
    return Env(client, server, store, sched, clock, config, tokens)


# every read route, as a member outside most budgets may call it
READS = [
    "/v1/workloads?status=all", "/v1/workloads", "/v1/budgets", "/v1/budgets/usage",
    "/v1/queue", "/v1/hosts", "/v1/audit", "/v1/tokens", "/v1/dashboard/state",
    "/v1/dashboard/usage", "/metrics", "/v1/health",
]
