"""``load_trace``: read any supported trace into simulator jobs and a budget tree."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from apportion.core import BudgetTree, CoreError, Host, WorkloadSpec, format_duration

from ..model import SimJob
from ._budgets import BudgetCount, BudgetOptions, assign, key_columns
from ._errors import NoBudgetColumn, Notes, TraceError
from ._read import find_column, kind_of, known_kind, read_table
from ._record import Record, legacy_from_priority
from ._rules import HOUR, MINUTE, default_min_runtime, default_resumable, stable_unit
from ._sacct import hosts_of, read_sacct
from ._tabular import ITP_MAPPING, read_mapped

#: Accepted values of ``load_trace(format=...)``.
FORMATS: tuple[str, ...] = ("canonical", "itp", "sacct", "csv")


@dataclass(frozen=True, slots=True)
class Trace:
    """An imported trace: jobs in submission order and the budget tree they draw on.

    ``skipped`` counts rows that did not become jobs, by reason (job steps, jobs that never
    started, jobs without GPUs or with a zero duration); ``adjusted`` counts jobs changed on the
    way in (a min_runtime lowered to the cap, a still-running job). ``warnings`` says the same
    as one line per reason, with the first line it happened on. ``time_origin`` is what was
    subtracted from the submit times: seconds since the Unix epoch for ISO 8601 traces,
    the first submit time with ``rebase``, else 0; ``wall_clock`` says which: True when the
    trace's times are wall-clock times (ISO 8601, Parquet timestamps), so that
    ``time_origin`` is the wall-clock time of the replay's 0. ``hosts`` is the cluster the
    trace says it ran on (sacct with a ``NodeList`` column, see :func:`hosts_of`), empty otherwise.
    ``min_runtime_lowered``: the ids of the jobs whose given min_runtime was lowered to
    ``max_min_runtime``, in submission order."""

    jobs: tuple[SimJob, ...]
    tree: BudgetTree
    source: str
    skipped: Mapping[str, int]
    adjusted: Mapping[str, int]
    warnings: tuple[str, ...]
    time_origin: float
    hosts: tuple[Host, ...] = ()
    min_runtime_lowered: tuple[str, ...] = ()
    wall_clock: bool = False

    @property
    def n_skipped(self) -> int:
        """Rows that did not become jobs."""
        return sum(self.skipped.values())

    @property
    def rows(self) -> int:
        """Data rows read: jobs plus skipped rows."""
        return len(self.jobs) + self.n_skipped


MinRuntimeRule = Callable[[int, float], float]


def load_trace(
    path: str | os.PathLike[str],
    format: str = "canonical",
    *,
    mapping: Mapping[str, str] | None = None,
    budgets: BudgetCount | None = None,
    budget_column: str | Sequence[str] | None = None,
    budget_key: str | None = None,
    weights: Mapping[str, float] | None = None,
    tree: BudgetTree | None = None,
    max_min_runtime: float = 8 * HOUR,
    min_runtime_rule: MinRuntimeRule | None = None,
    unallocated_fraction: float = 0.0,
    resumable_after: float = HOUR,
    checkpoint_interval: float = 30 * MINUTE,
    seed: int = 0,
    rebase: bool = False,
    delimiter: str = ",",
) -> Trace:
    """Read a trace file into :class:`Trace` (jobs, budget tree, skipped-row counts).

    ``format``: ``"canonical"`` (CSV, JSON Lines or Parquet, told by the file extension),
    ``"itp"`` (Microsoft ITP columns), ``"sacct"`` (``sacct --parsable2`` output) or ``"csv"``
    (any columns; ``mapping`` maps canonical names to them, ``{"gpus": "num_gpu"}``). ``itp``
    and ``csv`` read CSV, or JSON Lines or Parquet when the file name says so, as canonical
    does; a name of no known kind (``jobs.txt``) is read as CSV.

    Budgets: ``budget_column`` (one budget per value of a column, or per combination of
    several), ``budgets`` (``N`` stable synthetic budgets ``trace/b00``.., or a list of leaf
    paths, hashed by ``budget_key``), else the trace's own ``budget`` column. ``weights``
    sets node weights of the built tree (default 1 each); ``tree`` supplies the whole tree
    instead (the jobs' budgets must be its leaves; jobs are hashed onto its leaves when the
    trace names no budgets).

    Defaults for missing fields: ``min_runtime_rule(gpus, duration)`` (default
    :func:`default_min_runtime` with ``max_min_runtime``), then ``unallocated_fraction`` of
    those jobs (chosen by a hash of ``seed`` and the id) become unallocated (min_runtime 0);
    ``resumable`` when longer than ``resumable_after``; ``checkpoint_interval`` for resumable
    jobs (0 otherwise). A given min_runtime above ``max_min_runtime`` is lowered to it.

    Raises :class:`TraceError` (a ``ValueError``), ``file:line: field: problem``, on the first
    bad row, and names the option for bad arguments. Nothing is returned on error."""
    if format not in FORMATS:
        raise TraceError(f"format: unknown format {format!r} (known: {', '.join(FORMATS)})")
    _check_number("max_min_runtime", max_min_runtime, positive=True)
    _check_number("resumable_after", resumable_after)
    _check_number("checkpoint_interval", checkpoint_interval)
    if not 0.0 <= unallocated_fraction <= 1.0:
        raise TraceError(
            f"unallocated_fraction: must be between 0 and 1, got {unallocated_fraction!r}"
        )
    if mapping is not None and format == "sacct":
        raise TraceError("mapping: not used by format 'sacct' (its columns are fixed)")
    opts = BudgetOptions(budgets, budget_column, budget_key, weights, tree, seed)
    opts.check()

    file = Path(path)
    source = str(file)
    notes = Notes(source)
    extras = key_columns(opts)
    header: list[str] = []  # a column trace's, to name its budget column
    cols: dict[str, str] = {}
    if format == "sacct":
        records = read_sacct(file, extras, notes)
    else:
        if format == "canonical":
            kind, cols = kind_of(file), dict(mapping or {})
        else:  # itp, csv: CSV, unless the name says JSON Lines or Parquet (a .txt is CSV)
            kind = kind_of(file) if known_kind(file) else "csv"
            cols = {**ITP_MAPPING, **(mapping or {})} if format == "itp" else dict(mapping or {})
        table = read_table(file, kind, delimiter)
        header = table[0]
        records = read_mapped(file, table, cols, extras, notes)
    if not records:
        raise TraceError(f"{source}: no jobs in the trace" + "".join(
            f"; {w.split(': ', 1)[1]}" for w in notes.warnings()
        ))

    seen: dict[str, int] = {}
    for rec in records:
        if rec.id is None:
            rec.id = f"line{rec.line}"
        first = seen.setdefault(rec.id, rec.line)
        if first != rec.line:
            raise TraceError(
                f"{source}:{rec.line}: id: duplicate id {rec.id!r} (first at line {first})"
            )
    origin = min(r.submit for r in records) if (records[0].absolute or rebase) else 0.0
    try:
        budget_tree = assign(source, records, opts)
    except NoBudgetColumn:
        # the file has a budget column, empty on every row: say so, not "no budget column"
        column = find_column(header, cols.get("budget", "budget"))
        if column is None:
            raise
        raise NoBudgetColumn(source, column) from None
    rule = min_runtime_rule or partial(default_min_runtime, max_min_runtime=max_min_runtime)

    jobs: list[SimJob] = []
    for rec in records:
        try:
            jobs.append(_job(rec, origin, rule, max_min_runtime, unallocated_fraction,
                             resumable_after, checkpoint_interval, seed, notes))
        except CoreError as e:  # cannot happen for parsed rows; kept so nothing escapes unnamed
            raise TraceError(f"{source}:{rec.line}: {e}") from None
    jobs.sort(key=lambda j: j.spec.submit_time)  # stable: ties keep file order
    lowered = {r.id for r in records
               if r.min_runtime is not None and r.min_runtime > max_min_runtime}
    return Trace(
        jobs=tuple(jobs),
        tree=budget_tree,
        source=source,
        skipped=dict(notes.skipped),
        adjusted=dict(notes.adjusted),
        warnings=notes.warnings(),
        time_origin=origin,
        hosts=hosts_of(records) if format == "sacct" else (),
        min_runtime_lowered=tuple(j.spec.id for j in jobs if j.spec.id in lowered),
        wall_clock=bool(records[0].absolute),
    )


def _check_number(name: str, value: float, positive: bool = False) -> None:
    ok = isinstance(value, int | float) and math.isfinite(value) and (
        value > 0 if positive else value >= 0
    )
    if not ok:
        raise TraceError(f"{name}: must be {'> 0' if positive else '>= 0'} seconds, got {value!r}")


def _job(
    rec: Record,
    origin: float,
    rule: MinRuntimeRule,
    cap: float,
    unallocated_fraction: float,
    resumable_after: float,
    checkpoint_default: float,
    seed: int,
    notes: Notes,
) -> SimJob:
    assert rec.id is not None and rec.budget is not None
    if rec.min_runtime is None:
        m = rule(rec.gpus, rec.duration)
        if not 0 <= m <= cap:
            raise TraceError(
                f"min_runtime_rule: returned {m!r} s for line {rec.line}, outside 0 s to "
                f"{format_duration(cap)}"
            )
        if unallocated_fraction and stable_unit(seed, "unallocated", rec.id) < unallocated_fraction:
            m = 0.0
    else:
        m = rec.min_runtime
        if m > cap:
            m = cap
            notes.adjust(
                f"min_runtime above max_min_runtime ({format_duration(cap)}): lowered to it",
                rec.line)
    resumable = (
        rec.resumable if rec.resumable is not None
        else default_resumable(rec.duration, resumable_after)
    )
    ckpt = rec.checkpoint_interval
    if ckpt is None:
        ckpt = checkpoint_default if resumable else 0.0
    priority = rec.priority or 0
    spec = WorkloadSpec(
        id=rec.id,
        budget=rec.budget,
        gpus=rec.gpus,
        min_runtime=m,
        submit_time=rec.submit - origin,
        user=rec.user,
        resumable=resumable,
        priority=priority,
        checkpoint_interval=ckpt,
        gpu_kinds=rec.gpu_kinds,
        cluster=rec.cluster,
        checkpoint_on_term=bool(rec.checkpoint_on_term),
        time_limit=rec.time_limit or 0.0,
    )
    return SimJob(
        spec=spec,
        duration=rec.duration,
        legacy_priority=(
            rec.legacy_priority if rec.legacy_priority is not None
            else legacy_from_priority(priority)
        ),
        legacy_preemptible=True if rec.preemptible is None else rec.preemptible,
        squat=bool(rec.squat),
        patience=rec.patience,
    )
