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


class WorkloadId(click.ParamType[str]):
    """A workload id, long (``w-000005``) or short (``5``); anything else is a usage error
    naming what was typed, not a lookup of a workload that cannot exist."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        wid = workload_id(str(value))
        if wid is None:
            self.fail(f"{value!r} is not a workload id (5 or w-000005)", param, ctx)
        return wid


WORKLOAD_ID = WorkloadId()

__all__ = ["WORKLOAD_ID", "WorkloadId", "full_id", "workload_id"]
