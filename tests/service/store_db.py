"""Databases for the service tests: a fresh SQLite file, or a freshly emptied PostgreSQL
database from APPORTION_TEST_PG_URL (set by scripts/with-services.sh)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from apportion.service.store import Store

PG_ENV = "APPORTION_TEST_PG_URL"
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def pg_url() -> str:
    """The test PostgreSQL URL; fails (never skips) when the server was not provided."""
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.fail(
            f"{PG_ENV} is not set: run the PostgreSQL tests through scripts/with-services.sh, "
            "e.g. scripts/with-services.sh .venv/bin/pytest tests/service -q"
        )
    return url


def reset_pg(url: str) -> None:
    """Drop every table so each test migrates an empty database."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def db_url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'apportion.db'}"
    url = pg_url()
    reset_pg(url)
    return url


def open_store(backend: str, tmp_path: Path) -> Store:
    store = Store(db_url(backend, tmp_path))
    store.migrate()
    return store


# ---- a seeded service for the API tests ------------------------------------------------------
CONFIG = """
[server]
data_dir = "data"
[executor]
kind = "memory"
[policy]
max_min_runtime = "8h"
[[hosts]]
name = "h1"
gpus = 8
[[hosts]]
name = "h2"
gpus = 8
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
[[budgets]]
path = "ops"
weight = 1
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


def write_config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "apportion.toml"
    path.write_text(CONFIG + extra)
    return path


class ServerThread:
    """A real uvicorn server for ``app`` on a free local port, in a background thread."""

    def __init__(self, app: object) -> None:
        import socket
        import threading
        import time

        import uvicorn

        # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only
        # when the listening socket says TCP, and without it every response waits ~40 ms
        # for a delayed ACK (Nagle: h11 writes headers and body separately)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")  # type: ignore[arg-type]
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.005)

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()


class SwappableApp:
    """An ASGI app that forwards to whichever app is set, so one server serves many tests."""

    def __init__(self) -> None:
        self.app: object = None

    async def __call__(self, scope: object, receive: object, send: object) -> None:
        await self.app(scope, receive, send)  # type: ignore[operator]
