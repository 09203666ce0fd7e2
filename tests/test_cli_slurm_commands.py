"""Slurm's commands typed after ``apportion`` by habit (docs/cli.md's table)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from apportion.cli.main import main


@pytest.mark.parametrize(("typed", "hint"), [
    ("squeue", "'apportion queue'"), ("sbatch", "'apportion submit'"),
    ("scancel", "'apportion cancel'"), ("sinfo", "'apportion hosts list'"),
    ("sacct", "'apportion show ID' (one job) or 'apportion report usage'"),
])
def test_a_slurm_command_after_apportion_is_refused_naming_apportions_own(
    typed: str, hint: str,
) -> None:
    """``apportion squeue`` (``sbatch``, ``scancel``, ``sinfo``, ``sacct``, ...) is a usage
    error (exit 2) naming the apportion command to type instead (it was click's bare
    ``No such command 'squeue'.``); another unknown command keeps click's error."""
    r = CliRunner().invoke(main, [typed, "5"])
    assert r.exit_code == 2
    assert (f"Error: No such command {typed!r}: that is Slurm's; apportion's is {hint} "
            "(docs/cli.md maps Slurm's commands)") in r.output
    other = CliRunner().invoke(main, ["queu"])
    assert other.exit_code == 2 and "Error: No such command 'queu'." in other.output
