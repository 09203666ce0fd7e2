"""An admin adding or changing a user learns at once whether the server would run that
user's work (the check a submission makes), not at the user's first submission."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from store_db import ServerThread, write_config

from apportion.service.api import create_app
from apportion.service.clock import FakeClock
from apportion.service.config import ServiceConfig, load_config
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store
from apportion.service.store.seed import seed_store

MISSING = "apportion-no-such-account"


def cli(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "apportion.cli.main", *args, "--url", url,
                           "--token", token], capture_output=True, text=True, timeout=120)


def serve(tmp_path: Path, kind: str) -> tuple[ServerThread, Store, str]:
    """The API with ``[executor] kind`` set to ``kind`` (the scheduler's own executor is the
    memory one: only what the API tells of users is looked at), not single-user."""
    config: ServiceConfig = load_config(write_config(tmp_path))
    config = replace(config, executor=replace(config.executor, kind=kind))
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    store.migrate()
    tokens = seed_store(store, config)
    clock = FakeClock(1_000_000.0)
    sched = Scheduler(store, MemoryExecutor([("h1", 8)], clock), config.policy, clock)
    return ServerThread(create_app(store, sched, config)), store, tokens["root"]


def test_users_add_set_and_list_say_when_the_work_cannot_run(tmp_path: Path) -> None:
    """With the local executor: adding a user whose Unix account does not exist succeeds
    with a warning on stderr naming the account; users list shows it in CAN_RUN; setting
    the account to one that does not exist either warns the same way."""
    server, store, root = serve(tmp_path, "local")
    try:
        added = cli(server.url, root, "users", "add", "frank", "--unix-user", MISSING)
        assert added.returncode == 0, added.stderr
        assert added.stdout == f"added frank: admin no, runs as {MISSING}\n"
        assert added.stderr == ("warning: frank's work cannot run until this is fixed: Unix "
                                f"account '{MISSING}' does not exist\n")
        listed = cli(server.url, root, "users", "list")
        assert listed.returncode == 0, listed.stderr
        (frank,) = [line.split(None, 3) for line in listed.stdout.splitlines()
                    if line.startswith("frank ")]
        assert frank == ["frank", "no", MISSING, f"no: Unix account '{MISSING}' does not exist"]
        changed = cli(server.url, root, "users", "set", "frank", "--unix-user", MISSING + "2")
        assert changed.returncode == 0, changed.stderr
        assert f"Unix account '{MISSING}2' does not exist" in changed.stderr
    finally:
        server.stop()
        store.close()


def test_with_the_memory_executor_every_user_can_run(tmp_path: Path) -> None:
    """The memory executor runs nothing and checks no account: no warning, CAN_RUN yes."""
    server, store, root = serve(tmp_path, "memory")
    try:
        added = cli(server.url, root, "users", "add", "frank", "--unix-user", MISSING)
        assert (added.returncode, added.stderr) == (0, "")
        listed = cli(server.url, root, "users", "list")
        assert [line.split() for line in listed.stdout.splitlines()
                if line.startswith("frank ")] == [["frank", "no", MISSING, "yes"]]
    finally:
        server.stop()
        store.close()
