"""How ``apportion serve`` takes signals: SIGTERM stops it cleanly, leaving the SQLite
database file whole on its own; SIGHUP (a habitual reload) is answered and ignored."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from server_proc import Server, free_port, write_config

from apportion.service.store import Store

DEADLINE_S = 60.0  # bounds a hang only


def submit_sleep(server: Server) -> httpx.Response:
    """alice's ``sleep 600`` submitted to ``server``: its 201 answer."""
    r = httpx.post(f"{server.url}/v1/workloads",
                   headers={"Authorization": f"Bearer {server.token('alice')}"},
                   json={"budget": "ai/llm", "gpus": 1, "min_runtime": "1h",
                         "command": ["sleep", "600"]})
    assert r.status_code == 201, r.text
    return r

def test_sigterm_stops_cleanly_and_the_database_file_alone_holds_everything(
    tmp_path: Path,
) -> None:
    """A server that took a submission and is stopped with SIGTERM exits 0 with its
    write-ahead log folded into ``apportion.db`` (the -wal file empty or gone), so a copy
    of ``apportion.db`` alone holds the submission."""
    server = Server(write_config(tmp_path / "apportion.toml", free_port(),
                                 executor="memory"), tmp_path / "server.log")
    server.start()
    try:
        r = submit_sleep(server)
    finally:
        server.stop()
    assert server.proc is not None and server.proc.returncode == 0, (
        server.log.read_text()[-2000:])
    data = tmp_path / "data"
    wal = data / "apportion.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    shutil.copy(data / "apportion.db", tmp_path / "copy.db")
    copy = Store(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        assert copy.get_workload(r.json()["id"]).command == ("sleep", "600")
    finally:
        copy.close()


def test_sigterm_with_a_database_file_it_cannot_write_exits_0_with_one_line(
    tmp_path: Path,
) -> None:
    """A server stopped with SIGTERM while ``apportion.db`` cannot be written (immutable,
    as a full or read-only disk) cannot fold its write-ahead log in: it still exits 0,
    with one line saying the log was not folded and why, and no traceback; the -wal file
    stays, and a copy of the database with it holds the submission."""
    server = Server(write_config(tmp_path / "apportion.toml", free_port(),
                                 executor="memory"), tmp_path / "server.log")
    data = tmp_path / "data"
    db = data / "apportion.db"
    server.start()
    try:
        r = submit_sleep(server)
        immutable = subprocess.run(["chattr", "+i", str(db)], capture_output=True,
                                   text=True)
        if immutable.returncode != 0:
            pytest.skip(f"chattr +i: {immutable.stderr.strip()} (needs root on ext4 etc.)")
        server.stop()
    finally:
        server.stop()
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)
    log = server.log.read_text()
    assert server.proc is not None and server.proc.returncode == 0, log[-2000:]
    assert "Traceback" not in log, log[-2000:]
    line = (f"apportion: the write-ahead log was not folded into the database file "
            f"(database sqlite:///{db}: disk I/O error): a copy of the database needs "
            f"its -wal file too")
    assert log.count(line) == 1, log[-2000:]
    shutil.copy(db, tmp_path / "copy.db")
    shutil.copy(data / "apportion.db-wal", tmp_path / "copy.db-wal")
    copy = Store(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        assert copy.get_workload(r.json()["id"]).command == ("sleep", "600")
    finally:
        copy.close()


def test_sighup_is_answered_with_one_line_and_the_server_keeps_running(
    tmp_path: Path,
) -> None:
    """SIGHUP, which many send to reload a config, neither kills the server nor reloads
    anything: one line says so, and the server keeps answering."""
    server = Server(write_config(tmp_path / "apportion.toml", free_port(),
                                 executor="memory"), tmp_path / "server.log")
    server.start()
    try:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        line = ("apportion: SIGHUP: this server does not reload its config; restart it to "
                "apply changes")
        deadline = time.monotonic() + DEADLINE_S
        while line not in server.log.read_text():
            assert server.proc.poll() is None, server.log.read_text()[-2000:]
            assert time.monotonic() < deadline, server.log.read_text()[-2000:]
            time.sleep(0.05)
        assert httpx.get(f"{server.url}/v1/health", timeout=5).status_code == 200
        assert server.log.read_text().count(line) == 1
    finally:
        server.stop()


def test_serve_says_in_its_log_the_address_it_listens_on(tmp_path: Path) -> None:
    """Among its start lines ``apportion serve`` writes ``apportion: listening on
    http://127.0.0.1:PORT``, the address and port it answers on (uvicorn, handed a socket
    bound by the server, says nothing of it: the log never said where the server was)."""
    port = free_port()
    server = Server(write_config(tmp_path / "apportion.toml", port, executor="memory"),
                    tmp_path / "server.log")
    server.start()
    try:
        text = server.log.read_text()
    finally:
        server.stop()
    assert text.count(f"apportion: listening on http://127.0.0.1:{port}\n") == 1, text


def test_serves_log_lines_say_their_level(tmp_path: Path) -> None:
    """A line ``apportion serve`` logs says its level after its time: a server with no
    budgets writes ``<date> <time> INFO apportion.scheduler no budgets yet ...``, so
    that a problem (``WARNING``, ``ERROR``) can be told from news and looked for (before,
    ``<time> apportion.scheduler scheduling pass failed ...`` and news looked
    alike)."""
    config = write_config(tmp_path / "apportion.toml", free_port(), executor="memory")
    text = config.read_text()
    # no [[budgets]]: the scheduler says, once, that it waits for one
    config.write_text(text[:text.index("[[budgets]]")] + text[text.index("[[users]]"):])
    server = Server(config, tmp_path / "server.log")
    server.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while "no budgets yet" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()[-2000:]
            time.sleep(0.05)
    finally:
        server.stop()
    [line] = [ln for ln in server.log.read_text().splitlines() if "no budgets yet" in ln]
    assert line.split(" ", 4)[2:4] == ["INFO", "apportion.scheduler"], line


def test_access_log_false_leaves_requests_out_of_the_server_log(tmp_path: Path) -> None:
    """With ``[server] access_log = false`` requests add no line to the server's log (a
    polling client wrote one per request), while its own lines (the start) are still
    written; with the default, each request is a line."""
    for access_log in (False, True):
        config = write_config(tmp_path / "apportion.toml", free_port(), executor="memory")
        if not access_log:
            config.write_text(config.read_text().replace(
                "[server]\n", "[server]\naccess_log = false\n", 1))
        log = tmp_path / f"server-{access_log}.log"
        server = Server(config, log)
        server.start()
        try:
            for _ in range(5):
                assert httpx.get(f"{server.url}/v1/health", timeout=5).status_code == 200
        finally:
            server.stop()
        text = log.read_text()
        assert "apportion: memory executor: nothing runs" in text, text
        assert "Application startup complete." in text, text
        requests = text.count('"GET /v1/health HTTP/1.1" 200')  # and the start's polls
        assert requests >= 5 if access_log else requests == 0, text


def test_request_lines_go_to_stderr_with_the_rest_of_the_servers_log(tmp_path: Path) -> None:
    """Every line ``apportion serve`` logs, uvicorn's one line per HTTP request included,
    goes to stderr and none to stdout (docs/operations.md, "The server's log": stderr
    only): the request lines went to stdout, so ``2>> file`` lost them."""
    config = write_config(tmp_path / "apportion.toml", free_port(), executor="memory")
    out_log, err_log = tmp_path / "stdout.log", tmp_path / "stderr.log"
    server = Server(config, err_log)
    with open(out_log, "ab") as out, open(err_log, "ab") as err:
        server.proc = subprocess.Popen(
            [sys.executable, "-m", "apportion.cli.main", "serve", "--config", str(config)],
            cwd=config.parent, stdout=out, stderr=err, start_new_session=True)
    try:
        server.wait_healthy()
        assert httpx.get(f"{server.url}/v1/health", timeout=5).status_code == 200
    finally:
        server.stop()
    assert out_log.read_text() == ""
    text = err_log.read_text()
    assert '"GET /v1/health HTTP/1.1" 200' in text and "apportion: listening on" in text, text
