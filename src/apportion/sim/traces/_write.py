"""``write_canonical``: jobs to a canonical trace (CSV, JSON Lines or Parquet, by extension)."""

from __future__ import annotations

import csv
import gzip
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from ..model import SimJob
from ._errors import TraceError
from ._read import delimiter_of, kind_of
from ._record import CANONICAL_COLUMNS, legacy_from_priority


def _number(x: float) -> int | float:
    """Whole seconds as integers (``604`` rather than ``604.0``); others exactly (repr)."""
    return int(x) if float(x).is_integer() else float(x)


def _row(job: SimJob, extra: tuple[str, ...]) -> dict[str, object]:
    s = job.spec
    row: dict[str, object] = {
        "id": s.id,
        "submit_time": _number(s.submit_time),
        "budget": s.budget,
        "user": s.user,
        "gpus": s.gpus,
        "duration": _number(job.duration),
        "min_runtime": _number(s.min_runtime),
        "resumable": s.resumable,
        "priority": s.priority,
        "preemptible": job.legacy_preemptible,
        "checkpoint_interval": _number(s.checkpoint_interval),
    }
    if "legacy_priority" in extra:
        row["legacy_priority"] = job.legacy_priority.name.lower()
    if "squat" in extra:
        row["squat"] = job.squat
    if "gpu_kinds" in extra:
        row["gpu_kinds"] = ",".join(s.gpu_kinds)
    if "cluster" in extra:
        row["cluster"] = s.cluster
    if "checkpoint_on_term" in extra:
        row["checkpoint_on_term"] = s.checkpoint_on_term
    if "time_limit" in extra:
        row["time_limit"] = _number(s.time_limit)
    if "patience" in extra:
        row["patience"] = None if job.patience is None else _number(job.patience)
    return row


def write_canonical(jobs: Iterable[SimJob], path: str | os.PathLike[str]) -> Path:
    """Write ``jobs`` as a canonical trace; the format follows the extension (``.csv``,
    ``.tsv`` (tab-separated), ``.jsonl``, ``.parquet`` and the others ``_read.KINDS`` names;
    a text one with ``.gz`` added is compressed). Every field is written, so
    ``load_trace(path)`` gives back the same jobs, except a workload's ``hosts`` and
    ``hold`` (placement limits and dependencies: the format has no columns for them). Extra
    columns appear only when needed: ``legacy_priority`` when a job's old-scheduler level is
    not the one its priority implies, ``squat`` when a job is an idle placeholder,
    ``gpu_kinds`` and ``cluster`` when a job asks for a GPU kind or a cluster (a fleet's
    work), ``checkpoint_on_term``, ``time_limit`` and ``patience`` when a job checkpoints
    when told to stop, has a time limit or an owner who gives up waiting. Returns the path
    written."""
    file = Path(path)
    kind = kind_of(file)
    jobs = list(jobs)
    extra: tuple[str, ...] = ()
    if any(j.legacy_priority != legacy_from_priority(j.spec.priority) for j in jobs):
        extra += ("legacy_priority",)
    if any(j.squat for j in jobs):
        extra += ("squat",)
    if any(j.spec.gpu_kinds for j in jobs):
        extra += ("gpu_kinds",)
    if any(j.spec.cluster for j in jobs):
        extra += ("cluster",)
    if any(j.spec.checkpoint_on_term for j in jobs):
        extra += ("checkpoint_on_term",)
    if any(j.spec.time_limit for j in jobs):
        extra += ("time_limit",)
    if any(j.patience is not None for j in jobs):
        extra += ("patience",)
    columns = CANONICAL_COLUMNS + extra
    rows = [_row(j, extra) for j in jobs]
    try:
        if kind == "parquet":
            _write_parquet(file, columns, rows)
        else:
            with _open(file) as f:
                if kind == "csv":
                    w = csv.writer(f, delimiter=delimiter_of(file), lineterminator="\n")
                    w.writerow(columns)
                    for r in rows:
                        w.writerow(_cell(r[c]) for c in columns)
                else:
                    for r in rows:
                        f.write(json.dumps(r, separators=(",", ":")) + "\n")
    except OSError as e:
        raise TraceError(f"{file}: cannot write: {e.strerror or e}") from None
    return file


def _cell(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _open(file: Path) -> IO[str]:
    if file.suffix.lower() == ".gz":
        return gzip.open(file, "wt", encoding="utf-8", newline="")
    return open(file, "w", encoding="utf-8", newline="")  # noqa: SIM115 - caller closes


def _write_parquet(file: Path, columns: tuple[str, ...], rows: list[dict[str, object]]) -> None:
    import pyarrow as pa  # imported here: only Parquet traces need it
    import pyarrow.parquet as pq

    types = {
        "id": pa.string(), "budget": pa.string(), "user": pa.string(),
        "gpu_kinds": pa.string(), "cluster": pa.string(),
        "legacy_priority": pa.string(), "gpus": pa.int64(), "priority": pa.int64(),
        "resumable": pa.bool_(), "preemptible": pa.bool_(), "squat": pa.bool_(),
        "checkpoint_on_term": pa.bool_(),
    }
    schema = pa.schema([(c, types.get(c, pa.float64())) for c in columns])
    data = {c: [r[c] for r in rows] for c in columns}
    pq.write_table(pa.table(data, schema=schema), file)
