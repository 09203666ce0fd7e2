"""Workload ids as people type them (``5``, ``w-5``): ASCII digits only, anything else a
usage error naming what was typed, never a traceback or a lookup of another workload."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from apportion.cli.ids import workload_id
from apportion.cli.jobs import _gres_gpus
from apportion.cli.main import main


@pytest.mark.parametrize(("typed", "wid"), [
    ("5", "w-000005"), ("w-5", "w-000005"), ("000005", "w-000005"), ("w-000005", "w-000005"),
    ("²", None), ("w-²", None),  # a digit to str.isdigit, not to int()
    ("٥", None), ("w-٥", None),  # Arabic-Indic 5: int() reads it as 5
])
def test_only_ascii_digits_make_a_workload_id(typed: str, wid: str | None) -> None:
    """``5`` and ``w-5`` are ``w-000005``; a superscript or Arabic-Indic digit is no id
    (``²`` crashed ``int()``, ``٥`` was taken as ``w-000005``)."""
    assert workload_id(typed) == wid


@pytest.mark.parametrize("typed", ["²", "٥", "w-٥"])
def test_cancel_of_an_id_in_other_digits_is_a_usage_error_naming_it(typed: str) -> None:
    """``apportion cancel ²`` (or ``٥``) exits 2 saying what was typed is not a workload id,
    before any request: no traceback, no cancel of ``w-000005``."""
    r = CliRunner().invoke(main, ["cancel", typed], catch_exceptions=False, env={
        "APPORTION_URL": "http://127.0.0.1:9", "APPORTION_TOKEN": "t",
        "APPORTION_CLIENT_CONFIG": "/dev/null"})
    assert r.exit_code == 2, r.output
    assert f"{typed!r} is not a workload id (5 or w-000005)" in r.stderr


@pytest.mark.parametrize(("gres", "gpus"), [
    ("gpu:4", "4"), ("gpu:a100:4", "4"), ("gpu:٥", None), ("gpu:a100:²", None),
    ("gpu", None), ("tpu:4", None),
])
def test_a_gres_gpu_count_is_read_in_ascii_digits_only(gres: str, gpus: str | None) -> None:
    """``#SBATCH --gres=gpu:N`` gives N GPUs only for ASCII digits: ``gpu:٥`` was read as
    5 GPUs (``int()`` takes Arabic-Indic digits), ``gpu:²`` crashed it."""
    assert _gres_gpus(gres) == gpus


@pytest.mark.parametrize("args", [("show", "15_2"), ("cancel", "w-15_2"), ("why", "15_[1-3]"),
                                  ("submit", "--budget", "ai/llm", "--gpus", "1",
                                   "--min-runtime", "0", "-d", "afterok:15_2", "--", "true")])
def test_slurms_array_element_id_is_refused_saying_elements_have_ids_of_their_own(
    args: tuple[str, ...],
) -> None:
    """Slurm's ``JOBID_INDEX`` (``15_2``, ``w-15_2``, ``15_[1-3]``) where a workload id is
    taken (an argument, ``--dependency``) is a usage error that says an array's element has
    an id of its own and the array's id stands for the whole array (it said only ``is not a
    workload id (5 or w-000005)``); nothing is sent."""
    r = CliRunner().invoke(main, list(args), env={"APPORTION_URL": "http://127.0.0.1:9",
                                                  "APPORTION_TOKEN": "t",
                                                  "APPORTION_CLIENT_CONFIG": "/dev/null"})
    assert r.exit_code == 2, r.output
    assert ("is not a workload id (5 or w-000005); an array's element has an id of its own, "
            "not Slurm's JOBID_INDEX (apportion queue lists them), and the array's id (its "
            "first element's) stands for the whole array in --dependency and cancel --array"
            ) in " ".join(r.output.split())
