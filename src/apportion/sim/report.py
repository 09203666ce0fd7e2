"""The self-contained HTML report of a simulation run: one file, policies side by side.

``write_report`` reads what ``run.py`` wrote into the output directory (``summary.json`` is
passed in; ``workloads-P.csv``, ``budget_hours-P.csv`` and ``cluster_hours-P.csv`` are read
per policy ``P``, see docs/simulator.md) and writes ``report.html``. Plots are matplotlib
figures rendered as inline SVG with the Agg backend; CSS is inline; there is no script and no
reference to anything outside the file, so the report opens offline and can be mailed.
A missing table only drops the plots that need it.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
# fixed ids and no timestamp: the same run gives the same file
matplotlib.rcParams["svg.hashsalt"] = "apportion"
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

REASONS = ("unallocated", "rebalance", "drain", "host_failure")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")
MAX_POINTS = 1500  # per time series; longer runs are averaged into wider bins
CDF_POINTS = 400

# Ai2's published rollout figures (30 days, one cluster), shown next to the results as the
# reference the brief asks to beat.
REFERENCE: dict[str, str] = {
    "attainment_overall": "98%",
    "attainment_min": "90%",
    "teams_ge_95": "13 of 15",
    "occupancy": "98%",
    "unallocated_fraction": "18%",
    "wait_all_p50": "24 s",
    "wait_all_p90": "1.8 h",
    "wait_debug_p90": "30 s",
    "drains_automated": "-74% repairs needing a human",
}
# not a rollout figure: the situation the brief describes, shown next to the measured one
DEMAND_REFERENCE = "2-3x at every moment (the brief's premise)"


Json = Mapping[str, Any]
Columns = dict[str, np.ndarray]


@dataclass(slots=True)
class RunTables:
    """The tables of one policy's run, as numpy columns; ``None`` where the file is missing."""

    policy: str
    workloads: Columns | None = None
    budget_hours: Columns | None = None
    cluster_hours: Columns | None = None
    missing: list[str] = field(default_factory=list)


def read_table(path: Path) -> Columns:
    """A CSV as numpy columns (numbers as float with NaN for empty cells, text as str)."""
    table = pacsv.read_csv(path)
    out: Columns = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        arr = col.to_numpy(zero_copy_only=False)
        if arr.dtype == object:
            out[name] = np.array(["" if v is None else str(v) for v in arr], dtype=str)
        elif arr.dtype == bool:
            out[name] = arr.astype(float)
        else:
            out[name] = arr.astype(float)
    return out


def load_tables(out_dir: Path, policy: str) -> RunTables:
    tables = RunTables(policy)
    for attr, stem in (("workloads", "workloads"), ("budget_hours", "budget_hours"),
                       ("cluster_hours", "cluster_hours")):
        path = out_dir / f"{stem}-{policy}.csv"
        if path.exists():
            setattr(tables, attr, read_table(path))
        else:
            tables.missing.append(path.name)
    return tables


# ---- formatting ---------------------------------------------------------------------------
def fmt_pct(x: object, digits: int = 1) -> str:
    return "–" if not _num(x) else f"{100 * float(x):.{digits}f}%"  # type: ignore[arg-type]


def fmt_num(x: object, digits: int = 0) -> str:
    if not _num(x):
        return "–"
    return f"{float(x):,.{digits}f}"  # type: ignore[arg-type]


def fmt_ratio(x: object) -> str:
    """A multiple of something, 2.41x."""
    return "–" if not _num(x) else f"{float(x):.2f}x"  # type: ignore[arg-type]


def fmt_dur(seconds: object) -> str:
    """A duration in the unit a person would use: 24 s, 5.0 min, 1.8 h, 2.1 d."""
    if not _num(seconds):
        return "–"
    s = float(seconds)  # type: ignore[arg-type]
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _get(d: Json, *keys: str) -> Any:
    cur: Any = d
    for k in keys:
        if not isinstance(cur, Mapping) or k not in cur:
            return None
        cur = cur[k]
    return cur


def _esc(x: object) -> str:
    return html.escape(str(x))


# ---- SVG ------------------------------------------------------------------------------------
_SVG_START = re.compile(r"^.*?(?=<svg)", re.S)


def svg_of(fig: Figure, key: str) -> str:
    """The figure as an inline ``<svg>`` element. Ids are prefixed with ``key`` so several
    figures can live in one HTML document; metadata and namespace URLs are dropped (inline SVG
    in HTML needs neither), so the file holds no URL at all."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = _SVG_START.sub("", buf.getvalue(), count=1)
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{key}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{key}-\1)", svg)
    svg = re.sub(r'href="#([^"]+)"', rf'href="#{key}-\1"', svg)
    return svg


def _figure(width: float = 9.0, height: float = 3.6, ncols: int = 1) -> tuple[Figure, Any]:
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False,
                             layout="constrained")
    return fig, axes[0]


def _downsample(x: np.ndarray, ys: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Average consecutive points so a series has at most ``MAX_POINTS`` points."""
    n = len(x)
    if n <= MAX_POINTS:
        return x, list(ys)
    k = math.ceil(n / MAX_POINTS)
    m = n // k * k

    def avg(a: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.asarray(a[:m], dtype=float).reshape(-1, k).mean(axis=1)
        return out

    return avg(x), [avg(y) for y in ys]


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


# ---- plots ----------------------------------------------------------------------------------
def plot_waits(runs: Sequence[RunTables], key: str) -> str | None:
    """CDF of the first wait (submission to first start) per policy, all and debug, log x.

    Waits under one second are drawn at one second (log axis)."""
    fig, (ax_all, ax_dbg) = _figure(10, 3.8, ncols=2)
    drawn = False
    for i, run in enumerate(runs):
        w = run.workloads
        if w is None or "first_wait_s" not in w:
            continue
        waits = w["first_wait_s"]
        started = np.isfinite(waits)
        debug = w["debug"] > 0 if "debug" in w else np.zeros(len(waits), dtype=bool)
        for ax, mask in ((ax_all, started), (ax_dbg, started & debug)):
            vals = np.sort(np.maximum(waits[mask], 1.0))
            if not len(vals):
                continue
            q = np.linspace(0, 1, CDF_POINTS)
            xs = np.quantile(vals, q)
            ax.step(xs, q, where="post", color=_color(i), label=run.policy)
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    for ax, title in ((ax_all, "all workloads"), (ax_dbg, "debug workloads")):
        ax.set_xscale("log")
        ax.set_xlim(left=1)
        ax.set_ylim(0, 1)
        ticks = [1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400]
        ax.set_xticks(ticks, ["1 s", "10 s", "1 min", "10 min", "1 h", "6 h", "1 d", "7 d"])
        ax.axhline(0.9, color="#999", lw=0.6, ls=":")
        ax.axhline(0.5, color="#999", lw=0.6, ls=":")
        ax.set_title(f"Wait to first start: {title}")
        ax.set_ylabel("fraction started within")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a run may have no debug work at all
            ax.legend(loc="lower right")
        else:
            ax.text(0.5, 0.5, "none", transform=ax.transAxes, ha="center", color="#999")
    return svg_of(fig, key)


def _team_attainment(summary: Json, tables: RunTables, depth: int) -> dict[str, float]:
    """Attainment per node at ``depth`` from the summary, or from the hourly table."""
    out: dict[str, float] = {}
    per = _get(summary, "attainment", "per_budget")
    if isinstance(per, Mapping):
        for path, v in per.items():
            if path.count("/") + 1 == depth and _num(v):
                out[path] = float(v)
        if out:
            return out
    bh = tables.budget_hours
    if bh is None:
        return out
    mask = bh["depth"] == depth
    for node in np.unique(bh["budget"][mask]):
        m = mask & (bh["budget"] == node)
        owed = float(np.nansum(bh["owed"][m]))
        if owed > 0:
            out[str(node)] = float(np.nansum(bh["attained"][m])) / owed
    return out


def plot_attainment(summaries: Sequence[Json], runs: Sequence[RunTables],
                    key: str) -> str | None:
    """Bars of attainment per team (and per program), one bar per policy."""
    per_policy = [
        (_team_attainment(s, r, 1), _team_attainment(s, r, 2))
        for s, r in zip(summaries, runs, strict=True)
    ]
    programs = sorted({p for prog, _ in per_policy for p in prog})
    teams = sorted({t for _, team in per_policy for t in team})
    if not programs and not teams:
        return None
    labels = programs + ([""] if programs and teams else []) + teams
    fig, (ax,) = _figure(max(8.0, 0.45 * len(labels) * max(1, len(runs)) ** 0.5 + 2), 4.2)
    n = len(per_policy)
    width = 0.8 / max(1, n)
    x = np.arange(len(labels))
    for i, (prog, team) in enumerate(per_policy):
        both = {**prog, **team}
        vals = np.array([both.get(lbl, np.nan) for lbl in labels])
        ax.bar(x - 0.4 + width * (i + 0.5), vals, width, color=_color(i),
               label=runs[i].policy)
    ax.axhline(1.0, color="#333", lw=0.6)
    ax.axhline(0.95, color="#999", lw=0.6, ls=":")
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("attainment")
    ax.set_title("Attainment per program (left) and team (right): GPU-hours received / owed")
    ax.legend(loc="lower left")
    ax.grid(axis="y", alpha=0.3)
    return svg_of(fig, key)


def _pivot(bh: Columns, depth: int, column: str) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(hours, node names, matrix [hour, node]) of one column for the nodes at ``depth``."""
    mask = bh["depth"] == depth
    hours = np.unique(bh["hour"][mask]).astype(int)
    names = bh["budget"][mask]
    share = dict(zip(names.tolist(), bh["share"][mask].tolist(), strict=True))
    nodes = sorted(share, key=lambda n: (-share[n], n))  # biggest budget at the bottom
    h_index = {h: i for i, h in enumerate(hours)}
    n_index = {n: i for i, n in enumerate(nodes)}
    mat = np.zeros((len(hours), len(nodes)))
    rows_h = np.array([h_index[int(h)] for h in bh["hour"][mask]])
    rows_n = np.array([n_index[str(n)] for n in bh["budget"][mask]])
    mat[rows_h, rows_n] = np.nan_to_num(bh[column][mask].astype(float))
    return hours, nodes, mat


def _span(bh: Columns, depth: int) -> np.ndarray:
    hours, _, span = _pivot(bh, depth, "span_h")
    out: np.ndarray = span.max(axis=1)
    out[out <= 0] = 1.0
    return out


def plot_budget_time(runs: Sequence[RunTables], key: str, depth: int = 1) -> str | None:
    """Per policy: GPUs delivered to each top-level budget over time (stacked), unallocated
    GPUs on top, and dashed lines where each band would end if every budget got exactly its
    share of the healthy GPUs."""
    usable = [r for r in runs if r.budget_hours is not None and len(r.budget_hours["hour"])]
    if not usable:
        return None
    fig, grid = plt.subplots(len(usable), 1, figsize=(10, 3.4 * len(usable)), squeeze=False,
                             sharex=True, layout="constrained")
    axes = grid[:, 0]
    for ax, run in zip(axes, usable, strict=True):
        bh = run.budget_hours
        assert bh is not None
        hours, nodes, delivered = _pivot(bh, depth, "delivered")
        _, _, free = _pivot(bh, depth, "free")
        _, _, share = _pivot(bh, depth, "share")
        _, _, healthy = _pivot(bh, depth, "healthy_gpus")
        span = _span(bh, depth)
        gpus = delivered / span[:, None]  # GPU-hours in the bin -> GPUs on average
        unalloc = free.sum(axis=1) / span
        days = (hours + span / 2) / 24
        fair = np.cumsum(share * healthy, axis=1)
        days_d, series = _downsample(days, [*gpus.T, unalloc, *fair.T])
        k = len(nodes)
        layers = series[:k] + [series[k]]
        ax.stackplot(days_d, layers, colors=[_color(i) for i in range(k)] + ["#cccccc"],
                     labels=[*nodes, "unallocated"], alpha=0.85, lw=0)
        # the last cumulative line is all the healthy GPUs: drawn solid, once
        for i, line in enumerate(series[k + 1:-1]):
            ax.plot(days_d, line, color=_color(i), lw=1.0, ls="--")
        ax.plot(days_d, series[-1], color="#333", lw=0.8, label="healthy GPUs")
        ax.set_ylabel("GPUs")
        ax.set_title(f"{run.policy}: GPUs per {'program' if depth == 1 else 'budget'} "
                     "(bands) against share x healthy GPUs (dashed, cumulative)")
        ax.margins(x=0)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("day")
    return svg_of(fig, key)


def plot_usage_ratio(runs: Sequence[RunTables], key: str, depth: int = 1) -> str | None:
    """The policy's sort metric per top-level budget over time (1 = exactly its share)."""
    usable = [r for r in runs if r.budget_hours is not None
              and "usage_ratio" in r.budget_hours and len(r.budget_hours["hour"])]
    if not usable:
        return None
    fig, axes = _figure(10, 3.4, ncols=len(usable))
    for ax, run in zip(axes, usable, strict=True):
        bh = run.budget_hours
        assert bh is not None
        hours, nodes, ratio = _pivot(bh, depth, "usage_ratio")
        days_d, series = _downsample((hours + 0.5) / 24, list(ratio.T))
        for i, (node, ys) in enumerate(zip(nodes, series, strict=True)):
            ax.plot(days_d, ys, color=_color(i), lw=1.0, label=node)
        ax.axhline(1.0, color="#333", lw=0.6)
        ax.set_title(f"{run.policy}: usage ratio over the lookback window")
        ax.set_xlabel("day")
        ax.margins(x=0)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return svg_of(fig, key)


def plot_occupancy(runs: Sequence[RunTables], key: str) -> str | None:
    """Hourly occupancy (assigned / healthy GPUs) and its unallocated part, per policy."""
    usable = [r for r in runs if r.cluster_hours is not None and len(r.cluster_hours["hour"])]
    if not usable:
        return None
    fig, (ax, ax_pending) = _figure(10, 3.6, ncols=2)
    for i, run in enumerate(usable):
        ch = run.cluster_hours
        assert ch is not None
        span = np.where(ch["span_h"] > 0, ch["span_h"], 1.0)
        days = (ch["hour"] + span / 2) / 24
        healthy = np.where(ch["healthy_gpus"] > 0, ch["healthy_gpus"], np.nan)
        occ = ch["assigned"] / healthy
        unalloc = ch["unallocated"] / healthy
        pending = ch["pending"] if "pending" in ch else np.zeros(len(days))
        d, (occ_d, un_d, pend_d) = _downsample(days, [occ, unalloc, pending])
        ax.plot(d, occ_d, color=_color(i), lw=1.0, label=f"{run.policy}: occupancy")
        ax.plot(d, un_d, color=_color(i), lw=0.8, ls="--", label=f"{run.policy}: unallocated")
        ax_pending.plot(d, pend_d, color=_color(i), lw=1.0, label=run.policy)
        if i == 0:
            avail = ch["healthy_gpus"] / np.where(ch["total_gpus"] > 0, ch["total_gpus"], 1)
            _, (av_d,) = _downsample(days, [avail])
            ax.plot(d, av_d, color="#777", lw=0.8, ls=":", label="availability")
    ax.set_ylim(0, 1.05)
    ax.set_title("Occupancy per hour (assigned / healthy GPUs)")
    ax.set_xlabel("day")
    ax.margins(x=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax_pending.set_title("Pending workloads (end of each hour)")
    ax_pending.set_xlabel("day")
    ax_pending.margins(x=0)
    ax_pending.set_ylim(bottom=0)
    ax_pending.grid(alpha=0.3)
    ax_pending.legend(fontsize=8)
    return svg_of(fig, key)


def _reason_columns(ch: Columns) -> dict[str, np.ndarray]:
    """Per-reason hourly preemption counts, when the table has them (``preemptions_<reason>``
    or ``preempt_<reason>``)."""
    out = {}
    for reason in REASONS:
        for name in (f"preemptions_{reason}", f"preempt_{reason}"):
            if name in ch:
                out[reason] = np.nan_to_num(ch[name])
                break
    return out


def plot_preemptions(summaries: Sequence[Json], runs: Sequence[RunTables],
                     key: str) -> str | None:
    """Preemptions per day by reason, one panel per policy. When the hourly table has no
    per-reason columns, the daily totals are drawn and split by the run's overall mix."""
    usable = [(s, r) for s, r in zip(summaries, runs, strict=True)
              if r.cluster_hours is not None and len(r.cluster_hours["hour"])]
    if not usable:
        return None
    fig, axes = _figure(10, 3.2, ncols=len(usable))
    colors = {"unallocated": "#bbbbbb", "rebalance": "#1f77b4", "drain": "#ff7f0e",
              "host_failure": "#d62728"}
    for ax, (summary, run) in zip(axes, usable, strict=True):
        ch = run.cluster_hours
        assert ch is not None
        day = (ch["hour"] // 24).astype(int)
        n_days = int(day.max()) + 1
        by_reason = _reason_columns(ch)
        split = not by_reason
        daily: dict[str, np.ndarray]
        if split:
            total = np.bincount(day, weights=np.nan_to_num(ch["preemptions"]),
                                minlength=n_days).astype(float)
            counts = {r: _get(summary, "preemptions", r) for r in REASONS}
            whole = sum(float(v) for v in counts.values() if _num(v))
            if whole > 0:
                daily = {r: total * float(v) / whole for r, v in counts.items() if _num(v)}
            else:
                daily = {"total": total}
        else:
            daily = {r: np.bincount(day, weights=v, minlength=n_days).astype(float)
                     for r, v in by_reason.items()}
        bottom = np.zeros(n_days)
        for reason, vals in daily.items():
            ax.bar(np.arange(n_days), vals, bottom=bottom, color=colors.get(reason, "#555"),
                   label=reason.replace("_", " "), width=0.9)
            bottom += vals
        note = " (split by the run's overall mix)" if split and len(daily) > 1 else ""
        ax.set_title(f"{run.policy}: preemptions per day{note}", fontsize=9)
        ax.set_xlabel("day")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    return svg_of(fig, key)


# ---- tables ---------------------------------------------------------------------------------
def _headline_rows(s: Json) -> list[tuple[str, str, str]]:
    """(metric, value, key into REFERENCE) rows of one policy's summary."""
    att = _get(s, "attainment") or {}
    teams = _get(att, "teams")
    ge95 = _get(att, "teams_ge_95")
    w_all = _get(s, "wait_s", "all") or {}
    w_dbg = _get(s, "wait_s", "debug") or {}
    pre = _get(s, "preemptions") or {}
    drains = _get(s, "drains") or {}
    unfinished = _get(s, "unfinished") or {}
    infl = _get(s, "priority_inflation") or {}
    min_name = _get(att, "min_budget")
    out = _get(s, "outstanding_ratio") or {}
    abandoned = _get(s, "abandoned") or {}
    rows = [
        ("outstanding / healthy GPUs, mean (p10 / p90)",
         f"{fmt_ratio(out.get('mean'))} ({fmt_ratio(out.get('p10'))} / "
         f"{fmt_ratio(out.get('p90'))})", "outstanding"),
        ("abandoned (never started): all / debug",
         f"{fmt_num(abandoned.get('count'))} / {fmt_num(abandoned.get('debug'))}", ""),
        ("abandoned GPU-hours asked", fmt_num(abandoned.get("gpu_hours_requested"), 0), ""),
        ("attainment, overall per team", fmt_pct(_get(att, "overall_teams")),
         "attainment_overall"),
        ("attainment, overall per researcher", fmt_pct(_get(att, "overall")), ""),
        ("attainment, worst team", fmt_pct(_get(att, "min"))
         + (f" ({_esc(min_name)})" if min_name else ""), "attainment_min"),
        ("teams at >= 95%", f"{fmt_num(ge95)} of {fmt_num(teams)}" if _num(teams) else "–",
         "teams_ge_95"),
        ("attainment, worst researcher", fmt_pct(_get(att, "min_leaf")), ""),
        ("occupancy", fmt_pct(_get(s, "occupancy")), "occupancy"),
        ("unallocated fraction", fmt_pct(_get(s, "unallocated_fraction")),
         "unallocated_fraction"),
        ("availability", fmt_pct(_get(s, "availability")), ""),
        ("wait p50 / p90 / p99, all",
         " / ".join(fmt_dur(w_all.get(p)) for p in ("p50", "p90", "p99")), "wait_all"),
        ("wait p50 / p90 / p99, debug",
         " / ".join(fmt_dur(w_dbg.get(p)) for p in ("p50", "p90", "p99")), "wait_debug"),
        ("wait samples, all / debug", f"{fmt_num(w_all.get('n'))} / {fmt_num(w_dbg.get('n'))}",
         ""),
    ]
    by_size = _get(s, "wait_s", "by_size") or {}
    abandoned_size = abandoned.get("by_size") or {}
    for cls, w in by_size.items():
        gpus = "GPU" if cls == "1" else "GPUs"
        rows.append((
            f"wait p50 / p90, {cls} {gpus} (abandoned)",
            " / ".join(fmt_dur(w.get(p)) for p in ("p50", "p90"))
            + f" ({fmt_num(abandoned_size.get(cls))})",
            "",
        ))
    for r in REASONS:
        rows.append((f"preemptions: {r.replace('_', ' ')}", fmt_num(pre.get(r)), ""))
    rows += [
        ("preemptions: total", fmt_num(pre.get("total")), ""),
        ("protected preemptions", fmt_num(_get(s, "protected_preemptions")), ""),
        ("preemptions per 1,000 GPU-hours delivered",
         fmt_num(_get(s, "preemptions_per_1000_gpu_hours"), 1), ""),
        ("lost GPU-hours", fmt_num(_get(s, "lost_gpu_hours"), 1), ""),
        *(
            (f"lost GPU-hours: {r.replace('_', ' ')}",
             fmt_num(_get(s, "lost_gpu_hours_by_reason", r), 1), "")
            for r in REASONS
        ),
        ("restart overhead GPU-hours", fmt_num(_get(s, "restart_overhead_gpu_hours"), 1), ""),
        ("drains started / finished", f"{fmt_num(drains.get('count'))} / "
         f"{fmt_num(drains.get('finished'))}", ""),
        ("time to drain, p90", fmt_dur(drains.get("p90_time_to_drain_s")), ""),
        ("drains automated (no human kill)", fmt_pct(drains.get("automated_fraction")),
         "drains_automated"),
        ("human kills", fmt_num(drains.get("human_kills")), ""),
        ("host failures", fmt_num(_get(s, "host_failures")), ""),
        ("squat GPU-hours", fmt_num(_get(s, "squat_gpu_hours"), 0), ""),
        ("workloads / completed", f"{fmt_num(_get(s, 'workloads'))} / "
         f"{fmt_num(_get(s, 'completed'))}", ""),
        ("unfinished: pending / running", f"{fmt_num(unfinished.get('pending'))} / "
         f"{fmt_num(unfinished.get('running'))}", ""),
        ("workloads at HIGH or URGENT (legacy flag)", fmt_pct(infl.get("high_or_urgent_share")),
         ""),
        ("simulation wall time", fmt_dur(_get(s, "wall_s")), ""),
    ]
    return rows


def headline_table(summaries: Sequence[Json]) -> str:
    """Metric rows, one column per policy, plus the published reference figures."""
    per = [_headline_rows(s) for s in summaries]
    head = "".join(f"<th>{_esc(s.get('policy', f'run {i + 1}'))}</th>"
                   for i, s in enumerate(summaries))
    ref_of = {
        "wait_all": f"p50 {REFERENCE['wait_all_p50']}, p90 {REFERENCE['wait_all_p90']}",
        "wait_debug": f"p90 {REFERENCE['wait_debug_p90']}",
        "outstanding": DEMAND_REFERENCE,
        **REFERENCE,
    }
    body = []
    for r, (label, _, ref) in enumerate(per[0]):
        cells = "".join(f"<td>{rows[r][1]}</td>" for rows in per)
        body.append(f"<tr><th>{_esc(label)}</th>{cells}"
                    f"<td class='ref'>{_esc(ref_of.get(ref, '')) if ref else ''}</td></tr>")
    return (f"<table class='headline'><thead><tr><th>metric</th>{head}"
            f"<th class='ref'>Ai2 rollout (reference)</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _shares(runs: Sequence[RunTables]) -> dict[str, float]:
    for run in runs:
        bh = run.budget_hours
        if bh is not None and len(bh["hour"]):
            first = bh["hour"] == bh["hour"].min()
            return {str(b): float(v) for b, v in zip(bh["budget"][first], bh["share"][first],
                                                      strict=True)}
    return {}


def budget_table(summaries: Sequence[Json], runs: Sequence[RunTables]) -> str:
    """Attainment at every level of the tree, and waits per team, per policy. Leaves are
    folded into one collapsible section per team."""
    per = [_get(s, "attainment", "per_budget") or {} for s in summaries]
    if not any(per):
        per = [{**_team_attainment(s, r, 1), **_team_attainment(s, r, 2)}
               for s, r in zip(summaries, runs, strict=True)]
    shares = _shares(runs)
    nodes = sorted(set().union(*[set(p) for p in per]) | set(shares))
    if not nodes:
        return "<p class='note'>No per-budget figures in this run.</p>"
    waits = [_get(s, "wait_s", "per_budget") or {} for s in summaries]
    gave_up = [_get(s, "abandoned", "per_budget") for s in summaries]
    head = "".join(f"<th>{_esc(s.get('policy', ''))}</th>" for s in summaries)
    whead = "".join(f"<th>{_esc(s.get('policy', ''))} wait p50 / p90</th>" for s in summaries)
    whead += "".join(f"<th>{_esc(s.get('policy', ''))} abandoned</th>"
                     for s, a in zip(summaries, gave_up, strict=True) if a is not None)

    def row(node: str, cls: str) -> str:
        depth = node.count("/")
        cells = "".join(f"<td>{fmt_pct(p.get(node))}</td>" for p in per)
        wcells = "".join(
            f"<td>{fmt_dur(_get(w, node, 'p50'))} / {fmt_dur(_get(w, node, 'p90'))}</td>"
            if node in w else "<td></td>" for w in waits)
        # budgets with no abandoned workload are absent from the summary: 0 for teams and
        # leaves, blank for programs (counted per team and leaf only)
        wcells += "".join(
            f"<td>{fmt_num(a.get(node, 0)) if '/' in node else ''}</td>"
            for a in gave_up if a is not None)
        return (f"<tr class='{cls}'><th style='padding-left:{0.4 + 1.2 * depth}em'>"
                f"{_esc(node)}</th><td>{fmt_pct(shares.get(node), 2)}</td>{cells}{wcells}</tr>")

    top = [n for n in nodes if n.count("/") <= 1]
    parts = [f"<table class='budgets'><thead><tr><th>budget</th><th>share</th>{head}{whead}"
             "</tr></thead><tbody>"]
    parts += [row(n, "program" if "/" not in n else "team") for n in top]
    parts.append("</tbody></table>")
    teams = [n for n in top if "/" in n]
    leaves_html = []
    for team in teams:
        leaves = [n for n in nodes if n.startswith(team + "/")]
        if leaves:
            leaves_html.append(
                f"<details><summary>{_esc(team)}: {len(leaves)} researchers</summary>"
                f"<table class='budgets'><thead><tr><th>budget</th><th>share</th>{head}{whead}"
                f"</tr></thead><tbody>{''.join(row(n, 'leaf') for n in leaves)}"
                "</tbody></table></details>")
    if leaves_html:
        parts.append("<h3>Researchers</h3>" + "".join(leaves_html))
    return "".join(parts)


def meta_table(meta: Mapping[str, object]) -> str:
    rows = []
    for k, v in meta.items():
        if isinstance(v, Mapping):
            v = ", ".join(f"{a}: {b}" for a, b in v.items())
        rows.append(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>")
    return f"<table class='meta'><tbody>{''.join(rows)}</tbody></table>"


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;
max-width:1100px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:0.5em 0;font-size:0.9em}
th,td{border:1px solid #ddd;padding:0.25em 0.6em;text-align:right;vertical-align:top}
th:first-child{text-align:left;font-weight:normal}
thead th{background:#f4f4f4;font-weight:600;text-align:center}
td.ref,th.ref{color:#666;font-style:italic}
tr.program th{font-weight:600}
.note{color:#666;font-size:0.9em}
figure{margin:1em 0}svg{max-width:100%;height:auto}
details{margin:0.3em 0}summary{cursor:pointer}
"""


def write_report(
    out_dir: Path,
    summaries: Sequence[Json],
    *,
    title: str | None = None,
    scenario_meta: Mapping[str, object] | None = None,
) -> Path:
    """Write ``out_dir/report.html`` for the runs whose summaries are given (one per policy,
    in the order to show them) and return its path. Reads the per-policy CSV tables from
    ``out_dir``; ``scenario_meta`` (e.g. ``Scenario.meta``) is shown as the scenario's
    calibration. Works for one policy or several."""
    out_dir = Path(out_dir)
    if not summaries:
        raise ValueError("summaries: need at least one policy's summary")
    policies = [str(s.get("policy", f"run{i + 1}")) for i, s in enumerate(summaries)]
    runs = [load_tables(out_dir, p) for p in policies]
    first = summaries[0]
    name = title or (f"apportion simulation: {first.get('scenario', 'scenario')}, "
                     f"{fmt_num(first.get('sim_days'), 1)} days, {fmt_num(first.get('gpus'))} "
                     f"GPUs on {fmt_num(first.get('hosts'))} hosts")
    sections: list[str] = [f"<h1>{_esc(name)}</h1>",
                           f"<p class='note'>Policies: {_esc(', '.join(policies))}; seed "
                           f"{_esc(first.get('seed', '–'))}. Metric definitions: "
                           "docs/simulator.md.</p>"]
    missing = [m for r in runs for m in r.missing]
    if missing:
        sections.append(f"<p class='note'>Tables not found (their plots are left out): "
                        f"{_esc(', '.join(missing))}</p>")
    sections += ["<h2>Headline</h2>", headline_table(summaries)]

    plots = [
        ("Waits", plot_waits(runs, "waits"),
         "Submission to first start. A step far to the left is good."),
        ("Attainment per budget", plot_attainment(summaries, runs, "attain"),
         "Share of the GPU-hours each budget was owed (its share of healthy GPUs, or what "
         "it asked for if less) that it received, hour by hour."),
        ("GPU time per budget over time", plot_budget_time(runs, "budgets"),
         "Each band is a program's allocated GPUs; the dashed line of the same colour is where "
         "the band's top would be if every program got exactly its share. Grey: unallocated."),
        ("Usage ratio", plot_usage_ratio(runs, "ratio"),
         "Charged GPU-hours over the lookback window / (share x healthy GPU-hours): the "
         "policy's sort metric; 1 means exactly its share."),
        ("Occupancy over time", plot_occupancy(runs, "occupancy"), ""),
        ("Preemptions over time", plot_preemptions(summaries, runs, "preempt"), ""),
    ]
    for heading, svg, caption in plots:
        if svg is None:
            continue
        sections.append(f"<h2>{_esc(heading)}</h2><figure>{svg}"
                        + (f"<figcaption class='note'>{_esc(caption)}</figcaption>"
                           if caption else "") + "</figure>")
    sections += ["<h2>Attainment at every level</h2>", budget_table(summaries, runs)]
    if scenario_meta:
        sections += ["<h2>Scenario calibration</h2>", meta_table(scenario_meta)]
    doc = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
           f"<title>{_esc(name)}</title><style>{CSS}</style></head><body>"
           + "\n".join(sections) + "</body></html>")
    path = out_dir / "report.html"
    path.write_text(doc, encoding="utf-8")
    return path
