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
