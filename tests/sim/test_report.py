"""The HTML report, rendered from real short simulation runs: a 3-day seed scenario (both
policies) and a replay of a 6-budget ITP trace. Tables are parsed, not searched for
substrings; plots are parsed as SVG."""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from apportion.cli.main import main
from apportion.sim.report import (
    BUDGET_COLORS,
    LABEL_WIDTH,
    OTHER_COLOR,
    POLICY_COLORS,
    REASON_COLORS,
    REFERENCE,
    REFERENCE_HEADING,
    RunTables,
    chart_budgets,
    fmt_num,
    fmt_pct,
    load_tables,
    worse_notes,
    write_report,
)
from apportion.sim.run import run_policies
from apportion.sim.scenarios import seed_scenario

DATA = Path(__file__).parent / "data"
POLICIES = ("fairshare", "legacy")
FIGURES = ("waits", "attain", "budgets", "ratio", "occupancy", "preempt")


# ---- parsing helpers -----------------------------------------------------------------------
class _Tables(HTMLParser):
    """Every <table> as (class, rows), a row being the text of its cells; and the text of
    every <p class='why'>."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.why: list[str] = []
        self._cell: list[str] | None = None
        self._in_why = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.tables.append((a.get("class") or "", []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []
        elif tag == "p" and a.get("class") == "why":
            self._in_why = True
            self.why.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "p":
            self._in_why = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._in_why:
            self.why[-1] += data


def parse(text: str) -> _Tables:
    p = _Tables()
    p.feed(text)
    return p


def table(text: str, cls: str) -> list[list[str]]:
    (rows,) = [rows for c, rows in parse(text).tables if c == cls][:1]
    return rows


def headline(text: str) -> dict[str, list[str]]:
    """The headline table as metric -> the cells after it."""
    rows = table(text, "headline")
    return {r[0]: r[1:] for r in rows}


def figures(text: str) -> dict[str, ET.Element]:
    """Each figure's inline SVG, parsed (the xlink prefix is dropped: the report declares no
    namespaces, which HTML does not need but XML does)."""
    out = {}
    for key, svg in re.findall(r"<figure id='fig-(\w+)'>(<svg.*?</svg>)", text, re.S):
        out[key] = ET.fromstring(svg.replace("xlink:", ""))
    return out


def shape_colors(svg: ET.Element) -> set[str]:
    """Fill and stroke colours of every drawn shape (text left out: titles may be coloured)."""
    colors: set[str] = set()
    for el in svg.iter():
        if el.tag == "text":
            continue
        colors |= set(re.findall(r"(?:fill|stroke): (#[0-9a-f]{6})", el.get("style") or ""))
    return colors


def texts(svg: ET.Element) -> list[ET.Element]:
    return [el for el in svg.iter() if el.tag == "text"]


# ---- the runs ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], str]:
    """The seed scenario, 3 days on 128 GPUs, both policies, written with its report."""
    out = tmp_path_factory.mktemp("seed")
    run_policies(seed_scenario(days=3, size=128), POLICIES, progress=False, out=out)
    summaries = json.loads((out / "summary.json").read_text())
    return out, summaries, (out / "report.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], str]:
    """The ITP trace cluster10 with 6 synthetic budgets on 4 hosts of 8 GPUs, both policies,
    through the command line."""
    out = tmp_path_factory.mktemp("trace")
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(DATA / "itp" / "cluster10.csv"), "--format", "itp",
        "--budgets", "6", "--cluster", "4x8", "--quiet", "--out", str(out)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summaries = json.loads((out / "summary.json").read_text())
    return out, summaries, (out / "report.html").read_text(encoding="utf-8")


Run = tuple[Path, list[dict[str, Any]], str]


# ---- the file ------------------------------------------------------------------------------
def test_report_references_nothing_outside_the_file(seed_run: Run) -> None:
    """No script, stylesheet, font, image or URL: the report opens offline; every url(...)
    in the SVGs points inside the document; ids are unique across the document."""
    text = seed_run[2]
    lower = text.lower()
    for needle in ("<script", "<link", "<img", "@import", "http://", "https://"):
        assert needle not in lower, needle
    assert all(ref.startswith("#") for ref in re.findall(r"url\(([^)]*)\)", text))
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def test_report_has_the_six_figures(seed_run: Run, trace_run: Run) -> None:
    """Both reports hold the waits, attainment, budget-time, usage-ratio, occupancy and
    preemption figures, in that order, each an inline SVG."""
    for run in (seed_run, trace_run):
        assert list(figures(run[2])) == list(FIGURES)


def test_report_speaks_only_of_the_project(seed_run: Run, trace_run: Run) -> None:
    """Neither report mentions anything but the project and its runs: no brief, premise,
    organisation or development process."""
    for run in (seed_run, trace_run):
        lower = run[2].lower()
        for word in ("brief", "premise", "ai2", "issue", "ticket"):
            assert word not in lower, word


# ---- the headline table --------------------------------------------------------------------
def test_seed_headline_has_a_published_reference_column(seed_run: Run) -> None:
    """The seed report's headline table has 4 columns (metric, fairshare, legacy, the
    published rollout) on every row, and the reference cells hold the published figures."""
    rows = table(seed_run[2], "headline")
    assert rows[0] == ["metric", *POLICIES, REFERENCE_HEADING]
    assert all(len(r) == 4 for r in rows), [r for r in rows if len(r) != 4]
    by_metric = {r[0]: r for r in rows}
    assert by_metric["teams at >= 95%"][3] == REFERENCE["teams_ge_95"]
    assert by_metric["occupancy"][3] == REFERENCE["occupancy"]


def test_trace_headline_has_no_reference_column(trace_run: Run) -> None:
    """A trace's headline table has 3 columns on every row and none of the published
    figures: they describe the seed scenario's situation, not this trace (6 teams)."""
    text = trace_run[2]
    rows = table(text, "headline")
    assert rows[0] == ["metric", *POLICIES]
    assert all(len(r) == 3 for r in rows)
    assert REFERENCE_HEADING not in text and "13 of 15" not in text
    assert headline(text)["teams at >= 95%"][0].endswith(" of 6")


def test_headline_cells_are_the_summary_figures(seed_run: Run) -> None:
    """Headline cells show each policy's summary figures, formatted."""
    _, summaries, text = seed_run
    h = headline(text)
    for i, s in enumerate(summaries):
        assert h["occupancy"][i] == fmt_pct(s["occupancy"])
        assert h["unallocated fraction"][i] == fmt_pct(s["unallocated_fraction"])
        assert h["lost GPU-hours"][i] == fmt_num(s["lost_gpu_hours"], 1)
        assert h["preemptions: total"][i] == fmt_num(s["preemptions"]["total"])
        assert h["abandoned (never started): all / debug"][i] == (
            f"{fmt_num(s['abandoned']['count'])} / {fmt_num(s['abandoned']['debug'])}")
        att = s["attainment"]
        assert h["teams at >= 95%"][i] == f"{att['teams_ge_95']} of {att['teams']}"


def test_headline_durations_are_in_human_units(seed_run: Run) -> None:
    """Wait cells read like '0 s / 50 min 39 s / 14 h 58 min': every part a number with
    s, min, h or d, never a bare count of seconds."""
    h = headline(seed_run[2])
    part = r"(–|\d+ (s|min|h|d)( \d+ (s|min|h))?)"
    for metric in ("wait p50 / p90 / p99, all", "wait p50 / p90 / p99, debug"):
        for cell in h[metric][:len(POLICIES)]:  # the reference cell quotes the published text
            assert re.fullmatch(rf"{part} / {part} / {part}", cell), cell


# ---- the budget table ----------------------------------------------------------------------
def test_budget_table_has_a_column_per_figure_and_policy(seed_run: Run) -> None:
    """The per-budget table has budget, share, attainment per policy, waits per policy and
    abandoned per policy: 8 cells on every row, one row per program and team."""
    rows = table(seed_run[2], "budgets")
    assert rows[0] == ["budget", "share", "fairshare attainment", "legacy attainment",
                       "fairshare wait p50 / p90",
                       "legacy wait p50 / p90", "fairshare abandoned", "legacy abandoned"]
    assert all(len(r) == 8 for r in rows)
    names = [r[0] for r in rows[1:]]
    assert len([n for n in names if "/" not in n]) == 4  # programs
    assert len([n for n in names if "/" in n]) == 15  # teams


# ---- colours, axes, labels, legends ----------------------------------------------------------
def test_each_policy_has_one_colour_across_the_figures(seed_run: Run, trace_run: Run) -> None:
    """The figures compared by policy (waits, attainment, occupancy) draw fairshare in its
    blue and legacy in its orange and use no budget colour; the figures by budget and the
    preemption figure use no policy colour in any shape."""
    policy = set(POLICY_COLORS.values())
    for run in (seed_run, trace_run):
        figs = figures(run[2])
        for key in ("waits", "attain", "occupancy"):
            colors = shape_colors(figs[key])
            assert policy <= colors, key
            assert not colors & set(BUDGET_COLORS), key
        for key in ("budgets", "ratio", "preempt"):
            assert not shape_colors(figs[key]) & policy, key


def test_each_budget_has_one_colour_across_the_figures(seed_run: Run, trace_run: Run) -> None:
    """The budget-time and usage-ratio figures draw the same budgets (seed: 4 programs;
    the trace: its 6 budgets under trace/) in the same colours, one colour each."""
    for run, count in ((seed_run, 4), (trace_run, 6)):
        figs = figures(run[2])
        used = [shape_colors(figs[k]) & set(BUDGET_COLORS) for k in ("budgets", "ratio")]
        assert used[0] == used[1]
        assert len(used[0]) == count


def tick_labels(svg: ET.Element, axes: int, axis: str) -> set[str]:
    """The tick labels of the ``axis`` ("x" or "y") of the ``axes``-th plot (1-based)."""
    (ax,) = [g for g in svg.iter("g") if (g.get("id") or "").endswith(f"-axes_{axes}")]
    return {t.text or "" for g in ax.iter("g") if f"-{axis}tick_" in (g.get("id") or "")
            for t in g.iter("text")}


def test_attainment_and_occupancy_axes_are_percentages(seed_run: Run) -> None:
    """The attainment axis (x, shared by both panels, labelled under the lower one), the
    occupancy axis (y) and the wait CDFs (y) run from 0% to 100% with tick labels written
    as percentages, nothing else."""
    figs = figures(seed_run[2])
    percent = {"0%", "20%", "40%", "60%", "80%", "100%"}
    for key, axes, axis in (("attain", 2, "x"), ("occupancy", 1, "y"),
                            ("waits", 1, "y"), ("waits", 2, "y")):
        assert tick_labels(figs[key], axes, axis) == percent, (key, axes, axis)


def test_attainment_labels_are_horizontal_and_complete(seed_run: Run) -> None:
    """Every team's full name labels its bars, written horizontally (no rotated labels)."""
    svg = figures(seed_run[2])["attain"]
    labels = {t.text for t in texts(svg)}
    teams = {r[0] for r in table(seed_run[2], "budgets")[1:] if "/" in r[0]}
    assert teams <= labels
    angles = {m for t in texts(svg)
              for m in re.findall(r"rotate\((-?[\d.]+)", t.get("transform") or "")}
    assert angles <= {"-0", "0"}


def bar_heights(svg: ET.Element, axes: int) -> dict[str, list[float]]:
    """The heights (in SVG units) of the bars of the ``axes``-th plot (1-based), per fill
    colour in drawing order (a bar with no fill style is black, matplotlib's default)."""
    (ax,) = [g for g in svg.iter("g") if (g.get("id") or "").endswith(f"-axes_{axes}")]
    out: dict[str, list[float]] = {}
    for path in ax.iter("path"):
        if not path.get("clip-path") or "stroke" in (path.get("style") or ""):
            continue  # the background is not clipped; grid lines are stroked
        ys = [float(y) for y in re.findall(r"[ML] [\d.]+ ([\d.]+)", path.get("d") or "")]
        fill = re.findall(r"fill: (#[0-9a-f]{6})", path.get("style") or "") or ["#000000"]
        out.setdefault(fill[0], []).append(max(ys) - min(ys))
    return out


def test_preemption_bars_are_the_tables_counts_per_day_and_reason(seed_run: Run) -> None:
    """Each policy's preemption bars are, day by day and reason by reason, the sums of the
    hourly table's ``preemptions_<reason>`` columns, on one scale for both panels: on the
    3-day seed run fair share's day 0 has unallocated preemptions only (no share of the
    run's rebalances), and the legend does not speak of a split."""
    out, _, text = seed_run
    svg = figures(text)["preempt"]
    drawn, counts = {}, {}
    for axes, policy in enumerate(POLICIES, start=1):
        with (out / f"cluster_hours-{policy}.csv").open(newline="") as f:
            rows = list(csv.DictReader(f))
        days = int(rows[-1]["hour"]) // 24 + 1
        for reason, color in REASON_COLORS.items():
            per_day = [0] * days
            for r in rows:
                per_day[int(r["hour"]) // 24] += int(r[f"preemptions_{reason}"])
            counts[policy, reason] = per_day
            drawn[policy, reason] = bar_heights(svg, axes)[color]
    # SVG units per preemption, from the biggest count: the same for every bar
    key, day = max(((k, d) for k, c in counts.items() for d in range(len(c))),
                   key=lambda kd: counts[kd[0]][kd[1]])
    scale = drawn[key][day] / counts[key][day]
    for key, heights in drawn.items():
        assert heights == pytest.approx([scale * n for n in counts[key]], abs=1e-3), key
    assert counts["fairshare", "rebalance"][0] == 0 < counts["fairshare", "unallocated"][0]
    assert not [t for t in texts(svg) if "split" in (t.text or "")]


def test_legends_sit_outside_the_plots(seed_run: Run) -> None:
    """No legend is drawn inside a plot's axes: every legend belongs to the figure."""
    for key, svg in figures(seed_run[2]).items():
        for group in svg.iter("g"):
            if "axes_" in (group.get("id") or ""):
                assert not [g for g in group.iter("g") if "legend" in (g.get("id") or "")], key
        legends = len([g for g in svg.iter("g") if "legend" in (g.get("id") or "")])
        assert legends >= 1, key


# ---- where fair share is worse ---------------------------------------------------------------
def _abandoned_by_kind(out: Path, policy: str) -> tuple[int, int]:
    with (out / f"workloads-{policy}.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "abandoned"]
    allocated = sum(1 for r in rows if r["allocated"] == "1")
    return allocated, len(rows) - allocated


def test_a_sentence_says_why_only_where_fair_share_is_worse(seed_run: Run) -> None:
    """The abandoned, lost-GPU-hours and preemption sentences appear exactly when fair share
    is worse on that figure, quoting both policies' figures."""
    out, summaries, text = seed_run
    why = parse(text).why
    fs, lg = summaries
    cases = [
        ("Fair share abandoned more workloads", fs["abandoned"]["count"],
         lg["abandoned"]["count"], 0),
        ("Fair share lost more GPU-hours to preemption", fs["lost_gpu_hours"],
         lg["lost_gpu_hours"], 0),
        ("Fair share preempted more often", fs["preemptions"]["total"],
         lg["preemptions"]["total"], 0),
    ]
    for start, f, x, digits in cases:
        found = [w for w in why if w.startswith(start)]
        assert bool(found) == (f > x), start
        if found:
            assert found[0].startswith(f"{start} ({fmt_num(f, digits)} vs {fmt_num(x, digits)})")


@pytest.fixture(scope="module")
def seed_run_two_days(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The seed scenario, 2 days on 128 GPUs, both policies: there fair share abandons more
    workloads than legacy, so the report has the abandoned sentence."""
    out = tmp_path_factory.mktemp("seed2d")
    run_policies(seed_scenario(days=2, size=128), POLICIES, progress=False, out=out)
    summaries = json.loads((out / "summary.json").read_text())
    return out, summaries, (out / "report.html").read_text(encoding="utf-8")


def test_the_abandoned_sentence_splits_by_kind_as_the_tables_do(
    seed_run_two_days: Run,
) -> None:
    """Where fair share abandons more, the sentence's split into allocated and unallocated
    work matches the workloads tables of both policies."""
    out, summaries, text = seed_run_two_days
    why = parse(text).why
    assert summaries[0]["abandoned"]["count"] > summaries[1]["abandoned"]["count"]
    (text_ab,) = [w for w in why if w.startswith("Fair share abandoned more")]
    fs_alloc, fs_unalloc = _abandoned_by_kind(out, "fairshare")
    lg_alloc, _ = _abandoned_by_kind(out, "legacy")
    assert (f"{fmt_num(fs_unalloc)} of them were unallocated work" in text_ab
            and f"it abandoned {fmt_num(fs_alloc)}, legacy {fmt_num(lg_alloc)}" in text_ab)


def test_no_sentence_when_fair_share_is_not_worse(seed_run: Run) -> None:
    """With the summaries changed so fair share is better on abandoned work, lost GPU-hours
    and preemptions, none of those sentences is written (same tables)."""
    out, summaries, _ = seed_run
    fs, lg = (json.loads(json.dumps(s)) for s in summaries)
    fs["abandoned"]["count"] = lg["abandoned"]["count"] - 1
    fs["lost_gpu_hours"] = lg["lost_gpu_hours"] / 2
    fs["preemptions"]["total"] = lg["preemptions"]["total"] - 1
    runs: list[RunTables] = [load_tables(out, p) for p in POLICIES]
    notes = worse_notes([fs, lg], runs)
    assert "headline" not in notes and "preempt" not in notes


def test_the_occupancy_sentence_ends_with_one_full_stop(seed_run: Run) -> None:
    """With fair share keeping fewer GPUs busy (the summaries changed), the occupancy
    sentence splits the difference into allocated and unallocated work and ends with one
    full stop (it ended with "GPUs).." before)."""
    out, summaries, _ = seed_run
    fs, lg = (json.loads(json.dumps(s)) for s in summaries)
    fs["occupancy"], lg["occupancy"] = 0.8, 0.9
    fs["unallocated_fraction"], lg["unallocated_fraction"] = 0.05, 0.2
    runs: list[RunTables] = [load_tables(out, p) for p in POLICIES]
    (sentence,) = [w for w in worse_notes([fs, lg], runs)["occupancy"]
                   if w.startswith("Fair share kept fewer")]
    assert sentence == ("Fair share kept fewer of the healthy GPUs busy (80.0% vs 90.0%); the "
                        "difference is in unallocated work (allocated 76.0% vs 72.0% of the "
                        "healthy GPUs).")


def test_a_team_of_one_researcher_is_said_in_the_singular(tmp_path: Path) -> None:
    """The per-team folds of the budget table count researchers with the plural helper:
    ai/llm (one leaf) is "1 researcher", ai/vision (two) "2 researchers" (it said
    "1 researchers")."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration\n"
                     "a,0,ai/llm/alice,1,3600\nb,0,ai/vision/bob,1,3600\n"
                     "c,0,ai/vision/carol,1,3600\n")
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--cluster", "1x8", "--days", "0.2", "--quiet",
        "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    assert re.findall(r"<summary>([^<]*)</summary>", text) == [
        "ai/llm: 1 researcher", "ai/vision: 2 researchers"]


def test_one_policy_has_no_comparison(tmp_path: Path) -> None:
    """A run of fair share alone: one result column, the reference column, every figure,
    and no sentence comparing with legacy."""
    run_policies(seed_scenario(days=1, size=64), ["fairshare"], progress=False, out=tmp_path)
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert table(text, "headline")[0] == ["metric", "fairshare", REFERENCE_HEADING]
    assert list(figures(text)) == list(FIGURES)
    assert parse(text).why == []


def test_report_survives_missing_tables(seed_run: Run, tmp_path: Path) -> None:
    """With only the summaries, the report still renders its tables, names the missing
    files, and draws the attainment bars from the summaries alone."""
    _, summaries, _ = seed_run
    text = write_report(tmp_path, summaries).read_text(encoding="utf-8")
    assert "workloads-fairshare.csv" in text and "cluster_hours-legacy.csv" in text
    assert list(figures(text)) == ["attain"]
    assert headline(text)["occupancy"][0] == fmt_pct(summaries[0]["occupancy"])


def test_the_title_gives_a_span_of_any_length_to_two_decimals(
        seed_run: Run, tmp_path: Path) -> None:
    """A replayed history's span is any float: 3.083631805772031 days is titled '3.08 days'
    (it was written out whole); the seed run's 3 days stay '3 days'."""
    _, summaries, text = seed_run
    assert "<h1>apportion simulation: seed, 3 days, 128 GPUs on 16 hosts</h1>" in text
    history = [{**summaries[0], "scenario": "history", "sim_days": 3.083631805772031}]
    text = write_report(tmp_path, history).read_text(encoding="utf-8")
    assert "<h1>apportion simulation: history, 3.08 days, 128 GPUs on 16 hosts</h1>" in text


def test_chart_budgets_rank_by_gpu_hours_delivered_over_both_runs_ties_by_name() -> None:
    """Four top-level budgets of equal share: fair share delivered a 1, b 9, c 2, d 0 and
    legacy a 1, b 0, c 7, d 2 GPU-hours (a child of b, one level down, 50: not counted).
    Summed over both runs b and c have 9, a and d 2: the order is b, c, a, d (by use, ties
    by name), not by share and name (a, b, c, d), nor by one run alone."""
    def run(policy: str, delivered: dict[str, float]) -> RunTables:
        names = [*delivered, "b/x"]
        return RunTables(policy, budget_hours={
            "hour": np.zeros(len(names)),
            "budget": np.array(names, dtype=str),
            "depth": np.array([1.0] * len(delivered) + [2.0]),
            "share": np.array([0.25] * len(delivered) + [0.25]),
            "delivered": np.array([*delivered.values(), 50.0]),
        })

    runs = [run("fairshare", {"a": 1.0, "b": 9.0, "c": 2.0, "d": 0.0}),
            run("legacy", {"a": 1.0, "b": 0.0, "c": 7.0, "d": 2.0})]
    assert chart_budgets(runs, 1) == ["b", "c", "a", "d"]


def test_more_budgets_than_colours_fold_into_one_band(tmp_path: Path) -> None:
    """A trace with 20 budgets: the budget-time figure draws the 15 biggest in 15 distinct
    colours and the other 5 as one band, so no colour stands for two budgets; the usage-ratio
    figure draws the same 15 in the same colours."""
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(DATA / "itp" / "cluster10.csv"), "--format", "itp",
        "--budgets", "20", "--cluster", "4x8", "--days", "10", "--policy", "fairshare",
        "--quiet", "--out", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    figs = figures((tmp_path / "report.html").read_text(encoding="utf-8"))
    band_colors = shape_colors(figs["budgets"])
    assert len(band_colors & set(BUDGET_COLORS)) == 15
    assert OTHER_COLOR in band_colors
    assert "5 other budgets" in {t.text for t in texts(figs["budgets"])}
    assert shape_colors(figs["ratio"]) & set(BUDGET_COLORS) == band_colors & set(BUDGET_COLORS)


def test_no_worse_sentence_over_figures_that_read_the_same(seed_run: Run) -> None:
    """Where fair share is worse only below what the sentence shows, no sentence says it
    is worse: lost GPU-hours 0.0004 against 0.0001 ("lost more GPU-hours to preemption (0
    vs 0)") and occupancy 13.201% against 13.204% ("kept fewer of the healthy GPUs busy
    (13.2% vs 13.2%)"), as the waits' sentences already compare what they show."""
    out, summaries, _ = seed_run
    fs, lg = (json.loads(json.dumps(s)) for s in summaries)
    fs["lost_gpu_hours"], lg["lost_gpu_hours"] = 0.0004, 0.0001
    fs["occupancy"], lg["occupancy"] = 0.13201, 0.13204
    runs: list[RunTables] = [load_tables(out, p) for p in POLICIES]
    notes = worse_notes([fs, lg], runs)
    said = [w for ws in notes.values() for w in ws]
    assert not [w for w in said if w.startswith(("Fair share lost more GPU-hours",
                                                 "Fair share kept fewer"))], said


def test_the_title_gives_a_span_under_a_day_as_a_duration(seed_run: Run, tmp_path: Path) -> None:
    """A replay shorter than a day (an exported trace of a quarter of an hour, 0.01 days;
    of 1.7 minutes, 0.0012 days) is titled with its duration, '14 min 24 s' and '1 min 44
    s', not '0.01 days' and '0 days' (rounded to two decimals, a short replay read as
    nothing)."""
    _, summaries, _ = seed_run
    for days, said in ((0.01, "14 min 24 s"), (0.0012, "1 min 44 s")):
        run = [{**summaries[0], "scenario": "t", "sim_days": days}]
        text = write_report(tmp_path, run).read_text(encoding="utf-8")
        assert f"<h1>apportion simulation: t, {said}, 128 GPUs on 16 hosts</h1>" in text


def test_a_long_budget_name_neither_widens_the_headline_nor_squeezes_the_plots(
        tmp_path: Path) -> None:
    """A trace's team named with 100 characters, and one with 300: in the attainment figure
    no line of their labels is longer than LABEL_WIDTH characters (a label as wide as its
    name squeezed the bars to nothing); the 100-character name is there whole, over three
    lines, and the 300-character one by its start and end around a '…'. In the headline the
    worst team's name is in a span the CSS lets wrap anywhere (the cell's no-wrap pushed the
    legacy column off the page)."""
    mid, huge = "lab/" + "r" * 96, "ops/" + "x" * 148 + "y" * 148
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration\n"
                     f"a,0,{mid},8,7200\nb,0,{huge},8,7200\nc,0,lab/short,8,7200\n")
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--cluster", "1x8", "--days", "0.2", "--quiet",
        "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    lines = [t.text or "" for t in texts(figures(text)["attain"])]
    names = [line for line in lines if any(c * 3 in line for c in "rxy")]
    assert len(names) == 6 and max(len(line) for line in names) <= LABEL_WIDTH
    joined = "".join(lines)
    assert mid in joined
    assert huge not in joined and "ops/xxxx" in joined and "yyyy" in joined and "…" in joined
    worst = re.search(r"<span class='name'>([^<]*)</span>", text)
    assert worst is not None and worst.group(1) in (mid, huge, "lab/short")
    assert ".name{white-space:normal}" in text
    assert re.search(r"\.name,[^{]*\{overflow-wrap:anywhere\}", text)


def test_a_budget_name_in_a_script_the_plot_font_lacks_is_written_without_a_warning(
        tmp_path: Path) -> None:
    """A trace whose team is named in Japanese (``研究/チーム``): the run succeeds with
    nothing on stderr about missing glyphs (matplotlib warned once per character, naming a
    line of report.py, though the SVG keeps the name as text for the browser to draw), and
    the attainment figure holds the name as text."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration\n"
                     "a,0,研究/チーム/alice,1,600\nb,0,ops/x,1,600\n", encoding="utf-8")
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--cluster", "1x8", "--days", "0.2", "--quiet",
        "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "Glyph" not in result.output
    text = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    assert "研究/チーム" in {t.text for t in texts(figures(text)["attain"])}


def test_a_wait_curve_of_work_that_all_started_at_once_is_drawn_along_the_top(
        tmp_path: Path) -> None:
    """A trace whose every workload starts the moment it is submitted: each policy's curve
    in the waits figure runs from the left edge to the right one at 100%, over the frame
    (unclipped), not as a vertical line hidden in the left spine, which left the panel
    looking empty beside a headline of 0 s waits."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration\na,0,ai/x,1,600\nb,60,ai/y,1,600\n")
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--cluster", "1x8", "--days", "0.2", "--quiet",
        "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    svg = figures((tmp_path / "o" / "report.html").read_text(encoding="utf-8"))["waits"]
    curves = [el for el in svg.iter() if el.tag == "path"  # lines, not the legend's patches
              and "fill: none" in (el.get("style") or "")
              and any(f"stroke: {c}" in (el.get("style") or "") for c in POLICY_COLORS.values())]
    assert len(curves) == 2 * len(POLICY_COLORS)  # both panels (all work is debug work here)
    for el in curves:
        xs = [float(x) for x in re.findall(r"[ML] (-?[\d.]+) ", el.get("d") or "")]
        assert max(xs) - min(xs) > 100, el.get("d")  # across the panel, not a point's width
        assert el.get("clip-path") is None


def test_the_automated_drains_figure_has_one_name_in_the_table_report_and_sim_page() -> None:
    """The share of drains finished with no human kill is called "drains automated (no
    human kill)" in the terminal table (``sim.run.ROWS``), the report's headline and the
    /sim page (``static/sim.js``); the table and the page called it "automated repairs",
    which reads as repairs of hosts, not drains that needed no kill."""
    from apportion.sim.report import _headline_rows
    from apportion.sim.run import ROWS

    name = "drains automated (no human kill)"
    assert [label for label, key, _ in ROWS if key == "drains.automated_fraction"] == [name]
    assert name in [label for label, _, _ in _headline_rows({})]
    page = (Path(__file__).parents[2] / "src" / "apportion" / "service" / "static"
            / "sim.js").read_text()
    assert '["Drains automated (no human kill)", "drains.automated_fraction"' in page
    assert "automated repairs" not in page.lower()
