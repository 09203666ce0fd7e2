"""One ``apportion serve`` per database: a second one started on the same database (by
mistake, or a service manager starting one while another runs) refuses to start, and the
first one's work is untouched. Without the lock, the second server's start reconciled the
first one's running work as its own (the memory executor ended it as lost; the local and
Slurm executors would have had two schedulers launching and charging it)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from server_proc import Server, free_port, write_config
from store_db import BACKENDS, db_url

from apportion.service.store import ServerLock


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_server_on_the_same_database_refuses_to_start(
    backend: str, tmp_path: Path
) -> None:
    """Server A runs a workload (B starts once A has started it); server B, same database,
    another port: B exits 1 saying another server schedules with the database, A's workload
    still runs, A still answers; once A has stopped, B starts (the lock goes with its
    holder)."""
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
        deadline = time.monotonic() + 60
        while httpx.get(f"{a.url}/v1/workloads/{wid}", headers=headers).json()[
                "status"] != "running":
            assert time.monotonic() < deadline, "A never started its workload"
            time.sleep(0.1)
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


def _lock_holders(url: str) -> list[int]:
    """The backends holding an advisory lock on the test's PostgreSQL database."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as c:
        return [r[0] for r in c.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchall()]


def test_a_server_whose_database_session_ends_takes_its_lock_again_or_stops(
    tmp_path: Path,
) -> None:
    """PostgreSQL drops a session's advisory lock with the session (a database restart, a
    failover, a dropped connection). Server A's lock session is terminated: A takes the lock
    again before its next pass, so a second server on the database is still refused (it
    once started, and ended A's running work as lost). Terminated again, and the lock taken
    at once by another session, as a second server would: A stops scheduling and exits 1
    saying so, rather than schedule beside it."""
    import psycopg

    url = db_url("postgres", tmp_path)
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    config = write_config(tmp_path / "apportion.toml", free_port(), db_url=url,
                          executor="memory")
    a = Server(config, tmp_path / "a.log")
    a.start()
    try:
        (first,) = _lock_holders(url)
        with psycopg.connect(plain, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        deadline = time.monotonic() + 30
        while not [p for p in _lock_holders(url) if p != first]:
            assert time.monotonic() < deadline, "A did not take its lock again"
            time.sleep(0.1)
        b = subprocess.run(
            [sys.executable, "-m", "apportion.cli.main", "serve", "--config", str(config),
             "--port", str(free_port())],
            capture_output=True, text=True, timeout=60)
        assert b.returncode == 1 and "another apportion server is scheduling with it" in (
            b.stderr), b.stdout + b.stderr

        (second,) = _lock_holders(url)
        with psycopg.connect(plain, autocommit=True) as thief:
            # terminate A's session and take the lock before A's next pass can
            thief.execute("SELECT pg_terminate_backend(%s)", (second,))
            while not thief.execute("SELECT pg_try_advisory_lock(%s)",
                                    (ServerLock.PG_KEY,)).fetchone()[0]:
                time.sleep(0.01)
            assert a.proc is not None
            assert a.proc.wait(timeout=60) == 1
        assert "this server lost its server lock" in (tmp_path / "a.log").read_text()
    finally:
        if a.proc is not None and a.proc.poll() is None:
            a.stop()


def test_a_lock_lost_while_the_database_is_down_is_taken_again_once_it_is_back(
    tmp_path: Path,
) -> None:
    """A PostgreSQL restart longer than a pass: the lock's session ends, and the check
    before the next pass cannot take the lock again (the database refuses connections):
    that check says the database is unavailable. Once the database takes connections
    again, the next check takes the lock again on a new connection. Before, the closed
    connection stayed the lock's and every later check failed on it (the server never
    scheduled again, and another server could take the lock)."""
    import psycopg
    from sqlalchemy.engine import make_url

    from apportion.service.store import StoreUnavailable

    url = db_url("postgres", tmp_path)
    name = make_url(url).database
    other = make_url(url.replace("postgresql+psycopg://", "postgresql://")).set(
        database="postgres").render_as_string(hide_password=False)
    lock = ServerLock.acquire(url)
    try:
        (first,) = _lock_holders(url)
        with psycopg.connect(other, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            try:
                admin.execute("SELECT pg_terminate_backend(%s)", (first,))
                with pytest.raises(StoreUnavailable):
                    lock.keep()
                with pytest.raises(StoreUnavailable):
                    lock.keep()  # still down: the same answer, on the next pass too
            finally:
                admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        lock.keep()
        (again,) = _lock_holders(url)
        assert again != first
        lock.keep()  # held: nothing to do
        assert _lock_holders(url) == [again]
    finally:
        lock.release()


def test_a_server_whose_port_is_taken_refuses_before_writing_anything(tmp_path: Path) -> None:
    """``serve`` on a port another process listens on exits 1 naming the address and what
    to do, and has written neither the database nor the first start's tokens (it said so
    only after seeding both, with uvicorn's exit 3)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = write_config(tmp_path / "apportion.toml", port, executor="memory")
        r = subprocess.run(
            [sys.executable, "-m", "apportion.cli.main", "serve", "--config", str(config)],
            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"Error: cannot listen on 127.0.0.1:{port}: Address already in use (another " \
           "server listens there: stop it, or give --port)" in r.stderr, r.stderr
    assert not list(tmp_path.rglob("*.db")) and not list(tmp_path.rglob("tokens")), \
        sorted(p.name for p in tmp_path.rglob("*"))


@pytest.mark.parametrize(("args", "said"), [
    (["--port", "70000"], "Error: Invalid value for '--port': 70000 is not in the range "
                          "0<=x<=65535."),
    (["--host", "nosuch.invalid"], "Error: cannot listen on nosuch.invalid:"),
])
def test_a_port_out_of_range_or_a_host_that_does_not_resolve_is_one_line(
    tmp_path: Path, args: list[str], said: str,
) -> None:
    """``serve --port 70000`` is a usage error naming the flag (it was an OverflowError
    traceback) and ``--host nosuch.invalid`` says the host does not resolve (it said
    'Unknown error -2'); neither writes anything."""
    config = write_config(tmp_path / "apportion.toml", free_port(), executor="memory")
    r = subprocess.run(
        [sys.executable, "-m", "apportion.cli.main", "serve", "--config", str(config), *args],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(said), r.stderr
    if "--host" in args:
        assert "the host does not resolve here" in r.stderr, r.stderr
    assert not list(tmp_path.rglob("*.db")), sorted(p.name for p in tmp_path.rglob("*"))
