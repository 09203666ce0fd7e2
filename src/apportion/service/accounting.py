"""Usage accounts for any period, from the store: ``apportion report usage``.

For a period ``[start, end)`` (``end`` no later than now) and every budget node (the root,
the whole cluster, is named :data:`CLUSTER`, ``(all)``, in every rendering, the JSON
included), hour by hour on whole UTC hours:

* **charged** GPU-hours: GPUs held by its allocated attempts, for the time they ran in the
  period (allocated work is charged for its whole run, so this is also its **delivered**);
  **free** GPU-hours the same for unallocated attempts;
* **owed** in hour h: ``min(share x healthy GPU-seconds in h, GPU-seconds its allocated
  workloads asked for in h)``; asked for: a workload's requested GPUs from its submission
  until it ended (it is pending or running all that time, requeues included); held work
  (dependencies, an array throttle) from its release (``released_at``), never if it was
  never released;
* **attainment**: ``sum_h min(delivered_h, owed_h) / sum_h owed_h`` (None if owed nothing);
* **charged units**: charged GPU-hours times the billing weight of the GPU kind they ran on
  (``billing`` in the config: the unit the ledger charges budgets in; 1 per GPU-hour of a
  kind not listed), and per **pool** (cluster/kind) the healthy, charged and free GPU-hours,
  the units and the occupancy;
* **occupancy**: GPU-hours held on hosts while they were healthy / healthy GPU-hours (work
  still running on a draining host is in neither: at most 1, as ``/metrics`` has it).

The store keeps no per-second record of host health or of past budget weights, so:
healthy GPUs over time are rebuilt from the audit log (``host.add``, ``host.state`` and
``host.gpus`` entries, also those after the period: a host counts from its registration,
while healthy, with the GPUs it had then), and shares are those of the tree as it is now. A
workload cancelled while pending ends at its ``workload.cancel`` audit entry. These are the
report's approximations (also in docs/operations.md); everything else is as stored.
"""

from __future__ import annotations

import calendar
import csv
import io
import math
import time
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import numpy as np

from apportion.core import (
    FINAL,
    ROOT,
    BudgetTree,
    Status,
    ancestors,
    format_amount,
    parse_duration,
)
from apportion.core.fleet import pool_name
from apportion.core.units import format_figure
from apportion.times import format_time

from .config import PoolsConfig
from .store import AuditRow, Store, UsedWorkload

HOUR = 3600.0
DAY = 86400.0
MAX_PERIOD_S = 3660 * DAY  # ten years: a report is built hour by hour (87,840 hours)
BY = ("budget", "user", "month")
CLUSTER = "(all)"
"""The cluster's row's ``budget``: no budget path can be written so (security.md)."""
FORMATS = ("table", "csv", "json", "html")
APPROXIMATIONS = (
    "shares are those of the budget tree as it is now (past weight changes are not replayed)",
    "healthy GPUs over time come from the audit log's host entries (host.add, host.state, "
    "host.gpus)",
    "a workload asks for its GPUs from submission until it ends (pending or running); "
    "held work (dependencies, array throttle) from its release",
)


class ReportError(ValueError):
    """A report asked for with bad parameters; the message names the parameter."""


def parse_time(value: str, name: str, now: float) -> float:
    """A moment as a user writes it: seconds since the epoch, an ISO 8601 date or date and
    time (UTC unless it says otherwise: ``2026-11-01``, ``2026-11-01T08:00+01:00``), ``now``,
    or a duration meaning that long ago (``30d``, ``12h``). ``name`` is the parameter, for
    the error."""
    import datetime as dt

    text = value.strip()
    if text == "now":
        return now
    if not text.isascii():  # float() reads other scripts' digits: '٥' would be 5 s after 1970
        raise ReportError(f"{name}: must be written in ASCII digits, got {value!r}")
    if len(text) == 8 and text.isdigit():
        try:  # 20261206: meant as a date, never as seconds in April 1970
            day = dt.date(int(text[:4]), int(text[4:6]), int(text[6:]))
        except ValueError:
            pass
        else:
            raise ReportError(f"{name}: {value!r} reads as seconds since the epoch: write the "
                              f"date {day.isoformat()}")
    try:
        t = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(t):
            raise ReportError(f"{name}: must be a finite number of seconds, got {value!r}")
        return t
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        if ":" in text:  # 20:00 is no time of day here: as a duration it was 20 min ago
            raise ReportError(
                f"{name}: {value!r} reads as a clock time, which is not taken: write the date "
                "and time (2026-11-01T08:00) or a duration ago (30d, 12h, 1h30m)") from None
        try:
            return now - parse_duration(text)
        except ValueError:
            raise ReportError(
                f"{name}: must be a date (2026-11-01), a date and time (2026-11-01T08:00), "
                f"'now' or a duration ago (30d), got {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _when(t: float) -> str:
    """``t`` as a time in UTC (``2026-12-06 00:00:00+00:00``), or in seconds since the
    epoch where no calendar writes it (``1e+300 s since the epoch``)."""
    try:
        return format_time(t, UTC)
    except (OverflowError, OSError, ValueError):
        return f"{t:g} s since the epoch"


def _steps(changes: list[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """Integral over each bucket ``[edges[i], edges[i+1])`` of the step function that is 0
    before its first change and moves by ``delta`` at each ``(time, delta)``."""
    if not changes:
        return np.zeros(len(edges) - 1)
    changes.sort()
    t = np.array([c[0] for c in changes])
    level = np.cumsum([c[1] for c in changes])  # value from each change on
    cum = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])  # integral at t[i]
    i = np.searchsorted(t, edges, side="right") - 1
    j = np.maximum(i, 0)
    at = np.where(i >= 0, cum[j] + level[j] * (edges - t[j]), 0.0)
    return np.diff(at)


@dataclass
class _Series:
    """Per node: GPU-seconds per hour bucket of each quantity, as change lists first."""

    demand: list[tuple[float, float]] = field(default_factory=list)
    charged: list[tuple[float, float]] = field(default_factory=list)
    free: list[tuple[float, float]] = field(default_factory=list)
    units: list[tuple[float, float]] = field(default_factory=list)  # charged x billing


@dataclass(frozen=True)
class _Hourly:
    """A series' GPU-seconds in each bucket of the whole period, computed once: a month's
    figures are a slice of these (the buckets end at every month boundary), so a report by
    month costs what a report by budget does (it recomputed them per month and budget)."""

    demand: np.ndarray
    charged: np.ndarray
    free: np.ndarray
    units: np.ndarray

    @classmethod
    def of(cls, s: _Series, edges: np.ndarray) -> _Hourly:
        return cls(*(_steps(c, edges) for c in (s.demand, s.charged, s.free, s.units)))


def _add(changes: list[tuple[float, float]], a: float, b: float, gpus: float) -> None:
    if b > a:
        changes.append((a, gpus))
        changes.append((b, -gpus))


def _asks_from(w: UsedWorkload) -> float | None:
    """When it started asking for GPUs: held work (a dependency or an array throttle) when
    it joined the queue, None if it never did (held work asks for nothing); other work at
    its submission."""
    if w.held:
        return w.released_at
    return w.submit_time


def _workload_end(w: UsedWorkload, now: float) -> float:
    """When it stopped asking for GPUs: now if still active, else the end of its last
    attempt, or its cancellation if that came later (cancelled while pending)."""
    if w.status not in FINAL:
        return now
    end = max((now if a.ended_at is None else a.ended_at for a in w.attempts),
              default=w.submit_time)
    if w.status is Status.CANCELLED and w.cancelled_at is not None:
        end = max(end, w.cancelled_at)
    return end


def _healthy_spans(audit: list[AuditRow], hosts_now: dict[str, tuple[int, str]],
                   end: float) -> list[tuple[str, float, float, int]]:
    """The spans ``(host, from, to, gpus)`` each host was healthy with ``gpus`` GPUs up to
    ``end``, from all the audit log's host entries (oldest first, also those after ``end``):
    a host exists from its ``host.add`` on, in the state and of the size its last entry
    before each moment left (a ``host.gpus`` entry ends a span and starts the next). Before
    its first entry, a host registered before hosts were audited is in the state and of
    the size its first ``host.state`` and ``host.gpus`` entries changed from (``old``);
    only a host with no such entry is as it is now throughout."""
    added = {a.target for a in audit if a.action == "host.add"}
    gpus = {n: g for n, (g, _) in hosts_now.items()}
    healthy = {n: s == "healthy" for n, (_, s) in hosts_now.items()}
    for a in reversed(audit):  # walked back from now: each host before its first entry
        old = a.old or {}
        if a.action == "host.state" and a.target in healthy:
            healthy[a.target] = old.get("state") == "healthy"
        elif a.action == "host.gpus" and a.target in gpus:
            gpus[a.target] = int(old.get("gpus", gpus[a.target]))
    # host -> (healthy?, since); a host registered in the log exists only from then
    state = {n: (h, float("-inf")) for n, h in healthy.items() if n not in added}
    spans: list[tuple[str, float, float, int]] = []
    for a in audit:
        name, new = a.target, a.new or {}
        if a.action == "host.add":
            gpus[name] = int(new.get("gpus", gpus.get(name, 0)))
            state[name] = (new.get("state", "healthy") == "healthy", a.at)
        elif a.action in ("host.state", "host.gpus") and name in state:
            was, since = state[name]
            if was:
                spans.append((name, since, a.at, gpus[name]))
            if a.action == "host.state":
                state[name] = (new.get("state") == "healthy", a.at)
            else:
                state[name] = (was, a.at)
                gpus[name] = int(new.get("gpus", gpus[name]))
    spans += [(name, since, end, gpus[name]) for name, (was, since) in state.items() if was]
    return spans


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _month(t: float) -> str:
    return time.strftime("%Y-%m", time.gmtime(t))


def _month_edges(start: float, end: float) -> list[float]:
    """``start``, the UTC month boundaries inside the period, ``end``."""
    out = [start]
    y, m = time.gmtime(start)[:2]
    while True:
        m += 1
        if m == 13:
            y, m = y + 1, 1
        t = float(calendar.timegm((y, m, 1, 0, 0, 0)))
        if t >= end:
            break
        out.append(t)
    return [*out, end]


def usage_report(store: Store, start: float, end: float, by: str, now: float,
                 pools: PoolsConfig | None = None) -> dict[str, Any]:
    """The report as plain JSON (see the module docstring); ``rows`` per budget node, per
    user, or per month and budget node; ``daily`` owed and delivered per top-level budget;
    ``pools`` per pool of ``pools`` (default: one pool, billed 1)."""
    pools = pools or PoolsConfig()
    billing = pools.fleet()
    if by not in BY:
        raise ReportError(f"by: must be one of {', '.join(BY)}, got {by!r}")
    if not end > start:
        raise ReportError(f"from: must be before to ({_when(start)} is not before "
                          f"{_when(end)})")
    notes = []
    if end > now:  # no usage after now: cut, and said so, not silently
        notes.append(f"the period asked for ends after now ({_when(end)}): it ends now, at "
                     f"{_when(now)}; work still running counts its run up to then")
    end = min(end, now)
    if not end > start:
        raise ReportError(f"from: must be before now ({_when(start)} is not before the "
                          f"server's time, {_when(now)})")
    if end - start > MAX_PERIOD_S:
        # the report is built hour by hour: an unbounded period would hold the server's
        # memory hostage
        days = (end - start) / DAY  # past a billion, not written out: 1e300 s has 300 digits
        got = f"{days:,.0f}" if days < 1e9 else f"{days:.3g}"
        raise ReportError(f"from: the period may be at most {MAX_PERIOD_S // DAY:,.0f} days, "
                          f"got {got}")
    tree = store.load_tree() if store.budgets() else BudgetTree.build([])
    # only the work that can count in the period (and who submitted any before its end,
    # for the rows by user)
    workloads, submitters, audit = store.usage_history(
        start, end, ("host.add", "host.state", "host.gpus"))
    host_rows = store.hosts()
    hosts_now = {h.name: (h.gpus, h.state.value) for h in host_rows}
    pool_of = {h.name: pool_name(*pools.of(h.cluster, h.kind)) for h in host_rows}
    kind_of = {h.name: pools.of(h.cluster, h.kind)[1] for h in host_rows}
    by_pool: dict[str, _Series] = {p: _Series() for p in sorted(set(pool_of.values()))}
    spans = _healthy_spans(audit, hosts_now, end)
    healthy_spans: dict[str, list[tuple[float, float]]] = {}
    for name, t0, t1, _ in spans:
        healthy_spans.setdefault(name, []).append((t0, t1))
    # occupancy's numerator: GPU-seconds held on hosts while they counted as healthy (work
    # finishing on a draining host is not in the capacity, so not in the occupancy either)
    used_healthy: dict[str, float] = {}  # pool ("" for a host no longer known) -> seconds
    first = (start // HOUR) * HOUR  # the hour the period starts in
    edges = np.concatenate([[start], np.arange(first + HOUR, end, HOUR), [end]])
    nodes = [ROOT, *tree.nodes()]
    series = {n: _Series() for n in nodes}
    users = {u: _Series() for u in submitters}
    for w in workloads:
        chain = [n for n in ancestors(w.budget) if n in series]
        allocated = w.min_runtime > 0
        w_end = min(_workload_end(w, now), end)
        asks_from = _asks_from(w)
        user = users[w.user]
        for n in chain:
            if allocated and asks_from is not None:
                _add(series[n].demand, max(asks_from, start), w_end, w.gpus)
        for a in w.attempts:
            a_end = min(now if a.ended_at is None else a.ended_at, end)
            a_start = max(a.started_at, start)
            host = a.placement[0][0] if a.placement else ""
            pool = by_pool.get(pool_of.get(host, ""))
            for s in [*(series[n] for n in chain), user, *([pool] if pool else [])]:
                _add(s.charged if allocated else s.free, a_start, a_end, a.gpus_held)
                if allocated:
                    _add(s.units, a_start, a_end,
                         a.gpus_held * billing.weight(kind_of.get(host, pools.kind)))
            for on, g, _ in a.placement:
                p = pool_of.get(on, "")
                used_healthy[p] = used_healthy.get(p, 0.0) + g * sum(
                    _overlap(a_start, a_end, t0, t1) for t0, t1 in healthy_spans.get(on, ()))
    changes: list[tuple[float, float]] = []
    for _, t0, t1, gpus in spans:
        changes += [(min(max(t0, start), end), gpus), (min(max(t1, start), end), -gpus)]
    healthy = _steps(changes, edges)
    hourly = {n: _Hourly.of(series[n], edges) for n in nodes}

    def figures(h: _Hourly, share: float | None, lo: int = 0, hi: int | None = None
                ) -> dict[str, Any]:
        charged = h.charged[lo:hi]
        free = h.free[lo:hi]
        out: dict[str, Any] = {"charged_gpu_hours": float(charged.sum()) / HOUR,
                               "charged_units": float(h.units[lo:hi].sum()) / HOUR,
                               "free_gpu_hours": float(free.sum()) / HOUR}
        if share is None:
            return out
        owed = np.minimum(share * healthy[lo:hi], h.demand[lo:hi])
        got = float(np.minimum(charged, owed).sum())
        total = float(owed.sum())
        return {**out, "owed_gpu_hours": total / HOUR, "delivered_gpu_hours":
                float(charged.sum()) / HOUR, "attainment": got / total if total > 0 else None}

    def share(n: str) -> float:
        return 1.0 if n == ROOT else tree.share(n)

    def row_name(n: str) -> str:
        return CLUSTER if n == ROOT else n

    budget_rows = [{"budget": row_name(n), "share": share(n), **figures(hourly[n], share(n))}
                   for n in nodes]
    rows: list[dict[str, Any]] = []
    if by == "budget":
        rows = budget_rows
    elif by == "user":
        rows = [{"user": u, **figures(_Hourly.of(users[u], edges), None)}
                for u in sorted(users)]
    else:
        bounds = _month_edges(start, end)
        for m_start, m_end in zip(bounds, bounds[1:], strict=False):
            lo, hi = int(np.searchsorted(edges, m_start)), int(np.searchsorted(edges, m_end))
            rows += [{"month": _month(m_start), "budget": row_name(n), "share": share(n),
                      **figures(hourly[n], share(n), lo, hi)} for n in nodes]
    # per top-level budget and UTC day: owed and delivered, for the plots
    day_edges = np.concatenate([[start], np.arange((start // 86400) * 86400 + 86400,
                                                   end, 86400), [end]])
    hour_day = np.searchsorted(day_edges, edges[:-1], side="right") - 1
    daily: dict[str, dict[str, list[float]]] = {}
    for n in tree.children(ROOT):
        owed = np.minimum(share(n) * healthy, hourly[n].demand)
        charged = hourly[n].charged
        daily[n] = {
            "owed": [float(x) / HOUR for x in np.bincount(hour_day, owed, len(day_edges) - 1)],
            "delivered": [float(x) / HOUR
                          for x in np.bincount(hour_day, charged, len(day_edges) - 1)],
        }
    total_healthy = float(healthy.sum()) / HOUR
    pool_rows = []
    for p, s in by_pool.items():
        mine = {n for n, q in pool_of.items() if q == p}
        h = sum(g * _overlap(start, end, t0, t1) for n, t0, t1, g in spans
                if n in mine) / HOUR
        f = figures(_Hourly.of(s, edges), None)
        cluster, kind = p.split("/", 1)
        pool_rows.append({
            "pool": p, "cluster": cluster, "kind": kind, "billing": billing.weight(kind),
            "gpus": sum(hosts_now[n][0] for n in mine), "healthy_gpu_hours": h, **f,
            "occupancy": used_healthy.get(p, 0.0) / HOUR / h if h > 0 else None,
        })
    root = figures(hourly[ROOT], 1.0)
    assigned = root["charged_gpu_hours"] + root["free_gpu_hours"]
    return {
        "from": start,
        "to": end,
        "by": by,
        "healthy_gpu_hours": total_healthy,
        "occupancy": (sum(used_healthy.values()) / HOUR / total_healthy
                      if total_healthy > 0 else None),
        "unallocated_fraction": root["free_gpu_hours"] / assigned if assigned > 0 else None,
        "rows": rows,
        "budgets": budget_rows,
        "pools": pool_rows,
        "days": [float(d) for d in day_edges[:-1]],
        "daily": daily,
        "approximations": [*notes, *APPROXIMATIONS],
    }


# ---- renderings --------------------------------------------------------------------------
COLUMNS = ("charged_gpu_hours", "charged_units", "free_gpu_hours", "owed_gpu_hours",
           "delivered_gpu_hours", "attainment")
POOL_COLUMNS = ("pool", "billing", "gpus", "healthy_gpu_hours", "charged_gpu_hours",
                "charged_units", "free_gpu_hours", "occupancy")


def _keys(report: dict[str, Any]) -> list[str]:
    return {"budget": ["budget", "share"], "user": ["user"],
            "month": ["month", "budget", "share"]}[report["by"]]


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in ("share", "attainment", "occupancy"):
        return f"{format_figure(100 * value)}%"
    if isinstance(value, float):
        return format_figure(value)
    return str(value)


def table_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and cells for people (GPU-hours to 0.1, shares and attainment in percent, to
    0.1 too unless that shows a figure that is not 0 as 0.0: ``core.units.format_figure``)."""
    keys = _keys(report)
    cols = [c for c in COLUMNS if any(c in r for r in report["rows"])]
    header = [k.upper() for k in keys] + [c.removesuffix("_gpu_hours").upper()
                                          .replace("_", " ") +
                                          (" GPU-H" if c.endswith("hours") else "")
                                          for c in cols]
    return header, [[_cell(k, r.get(k)) for k in [*keys, *cols]] for r in report["rows"]]


def pool_table_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the per-pool breakdown (empty with one pool or none)."""
    rows = report.get("pools") or []
    if len(rows) < 2:
        return [], []
    header = [c.removesuffix("_gpu_hours").upper().replace("_", " ") +
              (" GPU-H" if c.endswith("hours") else "") for c in POOL_COLUMNS]
    return header, [[_cell(c, r.get(c)) for c in POOL_COLUMNS] for r in rows]


def to_csv(report: dict[str, Any]) -> str:
    """One row per line, full precision, empty cells where a figure does not apply; the
    cluster's row is budget ``(all)``, as in the JSON and the table. The last two columns,
    ``period_from`` and ``period_to``, say in UTC (``2026-11-01 00:00:00+00:00``) what the
    row's figures cover, so that a file read elsewhere still tells: the report's period,
    and by month the UTC month's part of it (a month is a UTC month)."""
    keys = _keys(report)
    cols = [c for c in COLUMNS if any(c in r for r in report["rows"])]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*keys, *cols, "period_from", "period_to"])
    for r in report["rows"]:
        writer.writerow(["" if r.get(k) is None else r.get(k) for k in [*keys, *cols]]
                        + [format_time(t, UTC) for t in _covers(report, r.get("month"))])
    return buf.getvalue()


def _covers(report: dict[str, Any], month: str | None) -> tuple[float, float]:
    """The part of the report's period a row covers: all of it, or a UTC month's part."""
    start, end = float(report["from"]), float(report["to"])
    if month is None:
        return start, end
    y, m = (int(x) for x in month.split("-"))
    first = float(calendar.timegm((y, m, 1, 0, 0, 0)))
    after = float(calendar.timegm((y + m // 12, m % 12 + 1, 1, 0, 0, 0)))
    return max(start, first), min(end, after)


def headline(report: dict[str, Any]) -> str:
    """The period and the cluster's figures in one sentence; the period in UTC, the zone
    of the report's hours, days and months (apportion.times)."""
    occupancy, unalloc = report["occupancy"], report["unallocated_fraction"]
    start, end = (format_time(report[k], UTC) for k in ("from", "to"))
    return (f"{start} to {end}: "
            f"{format_amount(report['healthy_gpu_hours'])} healthy GPU-hours; occupancy "
            f"{'-' if occupancy is None else f'{100 * occupancy:.1f}%'}; unallocated "
            f"{'-' if unalloc is None else f'{100 * unalloc:.1f}%'} of the GPU-hours used.")


def daily_chart(report: dict[str, Any], colour: dict[str, Any]) -> Any:
    """The per-day chart of the top-level budgets (``report["daily"]``): delivered solid,
    owed dashed, over the UTC days the axis says they are. A line needs two days: over a
    month or less each day is a marker too, and a single day gets a two-day axis around it
    (matplotlib would span years around one date). Returns the matplotlib figure."""
    from matplotlib import pyplot as plt

    days = np.array(report["days"]) / 86400.0  # matplotlib's dates: days since 1970
    fig, ax = plt.subplots(figsize=(8, 3.5))
    marker = "o" if len(days) <= 31 else None
    for b in report["daily"]:
        ax.plot(days, report["daily"][b]["delivered"], color=colour[b], label=b,
                marker=marker, ms=4)
        ax.plot(days, report["daily"][b]["owed"], color=colour[b], ls="--", lw=0.9,
                marker=marker, ms=3, mfc="none")
    if len(days) == 1:
        ax.set_xlim(days[0] - 1.0, days[0] + 1.0)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("GPU-hours per day")
    # the days are UTC days, as the headline's period is: said on the plot itself, since a
    # reader in another zone would take them for their own
    ax.set_xlabel("day (UTC)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.xaxis_date(tz=UTC)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def _wrapped_path(path: str, width: int = 30) -> str:
    """A budget path as a plot's label: on lines of at most ``width`` characters, broken
    after a slash (a longer name keeps a line of its own, whole)."""
    lines: list[str] = []
    for part in path.split("/"):
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += "/" + part
        elif lines:
            lines[-1] += "/"
            lines.append(part)
        else:
            lines.append(part)
    return "\n".join(lines)


def _figure_png(fig: Any) -> str:
    import base64

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def to_html(report: dict[str, Any]) -> str:
    """A page a manager can forward: headline figures, three plots (embedded PNG) and the
    table. Plots are per budget (whatever ``by``): attainment, charged and free GPU-hours,
    and owed against delivered per day for the top-level budgets."""
    import html

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import PercentFormatter

    budgets = [r for r in report["budgets"] if r["budget"] != CLUSTER]
    colours = plt.get_cmap("tab10")
    tops = list(report["daily"])
    colour = {b: colours(i % 10) for i, b in enumerate(tops)}

    def top_of(path: str) -> str:
        return path.split("/")[0]

    images: list[tuple[str, str]] = []
    if budgets:
        labels = [_wrapped_path(r["budget"]) for r in budgets]
        lines = max(label.count("\n") + 1 for label in labels)
        chars = max(len(line) for label in labels for line in label.split("\n"))
        # a long path's label would squeeze the bars to a sliver: wrapped at its slashes,
        # with the figure widened for what is left, the bars keep most of the width
        width = max(7.0, 4.5 + 0.085 * chars)
        height = (0.35 if lines == 1 else 0.2 + 0.18 * lines) * len(budgets) + 1.2
        fig, ax = plt.subplots(figsize=(width, height))
        att = [100 * (r["attainment"] if r["attainment"] is not None else 0) for r in budgets]
        ax.barh(range(len(budgets)), att, color=[colour.get(top_of(r["budget"]), "grey")
                                                 for r in budgets])
        ax.set_yticks(range(len(budgets)), labels)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.xaxis.set_major_formatter(PercentFormatter())
        ax.set_xlabel("attainment: share of owed GPU-hours delivered, hour by hour")
        ax.axvline(95, color="black", lw=0.8, ls=":")
        for i, r in enumerate(budgets):  # the figure itself, or why there is none
            text = "nothing owed" if r["attainment"] is None else f"{att[i]:.1f}%"
            inside = att[i] > 80
            ax.text(att[i] - 1 if inside else att[i] + 1, i, text, va="center",
                    ha="right" if inside else "left", color="white" if inside else "black",
                    fontsize=9)
        fig.tight_layout()
        images.append(("Attainment per budget (dotted: 95%)", _figure_png(fig)))
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(width, height))
        charged = [r["charged_gpu_hours"] for r in budgets]
        free = [r["free_gpu_hours"] for r in budgets]
        ax.barh(range(len(budgets)), charged, label="charged (allocated)", color="#1f77b4")
        ax.barh(range(len(budgets)), free, left=charged, label="free (unallocated)",
                color="#aec7e8")
        ax.set_yticks(range(len(budgets)), labels)
        ax.invert_yaxis()
        ax.set_xlabel("GPU-hours")
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, frameon=False)
        fig.tight_layout()
        images.append(("GPU-hours used per budget", _figure_png(fig)))
        plt.close(fig)

    if tops and len(report["days"]) > 0:
        fig = daily_chart(report, colour)
        images.append(("Delivered (solid) and owed (dashed) per UTC day, top-level budgets",
                       _figure_png(fig)))
        plt.close(fig)

    header, cells = table_rows(report)
    head = f"<p>{html.escape(headline(report))}</p>"
    figs = "".join(f"<figure><img alt='{html.escape(c)}' src='data:image/png;base64,{png}'>"
                   f"<figcaption>{html.escape(c)}</figcaption></figure>" for c, png in images)
    table = ("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
             + "</tr></thead><tbody>"
             + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                       for row in cells) + "</tbody></table>")
    notes = "".join(f"<li>{html.escape(a)}</li>" for a in report["approximations"])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>apportion usage report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 60em; }}
table {{ border-collapse: collapse; font-variant-numeric: tabular-nums; }}
th, td {{ padding: 0.2em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }}
th {{ white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; }}
figure {{ margin: 1.5em 0; }} figcaption {{ color: #555; font-size: 0.9em; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>GPU usage by {html.escape(report['by'])}</h1>
{head}
<p>Owed: each hour, the lesser of the budget's share of the healthy GPUs and the GPUs its
allocated work asked for. Attainment: the part of that it received, hour by hour.</p>
{figs}
{table}
<h2>How the figures are made</h2><ul>{notes}</ul>
</body></html>
"""


__all__ = ["BY", "FORMATS", "ReportError", "headline", "parse_time", "table_rows", "to_csv",
           "to_html", "usage_report"]
