"""Workload ids as people type them: ``5`` (or ``000005``) for ``w-000005``."""

from __future__ import annotations

import re
from typing import Any

import click

# ASCII digits only: str.isdigit and int() take others too ("²" is a digit, "٥" is 5)
_NUMBER = re.compile(r"[0-9]+")


def full_id(text: str) -> str:
    """``5``, ``000005`` or ``w-5`` -> ``w-000005``; anything else is kept as given."""
    t = text.strip()
    digits = t.removeprefix("w-")
    return f"w-{int(digits):06d}" if _NUMBER.fullmatch(digits) else t


def workload_id(text: str) -> str | None:
    """``text`` as a long workload id (``5`` -> ``w-000005``), or None if it is none."""
    wid = full_id(text)
    return wid if wid.startswith("w-") and _NUMBER.fullmatch(wid[2:]) else None


# Slurm's id of an array's element, JOBID_INDEX (123_4), or of a whole array (123_[1-5])
_SLURM_ELEMENT = re.compile(r"(w-)?[0-9]+_(\[.*\]|[0-9]+)")


def not_an_id(typed: str) -> str:
    """Why ``typed`` is refused as a workload id; for Slurm's ``123_4``, where an array's
    element has an id of its own here, what to give instead."""
    said = f"{typed!r} is not a workload id (5 or w-000005)"
    if _SLURM_ELEMENT.fullmatch(typed.strip()):
        said += ("; an array's element has an id of its own, not Slurm's JOBID_INDEX "
                 "(apportion queue lists them), and the array's id (its first element's) "
                 "stands for the whole array in --dependency and cancel --array")
    return said


class WorkloadId(click.ParamType[str]):
    """A workload id, long (``w-000005``) or short (``5``); anything else is a usage error
    naming what was typed, not a lookup of a workload that cannot exist."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        wid = workload_id(str(value))
        if wid is None:
            self.fail(not_an_id(str(value)), param, ctx)
        return wid


WORKLOAD_ID = WorkloadId()

__all__ = ["WORKLOAD_ID", "WorkloadId", "full_id", "not_an_id", "workload_id"]
