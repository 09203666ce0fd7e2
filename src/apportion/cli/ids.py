"""Workload ids as people type them: ``5`` (or ``000005``) for ``w-000005``."""

from __future__ import annotations

from typing import Any

import click


def full_id(text: str) -> str:
    """``5`` or ``000005`` -> ``w-000005``; anything else is kept as given."""
    t = text.strip()
    return f"w-{int(t):06d}" if t.isdigit() else t


class WorkloadId(click.ParamType[str]):
    """A workload id, long (``w-000005``) or short (``5``)."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        return full_id(str(value))


WORKLOAD_ID = WorkloadId()

__all__ = ["WORKLOAD_ID", "WorkloadId", "full_id"]
