"""Trace import for the simulator: real job histories in, :class:`~apportion.sim.model.SimJob`
lists and a :class:`~apportion.core.BudgetTree` out.

Entry points: :func:`load_trace` (canonical CSV/JSON Lines/Parquet, ITP, Slurm ``sacct``, any
CSV with a column mapping) and :func:`write_canonical`. The format, the importers and every
default rule are described in docs/traces.md.

Errors: :class:`TraceError` (a ``ValueError``) with ``file:line: field: problem``.
"""

from collections.abc import Iterable

from apportion.core import parse_duration  # the package's one duration parser, re-exported

from ._errors import NoBudgetColumn, TraceError
from ._load import FORMATS, MinRuntimeRule, Trace, load_trace
from ._record import CANONICAL_COLUMNS, REQUIRED_COLUMNS, legacy_from_priority
from ._rules import default_min_runtime, default_resumable, stable_bucket, stable_unit
from ._sacct import parse_tres
from ._tabular import ITP_MAPPING
from ._write import write_canonical


def parse_mapping(items: Iterable[str]) -> dict[str, str]:
    """``["gpus=num_gpu", ...]`` (the CLI's repeated ``--map canonical=column``) as a mapping.

    Raises :class:`TraceError` naming ``--map`` for an item without ``=`` and for a field
    mapped twice (the last would win, silently: ``--map`` is repeated, so a slip is easy)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, column = item.partition("=")
        name, column = name.strip(), column.strip()
        if not sep or not name or not column:
            raise TraceError(f"--map: expected canonical=column, got {item!r}")
        if name in out:
            raise TraceError(
                f"--map: {name} is mapped twice: {name}={out[name]} and {name}={column}"
            )
        out[name] = column
    return out


__all__ = [
    "CANONICAL_COLUMNS",
    "FORMATS",
    "ITP_MAPPING",
    "REQUIRED_COLUMNS",
    "MinRuntimeRule",
    "NoBudgetColumn",
    "Trace",
    "TraceError",
    "default_min_runtime",
    "default_resumable",
    "legacy_from_priority",
    "load_trace",
    "parse_duration",
    "parse_mapping",
    "parse_tres",
    "stable_bucket",
    "stable_unit",
    "write_canonical",
]
