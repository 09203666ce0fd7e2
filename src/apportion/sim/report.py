"""The self-contained HTML report of a simulation run: one file, policies side by side.

``write_report`` reads what ``run.py`` wrote into the output directory (``summary.json`` is
passed in; ``workloads-P.csv``, ``budget_hours-P.csv`` and ``cluster_hours-P.csv`` are read
per policy ``P``, see docs/simulator.md) and writes ``report.html``. Plots are matplotlib
figures rendered as inline SVG with the Agg backend; CSS is inline; there is no script and no
reference to anything outside the file, so the report opens offline and can be mailed.
A missing table only drops the plots that need it. One :class:`Palette` colours every
figure (a policy or a budget looks the same everywhere); :func:`worse_notes` writes the
sentences under the figures where fair share does worse than legacy, from the run's own
tables. docs/simulator.md, "The report", describes what a reader sees.
"""

from __future__ import annotations

import html
import io
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.lines
import matplotlib.patches

matplotlib.use("Agg")
# fixed ids and no timestamp: the same run gives the same file
matplotlib.rcParams["svg.hashsalt"] = "apportion"
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402
from matplotlib.artist import Artist  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator, PercentFormatter  # noqa: E402

from apportion.core import format_duration, plural  # noqa: E402

from .engine import WORKLOAD_COLUMNS  # noqa: E402
from .metrics import BUDGET_HOUR_COLUMNS, CLUSTER_HOUR_COLUMNS  # noqa: E402
from .metrics import PREEMPT_REASONS as REASONS  # noqa: E402

MAX_POINTS = 1500  # per time series; longer runs are averaged into wider bins
CDF_POINTS = 400

# One colour per policy and one per budget for the whole report (see Palette). Policies get
# blue and orange; budgets never use those; greys are for what belongs to no budget
# (unallocated work, idle GPUs, preemption reasons), black for totals.
POLICY_COLORS = {"fairshare": "#1f63b4", "legacy": "#e8731a"}
OTHER_POLICY_COLORS = ("#6b3fa0", "#0e8a8a", "#8c564b")
BUDGET_COLORS = (
    "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79",
    "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#637939",
)
UNALLOCATED_COLOR = "#c8c8c8"
# beyond as many budgets as there are colours, the smallest are drawn as one band
OTHER_COLOR = "#2f4f4f"
REASON_COLORS = {"unallocated": UNALLOCATED_COLOR, "drain": "#969696", "rebalance": "#525252",
                 "host_failure": "#000000"}
PERCENT = PercentFormatter(xmax=1.0, decimals=0)

# The figures published for the fair-share rollout the seed scenario models (30 days, one
# cluster), shown next to the seed scenario's results only: they describe that situation,
# not a trace's.
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
# not a published figure: the demand the seed scenario is built to put on the cluster
DEMAND_REFERENCE = "2-3x at every moment (the situation modelled)"
REFERENCE_HEADING = "published rollout (reference)"


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


# The text columns of the tables run.py writes; all their other columns are numbers. Given
# to the reader, so that a column with no value at all (no workload ever started: every
# first_wait_s empty) is still read as numbers, NaN, and a text one as text.
TEXT_COLUMNS = frozenset({"id", "budget", "team", "user", "legacy_priority", "status"})
COLUMN_TYPES = {
    name: pa.string() if name in TEXT_COLUMNS else pa.float64()
    for name in (*WORKLOAD_COLUMNS, *BUDGET_HOUR_COLUMNS, *CLUSTER_HOUR_COLUMNS)
}


def read_table(path: Path) -> Columns:
    """A CSV as numpy columns (numbers as float with NaN for empty cells, text as str)."""
    table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        column_types=COLUMN_TYPES))
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
    """A duration as :func:`apportion.core.format_duration` writes it (``24 s``,
    ``1 h 48 min``), ``–`` when unknown."""
    return format_duration(float(seconds)) if _num(seconds) else "–"  # type: ignore[arg-type]


def _fmt_wall(seconds: object) -> str:
    """Wall time: tenths of a second below a minute (a short run takes 0.4 s, not 0 s)."""
    if _num(seconds) and float(seconds) < 60:  # type: ignore[arg-type]
        return f"{float(seconds):.1f} s"  # type: ignore[arg-type]
    return fmt_dur(seconds)


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


#: A budget's name on a plot (a bar's label, a legend entry) takes lines of at most this many
#: characters, and at most LABEL_LINES of them: a long name (a Slurm account path, a trace's
#: own budget strings) would otherwise widen its label until the plot beside it collapses.
LABEL_WIDTH = 40
LABEL_LINES = 3


def plot_label(name: str) -> str:
    """``name`` for a plot: whole when it fits one line of :data:`LABEL_WIDTH` characters,
    else broken into lines (after a ``/`` where one is near the end of a line); a name longer
    than :data:`LABEL_LINES` lines keeps its start and end around a ``…`` (the tables of the
    report give it whole)."""
    room = LABEL_WIDTH * LABEL_LINES
    if len(name) > room:
        keep = room - 1
        name = name[: keep - keep // 2] + "…" + name[len(name) - keep // 2:]
    lines: list[str] = []
    while len(name) > LABEL_WIDTH:
        cut = name.rfind("/", LABEL_WIDTH // 2, LABEL_WIDTH) + 1 or LABEL_WIDTH
        lines.append(name[:cut])
        name = name[cut:]
    return "\n".join([*lines, name])


# ---- SVG ------------------------------------------------------------------------------------
_SVG_START = re.compile(r"^.*?(?=<svg)", re.S)


def svg_of(fig: Figure, key: str) -> str:
    """The figure as an inline ``<svg>`` element. Ids are prefixed with ``key`` so several
    figures can live in one HTML document; metadata and namespace URLs are dropped (inline SVG
    in HTML needs neither), so the file holds no URL at all."""
    buf = io.StringIO()
    with warnings.catch_warnings():
        # the SVG keeps text as text (svg.fonttype none): the browser draws a name in a
        # script matplotlib's font lacks (CJK budget names), so its warning about the glyph
        # it measures with would only alarm the reader of the command's stderr
        warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)
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


@dataclass(frozen=True, slots=True)
class Palette:
    """The report's colours: every figure asks here, so a policy or a budget has the same
    colour everywhere."""

    policies: Mapping[str, str]
    budgets: Mapping[str, str]

    @classmethod
    def build(cls, policies: Sequence[str], budgets: Sequence[str]) -> Palette:
        others = iter(OTHER_POLICY_COLORS * (1 + len(policies)))
        pol = {p: POLICY_COLORS.get(p) or next(others) for p in policies}
        bud = {b: BUDGET_COLORS[i % len(BUDGET_COLORS)] for i, b in enumerate(budgets)}
        return cls(pol, bud)

    def policy(self, name: str) -> str:
        return self.policies.get(name, "#000000")

    def budget(self, name: str) -> str:
        return self.budgets.get(name, "#7f7f7f")


def chart_depth(runs: Sequence[RunTables]) -> int:
    """The shallowest tree level with more than one budget (1 in a tree of programs; 2 for a
    trace whose budgets all sit under one root such as ``trace/``), for the per-budget time
    series."""
    for run in runs:
        bh = run.budget_hours
        if bh is None or not len(bh["hour"]):
            continue
        for depth in range(1, int(bh["depth"].max()) + 1):
            if len(np.unique(bh["budget"][bh["depth"] == depth])) > 1:
                return depth
    return 1


def chart_budgets(runs: Sequence[RunTables], depth: int) -> list[str]:
    """The budgets at ``depth``, the biggest first: most GPU-hours delivered (what the bands
    show) summed over ``runs``, ties by name. The order of the bands and legends, and so
    which budgets keep a colour of their own (:func:`shown_budgets`): by use, not by share,
    so equal shares never hide the budget that used the most."""
    used: dict[str, float] = {}
    for run in runs:
        bh = run.budget_hours
        if bh is None:
            continue
        mask = bh["depth"] == depth
        for name, hours in zip(bh["budget"][mask].tolist(),
                               np.nan_to_num(bh["delivered"][mask]).tolist(), strict=True):
            used[str(name)] = used.get(str(name), 0.0) + float(hours)
    return sorted(used, key=lambda n: (-used[n], n))


def shown_budgets(nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """(drawn one by one, folded into one "other" band): every budget gets its own colour
    while there are colours enough; beyond that the first (the biggest, see
    :func:`chart_budgets`) keep theirs."""
    if len(nodes) <= len(BUDGET_COLORS):
        return list(nodes), []
    keep = len(BUDGET_COLORS) - 1
    return list(nodes[:keep]), list(nodes[keep:])


def _fold(mat: np.ndarray, shown: int) -> np.ndarray:
    """Columns past ``shown`` summed into one last column (none when nothing is folded)."""
    if mat.shape[1] <= shown:
        return mat
    out: np.ndarray = np.hstack([mat[:, :shown], mat[:, shown:].sum(axis=1, keepdims=True)])
    return out


# ---- plots ----------------------------------------------------------------------------------
def _percent_axis(axis: Any) -> None:
    """Ticks of a fraction axis written as percentages (0.5 -> 50%)."""
    axis.set_major_formatter(PERCENT)


CDF_RIGHT = 7 * 86400.0  # the waits' axis ends at 7 d, or the longest wait if longer


def plot_waits(runs: Sequence[RunTables], palette: Palette, key: str) -> str | None:
    """CDF of the first wait (submission to first start) per policy, all and debug, log x.

    Waits under one second are drawn at one second (log axis)."""
    fig, (ax_all, ax_dbg) = _figure(10, 3.8, ncols=2)
    drawn = False
    for run in runs:
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
            # on to the axis' right end at 100% (every start is within a longer wait), over
            # the frame: work that all started at once is a line along the top, not one
            # hidden in the left spine
            right = max(CDF_RIGHT, float(xs[-1]))
            ax.step(np.append(xs, right), np.append(q, 1.0), where="post",
                    color=palette.policy(run.policy), lw=1.6, label=run.policy,
                    clip_on=False, zorder=3)
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    for ax, title in ((ax_all, "all workloads"), (ax_dbg, "debug workloads")):
        ax.set_xscale("log")
        ax.set_xlim(left=1)
        ax.set_ylim(0, 1)
        ticks = [1, 10, 60, 600, 3600, 6 * 3600, 86400, CDF_RIGHT]
        ax.set_xticks(ticks, ["1 s", "10 s", "1 min", "10 min", "1 h", "6 h", "1 d", "7 d"])
        ax.minorticks_off()
        _percent_axis(ax.yaxis)
        ax.axhline(0.9, color="#999", lw=0.6, ls=":")
        ax.axhline(0.5, color="#999", lw=0.6, ls=":")
        ax.set_title(f"Wait to first start: {title}")
        ax.set_ylabel("started within the wait")
        ax.grid(alpha=0.3)
        if not ax.get_legend_handles_labels()[0]:  # a run may have no debug work at all
            ax.text(0.5, 0.5, "none", transform=ax.transAxes, ha="center", color="#999")
    _policy_legend(fig, runs, palette)
    return svg_of(fig, key)


def _policy_legend(fig: Figure, runs: Sequence[RunTables], palette: Palette) -> None:
    """One legend for the whole figure, above the plots (never over the data)."""
    handles = [matplotlib.patches.Patch(color=palette.policy(r.policy), label=r.policy)
               for r in runs]
    fig.legend(handles=handles, loc="outside upper center", ncols=max(1, len(handles)),
               frameon=False)


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


def plot_attainment(summaries: Sequence[Json], runs: Sequence[RunTables], palette: Palette,
                    key: str) -> str | None:
    """Horizontal bars of attainment per program (top panel) and per team (bottom panel),
    one bar per policy, labels written out on the left (a long name on lines of
    :data:`LABEL_WIDTH`, see :func:`plot_label`)."""
    per_policy = [
        (_team_attainment(s, r, 1), _team_attainment(s, r, 2))
        for s, r in zip(summaries, runs, strict=True)
    ]
    groups = [(title, labels) for title, labels in (
        ("per program", sorted({p for prog, _ in per_policy for p in prog})),
        ("per team", sorted({t for _, team in per_policy for t in team})),
    ) if labels]
    if not groups:
        return None
    n = len(per_policy)
    rows = sum(len(labels) for _, labels in groups)
    fig = plt.figure(figsize=(9, 1.2 + 0.16 * rows * max(2, n) + 0.5 * len(groups)),
                     layout="constrained")
    axes = fig.subplots(len(groups), 1, sharex=True, squeeze=False,
                        height_ratios=[len(labels) for _, labels in groups])[:, 0]
    height = 0.8 / max(1, n)
    for ax, (title, labels) in zip(axes, groups, strict=True):
        y = np.arange(len(labels))
        for i, (prog, team) in enumerate(per_policy):
            both = {**prog, **team}
            vals = np.array([both.get(lbl, np.nan) for lbl in labels])
            ax.barh(y - 0.4 + height * (i + 0.5), vals, height,
                    color=palette.policy(runs[i].policy))
        ax.set_yticks(y, [plot_label(lbl) for lbl in labels], fontsize=9)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # first label at the top
        ax.axvline(0.95, color="#555", lw=0.8, ls=":")
        ax.set_xlim(0, 1)
        _percent_axis(ax.xaxis)
        ax.set_title(f"Attainment {title}", loc="left", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("GPU-hours received / GPU-hours owed (dotted: 95%)")
    _policy_legend(fig, runs, palette)
    return svg_of(fig, key)


def _pivot(bh: Columns, depth: int, column: str,
           nodes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(hours, matrix [hour, node]) of one column for ``nodes`` (all at ``depth``); a node a
    run does not have is all zeros."""
    mask = bh["depth"] == depth
    hours = np.unique(bh["hour"][mask]).astype(int)
    h_index = {h: i for i, h in enumerate(hours)}
    n_index = {n: i for i, n in enumerate(nodes)}
    mat = np.zeros((len(hours), len(nodes)))
    names = bh["budget"][mask]
    keep = np.array([str(n) in n_index for n in names], dtype=bool)
    rows_h = np.array([h_index[int(h)] for h in bh["hour"][mask][keep]], dtype=int)
    rows_n = np.array([n_index[str(n)] for n in names[keep]], dtype=int)
    mat[rows_h, rows_n] = np.nan_to_num(bh[column][mask][keep].astype(float))
    return hours, mat


def _span(bh: Columns, depth: int, nodes: Sequence[str]) -> np.ndarray:
    _, span = _pivot(bh, depth, "span_h", nodes)
    out: np.ndarray = span.max(axis=1)
    out[out <= 0] = 1.0
    return out


def plot_budget_time(runs: Sequence[RunTables], palette: Palette, depth: int,
                     key: str) -> str | None:
    """Per policy: GPUs delivered to each budget at ``depth`` over time (stacked),
    unallocated GPUs on top, and dashed lines where each band would end if every budget got
    exactly its share of the healthy GPUs."""
    usable = [r for r in runs if r.budget_hours is not None and len(r.budget_hours["hour"])]
    nodes = chart_budgets(usable, depth)
    if not usable or not nodes:
        return None
    fig, grid = plt.subplots(len(usable), 1, figsize=(10, 3.2 * len(usable) + 0.4),
                             squeeze=False, sharex=True, layout="constrained")
    axes = grid[:, 0]
    shown, rest = shown_budgets(nodes)
    labels = shown + ([f"{len(rest)} other budgets"] if rest else [])
    colors = [palette.budget(n) for n in shown] + ([OTHER_COLOR] if rest else [])
    for ax, run in zip(axes, usable, strict=True):
        bh = run.budget_hours
        assert bh is not None
        hours, delivered = _pivot(bh, depth, "delivered", nodes)
        _, free = _pivot(bh, depth, "free", nodes)
        _, share = _pivot(bh, depth, "share", nodes)
        _, healthy = _pivot(bh, depth, "healthy_gpus", nodes)
        span = _span(bh, depth, nodes)
        gpus = _fold(delivered, len(shown)) / span[:, None]  # GPU-hours in the bin -> GPUs
        unalloc = free.sum(axis=1) / span
        days = (hours + span / 2) / 24
        fair = np.cumsum(_fold(share * healthy, len(shown)), axis=1)
        days_d, series = _downsample(days, [*gpus.T, unalloc, *fair.T])
        k = len(labels)
        ax.stackplot(days_d, series[:k] + [series[k]], colors=[*colors, UNALLOCATED_COLOR],
                     alpha=0.9, lw=0)
        # the last cumulative line is all the healthy GPUs: drawn solid, once
        for color, line in zip(colors, series[k + 1:-1], strict=False):
            ax.plot(days_d, line, color=color, lw=1.0, ls="--")
        ax.plot(days_d, series[-1], color="#000000", lw=0.8)
        ax.set_ylabel("GPUs")
        ax.set_title(run.policy, loc="left", fontsize=10, color=palette.policy(run.policy),
                     fontweight="bold")
        ax.margins(x=0)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles: list[Artist] = [matplotlib.patches.Patch(color=c, label=plot_label(n))
                             for n, c in zip(labels, colors, strict=True)]
    handles += [matplotlib.patches.Patch(color=UNALLOCATED_COLOR, label="unallocated work"),
                matplotlib.lines.Line2D([], [], color="#000000", lw=0.8, label="healthy GPUs")]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    axes[-1].set_xlabel("day")
    return svg_of(fig, key)


def plot_usage_ratio(runs: Sequence[RunTables], palette: Palette, depth: int,
                     key: str) -> str | None:
    """The policy's sort metric per budget at ``depth`` over time (1 = exactly its share)."""
    usable = [r for r in runs if r.budget_hours is not None
              and "usage_ratio" in r.budget_hours and len(r.budget_hours["hour"])]
    nodes = chart_budgets(usable, depth)
    if not usable or not nodes:
        return None
    shown, rest = shown_budgets(nodes)  # a ratio does not add up: the rest are left out
    fig, axes = _figure(10, 3.4, ncols=len(usable))
    for ax, run in zip(axes, usable, strict=True):
        bh = run.budget_hours
        assert bh is not None
        hours, ratio = _pivot(bh, depth, "usage_ratio", shown)
        days_d, series = _downsample((hours + 0.5) / 24, list(ratio.T))
        for node, ys in zip(shown, series, strict=True):
            ax.plot(days_d, ys, color=palette.budget(node), lw=1.2)
        ax.axhline(1.0, color="#000000", lw=0.6)
        ax.set_title(run.policy, loc="left", fontsize=10, color=palette.policy(run.policy),
                     fontweight="bold")
        ax.set_xlabel("day")
        ax.margins(x=0)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    top = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:
        ax.set_ylim(0, top)  # one scale, so the panels compare at a glance
    axes[0].set_ylabel("usage / share")
    handles = [matplotlib.lines.Line2D([], [], color=palette.budget(n), lw=1.2,
                                       label=plot_label(n))
               for n in shown]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False,
               title=f"the {len(shown)} of {len(nodes)} given\nthe most GPU-hours"
               if rest else None,
               title_fontsize=8)
    return svg_of(fig, key)


def plot_occupancy(runs: Sequence[RunTables], palette: Palette, key: str) -> str | None:
    """Hourly occupancy (assigned / healthy GPUs) and its unallocated part, per policy, and
    the pending workloads."""
    usable = [r for r in runs if r.cluster_hours is not None and len(r.cluster_hours["hour"])]
    if not usable:
        return None
    fig, (ax, ax_pending) = _figure(10, 3.8, ncols=2)
    for i, run in enumerate(usable):
        ch = run.cluster_hours
        assert ch is not None
        color = palette.policy(run.policy)
        span = np.where(ch["span_h"] > 0, ch["span_h"], 1.0)
        days = (ch["hour"] + span / 2) / 24
        healthy = np.where(ch["healthy_gpus"] > 0, ch["healthy_gpus"], np.nan)
        occ = ch["assigned"] / healthy
        unalloc = ch["unallocated"] / healthy
        pending = ch["pending"] if "pending" in ch else np.zeros(len(days))
        d, (occ_d, un_d, pend_d) = _downsample(days, [occ, unalloc, pending])
        ax.plot(d, occ_d, color=color, lw=1.2)
        ax.plot(d, un_d, color=color, lw=0.9, ls="--")
        ax_pending.plot(d, pend_d, color=color, lw=1.0)
        if i == 0:
            avail = ch["healthy_gpus"] / np.where(ch["total_gpus"] > 0, ch["total_gpus"], 1)
            _, (av_d,) = _downsample(days, [avail])
            ax.plot(d, av_d, color="#000000", lw=0.8, ls=":")
    ax.set_ylim(0, 1.05)
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    _percent_axis(ax.yaxis)
    ax.set_title("Occupancy (solid) and its unallocated part (dashed)", fontsize=10)
    ax.set_ylabel("of the healthy GPUs")
    ax.set_xlabel("day")
    ax.margins(x=0)
    ax.grid(alpha=0.3)
    ax_pending.set_title("Pending workloads (end of each hour)", fontsize=10)
    ax_pending.set_xlabel("day")
    ax_pending.margins(x=0)
    ax_pending.set_ylim(bottom=0)
    ax_pending.grid(alpha=0.3)
    handles: list[Artist] = [
        matplotlib.patches.Patch(color=palette.policy(r.policy), label=r.policy) for r in usable]
    handles.append(matplotlib.lines.Line2D([], [], color="#000000", lw=0.8, ls=":",
                                           label="availability (healthy / all GPUs)"))
    fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), frameon=False)
    return svg_of(fig, key)


def plot_preemptions(runs: Sequence[RunTables], palette: Palette, key: str) -> str | None:
    """Preemptions per day by reason (the hourly table's ``preemptions_<reason>`` counts),
    one panel per policy on a shared scale. A table without those columns (written before
    they existed) has no panel."""
    usable = [r for r in runs if r.cluster_hours is not None and len(r.cluster_hours["hour"])
              and all(f"preemptions_{reason}" in r.cluster_hours for reason in REASONS)]
    if not usable:
        return None
    fig, axes = _figure(10, 3.4, ncols=len(usable))
    top = 0.0
    for ax, run in zip(axes, usable, strict=True):
        ch = run.cluster_hours
        assert ch is not None
        day = (ch["hour"] // 24).astype(int)
        n_days = int(day.max()) + 1
        bottom = np.zeros(n_days)
        for reason in REASONS:
            vals = np.bincount(day, weights=np.nan_to_num(ch[f"preemptions_{reason}"]),
                               minlength=n_days).astype(float)
            ax.bar(np.arange(n_days), vals, bottom=bottom, color=REASON_COLORS[reason],
                   width=0.9)
            bottom += vals
        top = max(top, float(bottom.max()) if len(bottom) else 0.0)
        ax.set_title(run.policy, loc="left", fontsize=10, color=palette.policy(run.policy),
                     fontweight="bold")
        ax.set_xlabel("day")
        ax.grid(axis="y", alpha=0.3)
    for ax in axes:
        ax.set_ylim(0, top * 1.05 or 1)  # one scale, so the panels compare at a glance
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel("preemptions per day")
    handles = [matplotlib.patches.Patch(color=REASON_COLORS[r], label=r.replace("_", " "))
               for r in REASONS]
    fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), frameon=False,
               title="reason", title_fontsize=8, fontsize=8)
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
        ("rejected (too large or invalid)", fmt_num(_get(s, "rejected")), ""),
        ("abandoned (never started): all / debug",
         f"{fmt_num(abandoned.get('count'))} / {fmt_num(abandoned.get('debug'))}", ""),
        ("abandoned GPU-hours asked", fmt_num(abandoned.get("gpu_hours_requested"), 0), ""),
        ("attainment, overall per team", fmt_pct(_get(att, "overall_teams")),
         "attainment_overall"),
        ("attainment, overall per researcher", fmt_pct(_get(att, "overall")), ""),
        ("attainment, worst team", fmt_pct(_get(att, "min"))
         + (f" (<span class='name'>{_esc(min_name)}</span>)" if min_name else ""),
         "attainment_min"),
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
        ("simulation wall time", _fmt_wall(_get(s, "wall_s")), ""),
    ]
    return rows


def headline_table(summaries: Sequence[Json], reference: bool = False) -> str:
    """Metric rows, one column per policy; with ``reference`` (the seed scenario only) a last
    column of the published rollout figures."""
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
        if reference:
            cells += f"<td class='ref'>{_esc(ref_of.get(ref, '')) if ref else ''}</td>"
        body.append(f"<tr><th>{_esc(label)}</th>{cells}</tr>")
    ref_head = f"<th class='ref'>{_esc(REFERENCE_HEADING)}</th>" if reference else ""
    return (f"<table class='headline'><thead><tr><th>metric</th>{head}{ref_head}"
            f"</tr></thead><tbody>{''.join(body)}</tbody></table>")


# ---- where fair share does worse than legacy, and why ---------------------------------------
def _by_kind(tables: RunTables, column: str, mask_of: str) -> tuple[float, float] | None:
    """(allocated, unallocated) sums of ``column`` over the workloads whose ``status`` is
    ``mask_of`` (or all workloads for ``""``); None without the workloads table."""
    w = tables.workloads
    if w is None or "allocated" not in w or (column and column not in w):
        return None
    rows = np.ones(len(w["allocated"]), dtype=bool) if not mask_of else w["status"] == mask_of
    alloc = w["allocated"] > 0
    values = np.nan_to_num(w[column]) if column else np.ones(len(alloc))
    return float(values[rows & alloc].sum()), float(values[rows & ~alloc].sum())


def _first_wait_pct(tables: RunTables, pct: float,
                    debug_only: bool) -> tuple[float, float, float] | None:
    """The ``pct`` percentile of the first wait of started work: (all, allocated,
    unallocated), NaN where there is none; None without the workloads table."""
    w = tables.workloads
    if w is None or "allocated" not in w or "first_wait_s" not in w:
        return None
    started = np.isfinite(w["first_wait_s"])
    if debug_only and "debug" in w:
        started &= w["debug"] > 0
    alloc = w["allocated"] > 0
    out = []
    for mask in (started, started & alloc, started & ~alloc):
        out.append(float(np.percentile(w["first_wait_s"][mask], pct)) if mask.any() else np.nan)
    return out[0], out[1], out[2]


def _bigger(a: object, b: object) -> bool:
    return _num(a) and _num(b) and float(a) > float(b)  # type: ignore[arg-type]


def worse_notes(summaries: Sequence[Json], runs: Sequence[RunTables]) -> dict[str, list[str]]:
    """Sentences saying where fair share did worse than legacy in this run and why, keyed by
    the figure they go under (``headline``, ``waits``, ``attain``, ``occupancy``,
    ``preempt``). Every number comes from the run; a sentence appears only when fair share
    is worse on that figure. Empty unless both policies ran."""
    names = [str(s.get("policy")) for s in summaries]
    if "fairshare" not in names or "legacy" not in names:
        return {}
    f_i, l_i = names.index("fairshare"), names.index("legacy")
    fs, lg = summaries[f_i], summaries[l_i]
    ft, lt = runs[f_i], runs[l_i]
    notes: dict[str, list[str]] = {}

    def add(section: str, text: str) -> None:
        notes.setdefault(section, []).append(text)

    def n(x: object, digits: int = 0) -> str:
        return fmt_num(x, digits)

    pre_f, pre_l = _get(fs, "preemptions") or {}, _get(lg, "preemptions") or {}
    prot_f, prot_l = _get(fs, "protected_preemptions"), _get(lg, "protected_preemptions")
    protected = (f" Legacy, for its part, preempted {n(prot_l)} workloads before their "
                 f"minimum runtime was up; fair share {n(prot_f)}."
                 if _bigger(prot_l, prot_f) else "")

    # abandoned workloads (headline table)
    ab_f, ab_l = _get(fs, "abandoned", "count"), _get(lg, "abandoned", "count")
    if _bigger(ab_f, ab_l):
        text = f"Fair share abandoned more workloads ({n(ab_f)} vs {n(ab_l)})"
        kf, kl = _by_kind(ft, "", "abandoned"), _by_kind(lt, "", "abandoned")
        if kf is None or kl is None:
            text += " (the workloads tables are missing, so which work cannot be shown)."
        elif kf[1] > kl[1]:
            text += (f": {n(kf[1])} of them were unallocated work (minimum runtime 0), which "
                     "fair share starts only on GPUs no allocated work is waiting for, so in "
                     "a full cluster it waited past its owner's patience; of allocated work "
                     f"it abandoned {n(kf[0])}, legacy {n(kl[0])}.")
        else:
            text += (f": {n(kf[0])} of them allocated (legacy: {n(kl[0])}). Allocated work "
                     "starts in Fair Tree order, budgets furthest below their share first, "
                     "so work of budgets over their share waits longer than in legacy's "
                     "priority order.")
        add("headline", text)

    # GPU-hours lost to preemption (headline table)
    host_stops = sum(float(pre_f.get(r) or 0) for r in ("drain", "host_failure"))
    lost_f, lost_l = _get(fs, "lost_gpu_hours"), _get(lg, "lost_gpu_hours")
    if _bigger(lost_f, lost_l) and n(lost_f) != n(lost_l):
        text = f"Fair share lost more GPU-hours to preemption ({n(lost_f)} vs {n(lost_l)})"
        kf, kl = _by_kind(ft, "lost_gpu_hours", ""), _by_kind(lt, "lost_gpu_hours", "")
        if kf is not None and kl is not None and kf[0] > kl[0]:
            text += (f": {n(kf[0])} of them were progress of allocated work since its last "
                     "checkpoint, lost when fair share preempted it after its minimum runtime "
                     "to give the GPUs to a budget below its share "
                     f"({n(pre_f.get('rebalance'))} rebalance preemptions)"
                     + (" or when its host failed or was drained" if host_stops else "")
                     + ". Legacy never preempts to rebalance budgets, only "
                     "for a strictly higher priority "
                     f"({n(pre_l.get('rebalance'))} preemptions of allocated work).")
        elif kf is not None and kl is not None:
            text += (f": {n(kf[1])} of them on unallocated work (legacy: {n(kl[1])}), which "
                     "fair share preempts whenever allocated work needs its GPUs; legacy "
                     "only for a strictly higher priority.")
        else:
            text += (f": it preempted allocated work {n(pre_f.get('rebalance'))} times to "
                     "rebalance budgets; legacy preempts only for a strictly higher priority.")
        add("headline", text + protected)

    # preemptions (preemption figure)
    tot_f, tot_l = pre_f.get("total"), pre_l.get("total")
    if _bigger(tot_f, tot_l):
        parts = []
        if _bigger(pre_f.get("unallocated"), 0):
            parts.append(
                f"{n(pre_f.get('unallocated'))} of its preemptions stopped unallocated work "
                "(minimum runtime 0), which it lets run on GPUs no allocated work needs and "
                f"stops as soon as some does (legacy: {n(pre_l.get('unallocated'))}, only for "
                "a strictly higher priority)")
        if _bigger(pre_f.get("rebalance"), 0):
            parts.append(
                f"{n(pre_f.get('rebalance'))} rebalanced allocated work past its minimum "
                "runtime towards a budget below its share (legacy: "
                f"{n(pre_l.get('rebalance'))} preemptions of allocated work, by priority)")
        if host_stops and not parts:
            parts.append(f"{n(host_stops)} were for drained or failed hosts")
        add("preempt", f"Fair share preempted more often ({n(tot_f)} vs {n(tot_l)})"
            + (": " + "; ".join(parts) + "." if parts else ".") + protected)

    # waits (waits figure)
    waits = [("median wait", "all", 50.0), ("p90 wait", "all", 90.0), ("p99 wait", "all", 99.0),
             ("debug p90 wait", "debug", 90.0)]
    worse = [(label, group, pct, _get(fs, "wait_s", group, f"p{pct:.0f}"),
              _get(lg, "wait_s", group, f"p{pct:.0f}")) for label, group, pct in waits]
    worse = [w for w in worse if _bigger(w[3], w[4]) and fmt_dur(w[3]) != fmt_dur(w[4])]
    if worse:
        text = "Fair share's " + ", ".join(
            f"{label} is longer ({fmt_dur(f)} vs {fmt_dur(x)})" for label, _, _, f, x in worse)
        _, group, pct, _, _ = worse[0]
        pf = _first_wait_pct(ft, pct, group == "debug")
        pl = _first_wait_pct(lt, pct, group == "debug")
        name = f"p{pct:.0f}"
        if pf is None or pl is None:
            text += "."
        elif not _bigger(pf[0], pl[0]):
            # first waits are no longer: the difference is in the waits after a preemption
            n_f, n_l = _get(fs, "wait_s", group, "n"), _get(lg, "wait_s", group, "n")
            text += (f". Waits to a first start are not longer ({name} {fmt_dur(pf[0])} vs "
                     f"{fmt_dur(pl[0])}): the longer ones are waits to restart after a "
                     f"preemption, of which fair share has more ({n(n_f)} waits in all vs "
                     f"{n(n_l)}).")
        elif _bigger(pf[2], pl[2]) and not _bigger(pf[1], pl[1]):
            text += (f". The longer waits are unallocated work's ({name} of first waits "
                     f"{fmt_dur(pf[2])} vs {fmt_dur(pl[2])}; allocated work {fmt_dur(pf[1])} "
                     f"vs {fmt_dur(pl[1])}): it starts only on GPUs no allocated work needs.")
        else:
            text += (f". Allocated work waits longer ({name} of first waits "
                     f"{fmt_dur(pf[1])} vs {fmt_dur(pl[1])}): it starts in Fair Tree order, "
                     "budgets furthest below their share first, not by priority and "
                     "submission time.")
        add("waits", text)

    # attainment per team (attainment figure)
    att_f, att_l = _team_attainment(fs, ft, 2), _team_attainment(lg, lt, 2)
    lower = sorted(((t, att_f[t], att_l[t]) for t in att_f if t in att_l
                    and att_f[t] < att_l[t]), key=lambda r: r[1] - r[2])
    if lower:
        listed = ", ".join(f"{t} ({fmt_pct(a)} vs {fmt_pct(b)})" for t, a, b in lower[:5])
        more = f" and {len(lower) - 5} more" if len(lower) > 5 else ""
        add("attain",
            f"Fair share gave {plural(len(lower), 'team')} less of "
            f"what they were owed than legacy: {listed}{more}. Under fair share a budget "
            "that asks for its share gets it as work elsewhere reaches the end of its minimum "
            "runtime (never sooner: running work is protected until then), while legacy "
            "preempts at once for a higher priority.")

    # occupancy and pending work (occupancy figure)
    occ_f, occ_l = _get(fs, "occupancy"), _get(lg, "occupancy")
    if _bigger(occ_l, occ_f) and fmt_pct(occ_l) != fmt_pct(occ_f):
        un_f, un_l = _get(fs, "unallocated_fraction"), _get(lg, "unallocated_fraction")
        text = f"Fair share kept fewer of the healthy GPUs busy ({fmt_pct(occ_f)} vs " \
               f"{fmt_pct(occ_l)})"
        if _num(un_f) and _num(un_l):
            al_f = float(occ_f) - float(occ_f) * float(un_f)
            al_l = float(occ_l) - float(occ_l) * float(un_l)
            part = "unallocated" if al_f >= al_l else "allocated"
            text += (f"; the difference is in {part} work (allocated {fmt_pct(al_f)} vs "
                     f"{fmt_pct(al_l)} of the healthy GPUs)")
        add("occupancy", text + ".")
    mean_f, mean_l = _mean_pending(ft), _mean_pending(lt)
    if _bigger(mean_f, mean_l) and n(mean_f, 1) != n(mean_l, 1):
        text = (f"Fair share had more workloads pending on average ({n(mean_f, 1)} vs "
                f"{n(mean_l, 1)})")
        kf, kl = _by_kind(ft, "", "pending"), _by_kind(lt, "", "pending")
        if kf is not None and kl is not None and kf[1] > kl[1]:
            text += (f": at the end, {n(kf[1])} of its {n(sum(kf))} pending workloads were "
                     "unallocated work, which waits for GPUs no allocated work needs "
                     f"(legacy: {n(kl[1])} of {n(sum(kl))})")
        add("occupancy", text + ".")
    return notes


def _mean_pending(tables: RunTables) -> float | None:
    ch = tables.cluster_hours
    if ch is None or "pending" not in ch or not len(ch["pending"]):
        return None
    return float(np.nanmean(ch["pending"]))


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
    head = "".join(f"<th>{_esc(s.get('policy', ''))} attainment</th>" for s in summaries)
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
                f"<details><summary>{_esc(team)}: {plural(len(leaves), 'researcher')}</summary>"
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
table.headline td,table.budgets td{white-space:nowrap}table.meta td{text-align:left}
.name{white-space:normal}.name,table.budgets th,p.why,summary{overflow-wrap:anywhere}
th:first-child{text-align:left;font-weight:normal}
thead th{background:#f4f4f4;font-weight:600;text-align:center}
td.ref,th.ref{color:#666;font-style:italic}
tr.program th{font-weight:600}
.note{color:#666;font-size:0.9em}
figure{margin:1em 0}svg{max-width:100%;height:auto}
details{margin:0.3em 0}summary{cursor:pointer}
p.why{background:#f4f4f4;border-left:3px solid #888;padding:0.4em 0.8em;margin:0.6em 0;
font-size:0.92em;max-width:60em}
.swatch{display:inline-block;width:0.8em;height:0.8em;margin:0 0.25em 0 0.4em;
vertical-align:-0.05em;border-radius:2px}
"""


def write_report(
    out_dir: Path,
    summaries: Sequence[Json],
    *,
    title: str | None = None,
    scenario_meta: Mapping[str, object] | None = None,
    reference: bool = False,
) -> Path:
    """Write ``out_dir/report.html`` for the runs whose summaries are given (one per policy,
    in the order to show them) and return its path. Reads the per-policy CSV tables from
    ``out_dir``; ``scenario_meta`` (e.g. ``Scenario.meta``) is shown as the scenario's
    calibration; ``reference`` adds the published rollout figures next to the results (for
    the seed scenario, which models that rollout; they say nothing about a trace). Works for
    one policy or several."""
    out_dir = Path(out_dir)
    if not summaries:
        raise ValueError("summaries: need at least one policy's summary")
    policies = [str(s.get("policy", f"run{i + 1}")) for i, s in enumerate(summaries)]
    runs = [load_tables(out_dir, p) for p in policies]
    depth = chart_depth(runs)
    palette = Palette.build(policies, shown_budgets(chart_budgets(runs, depth))[0])
    first = summaries[0]
    days = first.get("sim_days")
    # to two decimals: a replayed history's span is any float (3.083631805772031 days);
    # under a day as a duration (a quarter of an hour read '0.01 days', less '0 days')
    if not _num(days):
        span = "– days"
    elif float(days) < 1:  # type: ignore[arg-type]
        span = fmt_dur(float(days) * 86400)  # type: ignore[arg-type]
    else:
        span = plural(round(float(days), 2), "day")  # type: ignore[arg-type]
    gpus, hosts = first.get("gpus"), first.get("hosts")
    size = (f"{plural(float(gpus), 'GPU')} on {plural(float(hosts), 'host')}"  # type: ignore[arg-type]
            if _num(gpus) and _num(hosts) else "– GPUs")
    origin = first.get("time_origin")  # a trace of wall-clock times: when its 0 is
    name = title or (f"apportion simulation: {first.get('scenario', 'scenario')}, "
                     f"{span}, {size}")
    swatches = " ".join(
        f"<span class='swatch' style='background:{palette.policy(p)}'></span>{_esc(p)}"
        for p in policies)
    sections: list[str] = [f"<h1>{_esc(name)}</h1>",
                           f"<p class='note'>Policies: {swatches}; seed "
                           f"{_esc(first.get('seed', '–'))}"
                           + (f"; hour 0 is {_esc(origin)} (the trace's first submission)"
                              if origin else "")
                           + ". Metric definitions: docs/simulator.md.</p>"]
    missing = [m for r in runs for m in r.missing]
    if missing:
        sections.append(f"<p class='note'>Tables not found (their plots are left out): "
                        f"{_esc(', '.join(missing))}</p>")
    notes = worse_notes(summaries, runs)

    def why(section: str) -> str:
        return "".join(f"<p class='why'>{_esc(t)}</p>" for t in notes.get(section, ()))

    sections += ["<h2>Headline</h2>", headline_table(summaries, reference), why("headline")]
    if "pools" in first:  # a fleet: figures per pool and for the whole fleet (sim/fleet.py)
        from .fleet import pools_html

        sections += ["<h2>Pools</h2>", pools_html(summaries)]
    level = "program" if depth == 1 else "budget"
    plots = [
        ("Waits", "waits", plot_waits(runs, palette, "waits"),
         "Submission to first start: the share of workloads started within a given wait. "
         "A curve further up and to the left is better."),
        ("Attainment per budget", "attain", plot_attainment(summaries, runs, palette, "attain"),
         "Of the GPU-hours each budget was owed (its share of the healthy GPUs, or what its "
         "allocated work asked for if less), hour by hour, the part it received."),
        ("GPU time per budget over time", "budgets",
         plot_budget_time(runs, palette, depth, "budgets"),
         f"Each band is a {level}'s allocated GPUs; the dashed line of the same colour is "
         f"where the band's top would be if every {level} got exactly its share. Grey: "
         "unallocated work (minimum runtime 0)."),
        ("Usage ratio", "ratio", plot_usage_ratio(runs, palette, depth, "ratio"),
         "Charged GPU-hours over the lookback window / (share x healthy GPU-hours): fair "
         "share's sort metric; 1 means exactly its share."),
        ("Occupancy over time", "occupancy", plot_occupancy(runs, palette, "occupancy"), ""),
        ("Preemptions over time", "preempt",
         plot_preemptions(runs, palette, "preempt"), ""),
    ]
    for heading, key, svg, caption in plots:
        if svg is None:
            continue
        sections.append(f"<h2>{_esc(heading)}</h2><figure id='fig-{key}'>{svg}"
                        + (f"<figcaption class='note'>{_esc(caption)}</figcaption>"
                           if caption else "") + "</figure>" + why(key))
    sections += ["<h2>Attainment at every level</h2>", budget_table(summaries, runs)]
    if scenario_meta:
        sections += ["<h2>Scenario</h2>", meta_table(scenario_meta)]
    doc = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
           f"<title>{_esc(name)}</title><style>{CSS}</style></head><body>"
           + "\n".join(sections) + "</body></html>")
    path = out_dir / "report.html"
    path.write_text(doc, encoding="utf-8")
    return path
