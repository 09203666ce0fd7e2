"""What ``apportion submit`` does with input the server refuses or that changes while it
waits, against a live server (SQLite, the memory executor): each refusal names the flag or
the script line as typed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_env import Env, start_env
from click.testing import CliRunner, Result

from apportion.cli.main import main


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = start_env(tmp_path, "sqlite")
    yield e
    e.close()


def cli(env: Env, who: str, *args: str, **kw: Any) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env={
        "APPORTION_URL": env.server.url, "APPORTION_TOKEN": env.tokens[who],
        "APPORTION_CLIENT_CONFIG": "/dev/null", "TZ": "UTC"}, **kw)


def test_a_min_runtime_whose_clock_field_is_out_of_range_is_refused_naming_flag_or_line(
    env: Env, tmp_path: Path,
) -> None:
    """``--min-runtime 99:99`` and ``#APPORTION --min-runtime 99:99`` are refused (exit 2)
    naming the flag or the script line, the value as typed and the field out of range (it
    was accepted as 6,039 s)."""
    r = cli(env, "alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "99:99", "--", "true")
    assert r.exit_code == 2
    assert r.stderr.startswith(
        "Error: --min-runtime: '99:99': the seconds, 99, must be under 60")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --account ai/llm --gres=gpu:1\n"
                      "#APPORTION --min-runtime 99:99\ntrue\n")
    r = cli(env, "alice", "submit", str(script))
    assert r.exit_code == 2
    assert r.stderr.startswith(
        "Error: job.sh:3: #APPORTION --min-runtime 99:99: '99:99': the seconds, 99, must be "
        "under 60")
    assert env.call("GET", "/v1/workloads", "alice").json() == []


def test_wait_whose_token_is_revoked_says_the_work_was_accepted_and_goes_on(
    env: Env, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``submit --wait`` whose token is revoked while it waits exits 43 (no valid token)
    with one error line saying the workload (its id) was accepted and keeps its place, that
    waiting stopped because the token is no longer valid, and how to follow it with another
    token; it said only "invalid token", as if the submission had failed."""
    token = env.store.tokens("alice")[0]

    def revoke(_: float) -> None:
        if env.store.tokens("alice")[0].revoked_at is None:
            assert env.call("POST", f"/v1/tokens/{token.id}/revoke", "root").status_code == 200

    monkeypatch.setattr("apportion.cli.jobs.time.sleep", revoke)
    r = cli(env, "alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "30m", "--wait", "--", "true")
    assert r.exit_code == 43
    assert r.stdout.startswith("submitted w-000001 ")
    assert r.stderr.splitlines()[-1] == (
        "Error: w-000001 was accepted and keeps its place in the queue, but waiting for it "
        "stopped: the token is no longer valid (invalid token (HTTP 401)); follow it with a "
        "valid token: apportion show w-000001, apportion logs -f w-000001")
    assert env.call("GET", "/v1/workloads/w-000001", "root").json()["status"] == "pending"
