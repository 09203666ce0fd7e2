"""Importer for Slurm accounting: ``sacct --parsable2`` output (``|``-separated, header first).

Example export::

    sacct --allusers --parsable2 --starttime 2024-01-01 --endtime now \\
      --format JobID,User,Account,Submit,Start,End,Elapsed,AllocTRES,ReqTRES,NodeList,State

With a ``NodeList`` column (add ``NodeList`` to ``--format``) the trace also says which hosts
it ran on: :func:`hosts_of` derives the cluster from it (see docs/traces.md).

Rules: job steps (``123.batch``, ``123.0``, ``123.extern``) are not jobs; jobs that never
started (PENDING, or cancelled before a start time) and jobs without GPUs are skipped and
counted; the components of a heterogeneous job (``9+0``, ``9+1``) are one gang; a RUNNING
job counts with the time elapsed so far; a repeated JobID
(``sacct --duplicates`` lists a requeued job's runs oldest first) keeps its last run, submitted
when its first run was.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import closing
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import hostlist

from apportion.core import CoreError, Host

from ._errors import Bad, Notes, TraceError
from ._parse import clean_name, parse_duration, parse_int, parse_time
from ._read import check_header, find_column, not_utf8, open_text
from ._record import Record

_NOT_STARTED = {"", "unknown", "none"}


def parse_tres(value: str) -> int:
    """GPUs in a TRES string such as ``billing=8,cpu=8,gres/gpu=2,mem=64G,node=1``.

    Uses ``gres/gpu=N``; when only typed counts are present (``gres/gpu:a100=2``), their sum.
    No GPU entry means 0."""
    generic: int | None = None
    typed = 0
    for item in value.split(","):
        key, _, count = item.strip().partition("=")
        key = key.strip().lower()
        if key == "gres/gpu" or key.startswith("gres/gpu:"):
            try:
                n = parse_int(count)
            except Bad:
                raise Bad(f"{key}: not a whole number: {count!r}") from None
            if n < 0:
                raise Bad(f"{key}: must be >= 0, got {n}")
            if key == "gres/gpu":
                generic = n
            else:
                typed += n
    return typed if generic is None else generic


def tres_kinds(value: str) -> tuple[str, ...]:
    """The GPU kinds a TRES string names with typed counts (``gres/gpu:h100=8`` -> ``H100``),
    upper-cased, in order, without repeats (none for an untyped ``gres/gpu=8``)."""
    kinds: list[str] = []
    for item in value.split(","):
        key, _, count = item.strip().partition("=")
        key = key.strip().lower()
        if key.startswith("gres/gpu:") and count.strip() not in ("", "0"):
            kind = key.removeprefix("gres/gpu:").upper()
            if kind and kind not in kinds:
                kinds.append(kind)
    return tuple(kinds)


def read_sacct(path: Path, extras: Iterable[str], notes: Notes) -> list[Record]:
    """The jobs of a sacct dump, read line by line; ``extras``: the columns kept in
    ``Record.keys``; skipped and adjusted rows are counted in ``notes``."""
    with closing(_lines(path)) as lines:
        return _records(path, lines, extras, notes)


def _lines(path: Path) -> Generator[str, None, None]:
    """The lines of a sacct dump (or its .gz), one at a time, without their line ends: a
    dump of a year of a large cluster is millions of lines, and only its jobs are kept.

    Lines end at \\n (or \\r\\n) only: a form feed, NEL or U+2028 that a user typed in a
    JobName is part of its cell (str.splitlines would break the row there)."""
    with open_text(path, newline="\n") as f:
        try:
            for raw in f:
                yield raw.removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError as e:
            raise not_utf8(path, e, header=True) from None


def _records(
    path: Path, lines: Iterator[str], extras: Iterable[str], notes: Notes
) -> list[Record]:
    """The records of a dump's lines, the header first (line 1)."""
    first = next(lines, None)
    if first is None:
        raise TraceError(f"{path}: header: the file is empty")
    header = [h.strip() for h in first.split("|")]
    trailing = header[-1] == ""  # plain --parsable ends every line with '|'
    if trailing:
        header.pop()
    check_header(f"{path}:1", header)

    def col(name: str, required: bool = False) -> int | None:
        found = find_column(header, name)
        if found is None:
            if required:
                raise TraceError(
                    f"{path}: {name}: required column missing (columns: {', '.join(header)})"
                )
            return None
        return header.index(found)

    i_id = col("JobID", True)
    i_submit = col("Submit", True)
    i_state = col("State", True)
    i_alloc, i_req = col("AllocTRES"), col("ReqTRES")
    if i_alloc is None and i_req is None:
        raise TraceError(
            f"{path}: AllocTRES: required column missing, and no ReqTRES either "
            f"(columns: {', '.join(header)})"
        )
    i_elapsed, i_start, i_end = col("Elapsed"), col("Start"), col("End")
    if i_elapsed is None and (i_start is None or i_end is None):
        raise TraceError(
            f"{path}: Elapsed: required column missing, and no Start and End either "
            f"(columns: {', '.join(header)})"
        )
    i_user, i_account = col("User"), col("Account")
    i_nodes = col("NodeList")
    i_partition = col("Partition")
    keep: dict[str, int] = {}
    for name in extras:
        idx = col(name)
        if idx is None:
            raise TraceError(f"{path}: {name}: column not found (columns: {', '.join(header)})")
        keep[name] = idx
    assert i_id is not None and i_submit is not None and i_state is not None

    out: list[Record] = []
    seen: dict[str, int] = {}  # JobID -> its record's index in out
    width = len(header) + (1 if trailing else 0)
    for line, raw in enumerate(lines, start=2):
        if not raw.strip():
            continue
        cells = raw.split("|")
        if len(cells) != width:
            raise TraceError(f"{path}:{line}: row: expected {width} fields, got {len(cells)}")
        job = cells[i_id].strip()
        if "." in job:
            notes.skip("job step", line, quiet=True)
            continue
        name = header[i_submit]
        try:
            submit = _iso(cells[i_submit], name)
            name = header[i_state]
            state = cells[i_state].strip().split(" ")[0].upper()  # "CANCELLED by 1000"
            if not state:
                raise Bad("missing value")
            started = i_start is None or cells[i_start].strip().lower() not in _NOT_STARTED
            gpus = 0
            kinds: tuple[str, ...] = ()
            for idx in (i_alloc, i_req):  # AllocTRES is empty until a job starts
                if idx is not None and cells[idx].strip():
                    name = header[idx]
                    gpus = parse_tres(cells[idx])
                    kinds = tres_kinds(cells[idx])
                    break
            duration = _duration(cells, header, i_elapsed, i_start, i_end)
            if (duration and i_start is not None and i_end is not None
                    and (i_elapsed is None or not cells[i_elapsed].strip())
                    and _across_dst(cells[i_start], cells[i_end])):
                notes.adjust(ACROSS_DST, line)
            nodes: tuple[str, ...] = ()
            if i_nodes is not None and started:
                name = header[i_nodes]
                nodes = parse_nodes(cells[i_nodes])
            start = None
            if i_start is not None and started:
                start = _iso(cells[i_start], header[i_start])
        except Bad as e:
            raise TraceError(f"{path}:{line}: {e.field or name}: {e}") from None
        if state == "PENDING" or not started:
            notes.skip(f"never started ({state})", line)
            continue
        if gpus == 0:
            notes.skip("no GPUs", line)
            continue
        if duration is None:
            notes.skip("still running and no Elapsed to tell for how long", line)
            continue
        if duration == 0:
            notes.skip("duration is 0", line)
            continue
        earlier = out[seen[job]] if job in seen else None
        if earlier is not None:
            # the runs of a requeued job, oldest first: the earlier ones were cut short
            # (REQUEUED, NODE_FAIL, PREEMPTED), the last is what the job needed to finish
            notes.skip("earlier run of a requeued job (the job's last run is kept)",
                       earlier.line)
            submit = min(submit, earlier.submit)  # when its owner asked for it
        if state == "RUNNING":
            notes.adjust("still running: duration is the time elapsed so far", line)
        user = cells[i_user].strip() if i_user is not None else ""
        account = cells[i_account].strip() if i_account is not None else ""
        # an empty account is settled below, once the whole file is read
        budget = f"account/{clean_name(account)}" if account else None
        partition = cells[i_partition].strip() if i_partition is not None else ""
        rec = Record(line, submit, True, gpus, duration, id=job, budget=budget, user=user,
                     nodes=nodes, start=start, gpu_kinds=kinds,
                     cluster=partition.split(",")[0].strip())
        for key, idx in keep.items():
            rec.keys[key] = cells[idx].strip()
        if earlier is not None:
            out[seen[job]] = rec
        else:
            seen[job] = len(out)
            out.append(rec)
    _without_account(out)
    return _gangs(out, notes)


def _gangs(records: list[Record], notes: Notes) -> list[Record]:
    """The components of a heterogeneous job (``9+0``, ``9+1``), which Slurm starts and
    ends together, as one gang ``9``: its GPUs summed, its hosts and GPU kinds (any kind if
    a component takes any) joined, the earliest Submit and Start and the longest duration;
    the rest (budget, user, partition) is its first component's. Each component joined to
    an earlier one is counted as a skipped row."""
    out: list[Record] = []
    gangs: dict[str, Record] = {}
    for rec in records:
        base, plus, _ = (rec.id or "").partition("+")
        if not plus:
            out.append(rec)
            continue
        gang = gangs.get(base)
        if gang is None:
            gangs[base] = gang = dataclasses.replace(rec, id=base, keys=dict(rec.keys))
            out.append(gang)
            continue
        notes.skip("component of a heterogeneous job (joined to its first: one gang, GPUs "
                   "summed)", rec.line)
        gang.gpus += rec.gpus
        gang.duration = max(gang.duration, rec.duration)
        gang.submit = min(gang.submit, rec.submit)
        if rec.start is not None:
            gang.start = rec.start if gang.start is None else min(gang.start, rec.start)
        gang.nodes = tuple(dict.fromkeys(gang.nodes + rec.nodes))
        if gang.gpu_kinds and rec.gpu_kinds:
            gang.gpu_kinds = tuple(dict.fromkeys(gang.gpu_kinds + rec.gpu_kinds))
        else:
            gang.gpu_kinds = ()  # a component takes any kind
    return out


def _without_account(records: list[Record]) -> None:
    """The budget of jobs with an empty Account (users without an association, root). When
    other jobs name accounts: ``account/_none``, one budget beside the accounts, as
    ``budget_column="account"`` gives; a top-level ``user/<User>`` would make all such users
    together as large as all the accounts together. When no job names one: ``user/<User>``."""
    accounts = any(rec.budget is not None for rec in records)
    for rec in records:
        if rec.budget is None and (accounts or rec.user):
            rec.budget = "account/_none" if accounts else f"user/{clean_name(rec.user)}"


def parse_nodes(value: str) -> tuple[str, ...]:
    """Host names of a Slurm hostlist (``gpu[01-03],gpu07``); ``None assigned`` and empty
    give none."""
    text = value.strip()
    if not text or text.lower() in ("none assigned", "none", "(null)"):
        return ()
    try:
        return tuple(hostlist.expand_hostlist(text))
    except hostlist.BadHostlist as e:
        raise Bad(f"not a Slurm host list: {text!r} ({e})") from None


def hosts_of(records: Sequence[Record]) -> tuple[Host, ...]:
    """The cluster a sacct trace ran on, from its NodeList column: every host a GPU job ran
    on, with as many GPUs as the trace ever shows in use on it at once (a job's GPUs split
    evenly over its hosts). A lower bound: a GPU no job in the trace used is not seen. Empty
    when no record names its hosts."""
    events: dict[str, list[tuple[float, int]]] = {}
    for rec in records:
        if not rec.nodes:
            continue
        per_host = math.ceil(rec.gpus / len(rec.nodes))
        t0 = rec.start if rec.start is not None else rec.submit
        for node in rec.nodes:
            ev = events.setdefault(node, [])
            ev += [(t0, per_host), (t0 + rec.duration, -per_host)]
    hosts = []
    for node in hostlist.numerically_sorted(list(events)):
        in_use = peak = 0
        for _, delta in sorted(events[node]):  # at equal times an end (-) comes first
            in_use += delta
            peak = max(peak, in_use)
        try:
            hosts.append(Host(node, peak))
        except CoreError as e:  # cannot happen for GPU jobs; kept so nothing escapes unnamed
            raise TraceError(f"NodeList: host {node!r}: {e}") from None
    return tuple(hosts)


def _duration(
    cells: list[str],
    header: list[str],
    i_elapsed: int | None,
    i_start: int | None,
    i_end: int | None,
) -> float | None:
    """Seconds run: Elapsed when given, else End - Start; None while still running."""
    if i_elapsed is not None and cells[i_elapsed].strip():
        try:
            return parse_duration(cells[i_elapsed])
        except Bad as e:
            raise Bad(str(e), header[i_elapsed]) from None
    start = cells[i_start].strip() if i_start is not None else ""
    end = cells[i_end].strip() if i_end is not None else ""
    if start.lower() in _NOT_STARTED:
        return 0.0  # never started: the caller skips it
    if end.lower() in _NOT_STARTED:
        return None
    assert i_start is not None and i_end is not None
    t0 = _iso(start, header[i_start])
    t1 = _iso(end, header[i_end])
    if t1 < t0:
        zoneless = _naive(start) is not None and _naive(end) is not None
        raise Bad(f"before Start ({end} < {start})" + (ZONELESS if zoneless else ""),
                  header[i_end])
    return t1 - t0


ZONELESS = (": Start and End have no zone (sacct prints the cluster's local time), so End "
            "- Start is wrong across a daylight-saving change, and a job that ended in the "
            "hour a fall-back repeats reads as ending before it started; export Elapsed too "
            "(sacct --format ...,Elapsed), which gives exact durations")
ACROSS_DST = ("duration is End - Start of times without a zone, across a daylight-saving "
              "change (US, European or Australian dates): an hour off if the cluster's zone "
              "changed then; an Elapsed column gives exact durations")
# zones whose daylight-saving rules stand for most sites': the US, Europe, Australia
_DST_ZONES = tuple(ZoneInfo(z) for z in ("America/New_York", "Europe/Berlin",
                                          "Australia/Sydney"))


def _naive(value: str) -> datetime | None:
    """``value`` as a time without a zone; None when it has one, or is no ISO time."""
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return dt if dt.tzinfo is None else None


def _across_dst(start: str, end: str) -> bool:
    """Whether ``start`` to ``end``, both without a zone, spans a daylight-saving change of
    one of ``_DST_ZONES``: read as wall-clock times of that zone, their offsets differ."""
    t0, t1 = _naive(start), _naive(end)
    if t0 is None or t1 is None:
        return False
    return any(t0.replace(tzinfo=z).utcoffset() != t1.replace(tzinfo=z).utcoffset()
               for z in _DST_ZONES)


def _iso(value: str, column: str) -> float:
    try:
        t, absolute = parse_time(value)
    except Bad as e:
        raise Bad(str(e), column) from None
    if not absolute:
        raise Bad(f"not an ISO 8601 time: {value!r}", column)
    return t
