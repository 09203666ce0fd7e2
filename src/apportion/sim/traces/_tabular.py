"""Importer for column traces: the canonical format, ITP, and any CSV with a column mapping."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from apportion.text import as_written

from ._errors import Bad, Notes, TraceError
from ._parse import (
    check_path,
    is_missing,
    parse_bool,
    parse_duration,
    parse_int,
    parse_kinds,
    parse_patience,
    parse_time,
    text,
)
from ._read import Table, find_column
from ._record import (
    CANONICAL_COLUMNS,
    EXTRA_COLUMNS,
    REQUIRED_COLUMNS,
    Record,
    TimeKind,
    parse_level,
    parse_priority,
)

#: ITP traces (microsoft/elasticflow-traces) as a column mapping.
ITP_MAPPING: Mapping[str, str] = {
    "id": "job_id",
    "submit_time": "submission_time",
    "duration": "duration",
    "gpus": "num_gpu",
}

KNOWN_FIELDS = CANONICAL_COLUMNS + EXTRA_COLUMNS

# The kind of value each field holds. Two fields may read one column only if they hold the
# same kind: a time read as a GPU count can only be a slip (a copied --map), while duration
# and min_runtime from one column (every job protected for its whole run) may be meant.
# priority and legacy_priority differ: 1 is HIGH as a priority but NORMAL as a level.
_KIND: dict[str, str] = {
    "submit_time": "a time",
    "gpus": "a GPU count",
    "duration": "a duration",
    "min_runtime": "a duration",
    "checkpoint_interval": "a duration",
    "time_limit": "a duration",
    "patience": "a duration",
    "id": "a name",
    "budget": "a name",
    "user": "a name",
    "cluster": "a name",
    "resumable": "a boolean",
    "preemptible": "a boolean",
    "squat": "a boolean",
    "checkpoint_on_term": "a boolean",
    "priority": "a priority",
    "legacy_priority": "a priority level",
    "gpu_kinds": "GPU kinds",
}
assert set(_KIND) == set(KNOWN_FIELDS)  # a new field must say what it holds


def resolve_columns(
    path: Path, header: list[str], mapping: Mapping[str, str] | None
) -> dict[str, str]:
    """canonical name -> column of the file. Mapped names must exist; the others are taken
    from a column of the same name when the file has one."""
    mapping = dict(mapping or {})
    for name in mapping:
        if name not in KNOWN_FIELDS:
            raise TraceError(
                f"mapping: {name}: not a canonical field (known: {', '.join(KNOWN_FIELDS)})"
            )
    columns: dict[str, str] = {}
    for name in KNOWN_FIELDS:
        if name in mapping:
            col = find_column(header, mapping[name])
            if col is None:
                raise TraceError(
                    f"{path}: {mapping[name]}: column not found (mapped to {name}; "
                    f"columns: {', '.join(header)})"
                )
            columns[name] = col
        else:
            found = find_column(header, name)
            if found is not None:
                columns[name] = found
    reader: dict[str, str] = {}  # file column -> the first field that reads it
    for name, col in columns.items():
        other = reader.setdefault(col, name)
        if _KIND[other] != _KIND[name]:
            raise TraceError(
                f"mapping: {other} ({_KIND[other]}) and {name} ({_KIND[name]}) "
                f"both read column {col!r}"
            )
    for name in REQUIRED_COLUMNS:
        if name not in columns:
            raise TraceError(
                f"{path}: {name}: required column missing (columns: {', '.join(header)})"
                + _not_a_header(header)
            )
    return columns


def _not_a_header(header: list[str]) -> str:
    """Why the first line read as the header is none, when it is a line spreadsheets or
    tools write before it: Excel's ``sep=,`` or a ``#`` comment."""
    first = header[0].strip() if header else ""
    if first.lower().startswith("sep="):
        return "; the first line is Excel's 'sep=' line, not the header: remove it"
    if first.startswith("#"):
        return "; the first line is a comment, not the header: the header must come first"
    return ""


def read_mapped(
    path: Path,
    table: Table,
    mapping: Mapping[str, str] | None,
    extras: Iterable[str],
    notes: Notes,
) -> list[Record]:
    """Records of a column trace; bad cells raise :class:`TraceError` (``file:line: column:``)."""
    header, rows = table
    columns = resolve_columns(path, header, mapping)
    keep: dict[str, str] = {}  # extra column names asked for (budget synthesis) -> file column
    for name in extras:
        if name in KNOWN_FIELDS:  # read into the record's own field
            if name not in columns:
                raise TraceError(
                    f"{path}: {name}: column not found (columns: {', '.join(header)})"
                )
            continue
        col = find_column(header, name)
        if col is None:
            raise TraceError(f"{path}: {name}: column not found (columns: {', '.join(header)})")
        keep[name] = col
    kind = TimeKind(str(path))
    c_submit, c_gpus, c_dur = columns["submit_time"], columns["gpus"], columns["duration"]
    optional: list[tuple[str, str, Callable[[object], object]]] = [
        (name, columns[name], parser)
        for name, parser in _OPTIONAL
        if name in columns
    ]
    out: list[Record] = []
    seen: dict[str, int] = {}  # id -> line it first appeared on
    c_id = columns.get("id", "id")
    for line, row in rows:
        column = ""
        try:
            column = c_submit
            value = row.get(c_submit)
            if is_missing(value):
                raise Bad("missing value (required)")
            submit, absolute = parse_time(value)
            if not absolute and submit < 0:
                raise Bad(f"must be >= 0 seconds, got {as_written(value)}")
            kind.check(absolute, line, c_submit)
            column = c_gpus
            value = row.get(c_gpus)
            if is_missing(value):
                raise Bad("missing value (required)")
            gpus = parse_int(value)
            if gpus < 0:
                raise Bad(f"must be >= 0, got {gpus}")
            column = c_dur
            value = row.get(c_dur)
            if is_missing(value):
                raise Bad("missing value (required)")
            duration = parse_duration(value)
            rec = Record(line, submit, absolute, gpus, duration)
            for name, col, parser in optional:
                column = col
                value = row.get(col)
                # is_missing, inlined: this loop runs for every cell of the file
                if value is None or (value.__class__ is str and not value.strip()):
                    continue
                parsed = parser(value)
                if name == "priority":
                    assert isinstance(parsed, tuple)
                    rec.priority = parsed[0]
                    if rec.legacy_priority is None:  # an explicit legacy_priority wins
                        rec.legacy_priority = parsed[1]
                else:
                    setattr(rec, name, parsed)
            for name, col in keep.items():
                value = row.get(col)
                rec.keys[name] = "" if is_missing(value) else text(value)
        except Bad as e:
            raise TraceError(f"{path}:{line}: {column}: {e}") from None
        if rec.id is not None:
            first = seen.setdefault(rec.id, line)
            if first != line:
                raise TraceError(
                    f"{path}:{line}: {c_id}: duplicate id {rec.id!r} (first at line {first})"
                )
        if gpus == 0:
            notes.skip("no GPUs", line)
        elif duration == 0:
            notes.skip("duration is 0", line)
        else:
            out.append(rec)
    return out


# Optional fields in the order they are read. Record attributes carry the same names.
_OPTIONAL: list[tuple[str, Callable[[object], object]]] = [
    ("id", text),
    ("budget", lambda v: check_path(text(v))),
    ("user", text),
    ("min_runtime", parse_duration),
    ("resumable", parse_bool),
    # legacy_priority before priority: an explicit level wins over the one priority implies
    ("legacy_priority", parse_level),
    ("priority", parse_priority),
    ("preemptible", parse_bool),
    ("checkpoint_interval", parse_duration),
    ("squat", parse_bool),
    ("gpu_kinds", parse_kinds),
    ("cluster", text),
    ("checkpoint_on_term", parse_bool),
    ("time_limit", parse_duration),
    ("patience", parse_patience),
]
