"""``apportion submit`` refusing what it is given before anything is sent: each refusal a
usage error naming the flag as typed, the argument, or the script's file and line, never a
traceback nor a request the server would read otherwise than the user meant."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from apportion.cli.main import main

# no server listens there: a submission that got as far as sending would fail otherwise
NO_SERVER = {"APPORTION_URL": "http://127.0.0.1:9", "APPORTION_TOKEN": "t",
             "APPORTION_CLIENT_CONFIG": "/dev/null"}
FLAGS = ("--budget", "ai/llm", "--gpus", "1", "--min-runtime", "0")


@pytest.fixture(autouse=True)
def _no_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A submission that gets as far as sending fails at once, not after a minute of
    retries."""
    monkeypatch.setattr("apportion.cli.client.RETRY_WAITS", ())


def submit(*args: str, cwd: Path | None = None) -> Result:
    """``apportion submit ARGS`` in-process (in ``cwd`` if given)."""
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, ["submit", *args], env=NO_SERVER, catch_exceptions=False)
    with runner.isolated_filesystem(temp_dir=cwd):
        return runner.invoke(main, ["submit", *args], env=NO_SERVER, catch_exceptions=False)


@pytest.mark.parametrize("typed", ["90.0", "+90", "1e3", "1.5"])
def test_a_bare_number_for_time_that_is_not_whole_minutes_is_refused_naming_it(
    typed: str,
) -> None:
    """``--time 90.0`` (``+90``, ``1e3``, ``1.5``): a bare number is whole minutes, as in
    Slurm; one written otherwise is a usage error naming the flag and value (it was sent
    as is, and read by the server as that many seconds)."""
    r = submit(*FLAGS, "--time", typed, "--", "true")
    assert r.exit_code == 2
    assert (f"Error: --time {typed}: a bare number is whole minutes, as in Slurm (90); or "
            "write 90s, 1h30m, HH:MM:SS") in r.stderr


def test_a_bare_number_for_time_from_a_script_line_is_refused_naming_the_line(
    tmp_path: Path,
) -> None:
    """``#SBATCH --time=90.0`` or ``#SBATCH -t 1.5`` in a batch script: the refusal names the
    script's file and line, as for any other directive."""
    for n, line in enumerate(("#SBATCH --time=90.0", "#SBATCH -t 1.5")):
        script = tmp_path / f"job{n}.sh"
        script.write_text(f"#!/bin/sh\n{line}\n#APPORTION --budget ai/llm --gpus 1 "
                          "--min-runtime 0\ntrue\n")
        r = submit(str(script))
        assert r.exit_code == 2
        assert (f"Error: job{n}.sh:2: {line}: a bare number is whole minutes, as in Slurm "
                "(90); or write 90s, 1h30m, HH:MM:SS") in r.stderr


def test_a_time_that_is_no_duration_is_refused_in_minutes_not_seconds() -> None:
    """``--time soon``: the refusal says a bare number is minutes (the server's own words,
    "or a number of seconds", are the API's and contradicted the CLI)."""
    r = submit(*FLAGS, "--time", "soon", "--", "true")
    assert r.exit_code == 2
    assert ("Error: --time soon: must be a duration like 2h, 1h30m, 1-00:00:00 or HH:MM:SS, "
            "or a whole number of minutes as in Slurm (90)") in r.stderr
    assert "seconds" not in r.stderr
