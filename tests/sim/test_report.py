"""The HTML report: rendered from small hand-made tables in the documented layout."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest

from apportion.sim.report import write_report

# budget -> (depth, leaf, share)
NODES = {
    "a": (1, 0, 0.6),
    "a/x": (2, 0, 0.6),
    "a/x/u1": (3, 1, 0.4),
    "a/x/u2": (3, 1, 0.2),
    "b": (1, 0, 0.4),
    "b/y": (2, 0, 0.4),
    "b/y/u3": (3, 1, 0.4),
}
HOURS = 30
WORKLOAD_COLUMNS = [
    "id", "budget", "team", "user", "gpus", "min_runtime", "allocated", "debug", "resumable",
    "priority", "legacy_priority", "legacy_preemptible", "squat", "submit_time", "duration",
    "first_start", "end_time", "status", "runs", "preemptions", "wait_s", "first_wait_s",
    "run_gpu_hours", "lost_gpu_hours",
]


def _write(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _tables(out: Path, policy: str, scale: float) -> dict[str, Any]:
    """Write the three tables of one policy and return its summary. ``scale`` (0..1) shrinks
    what the budgets receive so the two policies differ."""
    rows = []
    for h in range(HOURS):
        for node, (depth, leaf, share) in NODES.items():
            owed = share * 32
            delivered = owed * scale
            rows.append([h, 1, node, depth, leaf, share, 32, owed * 2, owed, delivered,
                         min(owed, delivered), 2.0 if depth == 1 else 0.0, 0, owed * h,
                         scale])
    _write(out / f"budget_hours-{policy}.csv",
           ["hour", "span_h", "budget", "depth", "leaf", "share", "healthy_gpus", "asked",
            "owed", "delivered", "attained", "free", "squat", "window_charged",
            "usage_ratio"], rows)
    _write(out / f"cluster_hours-{policy}.csv",
           ["hour", "span_h", "total_gpus", "healthy_gpus", "assigned", "allocated",
            "unallocated", "squat", "pending", "running", "starts", "preemptions"],
           [[h, 1, 32, 32 if h % 10 else 24, 32 * scale, 28 * scale, 4, 0, 5 + h % 3, 6, 3,
             h % 4] for h in range(HOURS)])
    wl = []
    for i in range(40):
        debug = i % 3 == 0
        wait = float(i * 37 % 5000) * (1 if policy == "fairshare" else 4)
        started = i % 11 != 0
        wl.append([f"w{i}", "a/x/u1" if i % 2 else "b/y/u3", "a/x" if i % 2 else "b/y", "u1",
                   4 if debug else 8, 600 if debug else 3600, 1, int(debug), 1, 0, "high", 1, 0,
                   i * 100.0, 1800.0, i * 100.0 + wait if started else "", "",
                   "completed" if started else "pending", 1, 0, wait if started else "",
                   wait if started else "", 1.0, 0.0])
    _write(out / f"workloads-{policy}.csv", WORKLOAD_COLUMNS, wl)
    return {
        "policy": policy, "scenario": "handmade", "seed": 3, "sim_days": HOURS / 24,
        "hosts": 4, "gpus": 32, "workloads": 40, "rejected": 0, "completed": 36,
        "unfinished": {"pending": 4, "running": 0},
        "abandoned": {"count": 17 if policy == "legacy" else 3, "gpu_hours_requested": 321.0,
                      "debug": 9 if policy == "legacy" else 0,
                      "per_budget": {"b/y": 2, "b/y/u3": 2}},
        "outstanding_ratio": {"mean": 2.4142, "p10": 1.5, "p50": 2.5, "p90": 3.25},
        "occupancy": 0.9731 * scale, "unallocated_fraction": 0.1234, "availability": 0.9512,
        "attainment": {"overall": scale, "min": scale * 0.9, "min_budget": "b/y",
                       "min_leaf": scale * 0.8, "min_leaf_budget": "b/y/u3", "teams": 2,
                       "teams_ge_95": 2 if scale > 0.97 else 0,
                       "per_budget": {n: scale for n in NODES}},
        "wait_s": {"all": {"p50": 24.0, "p90": 6480.0, "p99": 20000.0, "n": 36},
                   "debug": {"p50": 3.0, "p90": 30.0, "p99": 90.0, "n": 12},
                   "per_budget": {"a/x": {"p50": 20.0, "p90": 100.0, "p99": 200.0, "n": 18}}},
        "preemptions": {"unallocated": 7, "rebalance": 5, "drain": 2, "host_failure": 1,
                        "total": 15},
        "protected_preemptions": 0, "lost_gpu_hours": 12.5, "restart_overhead_gpu_hours": 1.0,
        "squat_gpu_hours": 3.0,
        "drains": {"count": 3, "finished": 3, "p90_time_to_drain_s": 7200.0,
                   "automated_fraction": 1.0, "human_kills": 0},
        "host_failures": 1, "priority_inflation": {"high_or_urgent_share": 0.77},
        "wall_s": 1.5,
    }


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """One report of two policies, rendered once for the tests that only read it."""
    out = tmp_path_factory.mktemp("report")
    summaries = [_tables(out, "fairshare", 0.99), _tables(out, "legacy", 0.7)]
    path = write_report(out, summaries, scenario_meta={"submitted_supply_ratio": 2.5})
    return out, path, path.read_text(encoding="utf-8")


def test_report_is_written_to_out_dir(two: tuple[Path, Path, str]) -> None:
    """write_report writes out_dir/report.html and returns that path."""
    out, path, text = two
    assert path == out / "report.html"
    assert text.startswith("<!DOCTYPE html>")


def test_report_references_nothing_outside_the_file(two: tuple[Path, Path, str]) -> None:
    """No script, stylesheet, font, image or URL: the report opens offline."""
    text = two[2]
    lower = text.lower()
    assert "<script" not in lower
    assert "<link" not in lower
    assert "<img" not in lower
    assert "@import" not in lower
    assert "url(http" not in lower
    assert "http://" not in lower and "https://" not in lower
    # every url(...) in the SVGs points inside the document
    assert all(ref.startswith("#") for ref in re.findall(r"url\(([^)]*)\)", text))


def test_report_holds_the_plots_inline(two: tuple[Path, Path, str]) -> None:
    """The waits, attainment, budget-time, usage-ratio, occupancy and preemption plots are
    inline SVG, with ids unique across the document."""
    text = two[2]
    assert text.count("<svg") == 6
    for heading in ("Waits", "Attainment per budget", "GPU time per budget over time",
                    "Usage ratio", "Occupancy over time", "Preemptions over time"):
        assert f"<h2>{heading}</h2><figure><svg" in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def test_report_shows_the_headline_numbers(two: tuple[Path, Path, str]) -> None:
    """The headline table shows each policy's figures, formatted, side by side."""
    text = two[2]
    assert "<th>fairshare</th>" in text and "<th>legacy</th>" in text
    assert "96.3%" in text  # fairshare occupancy 0.9731 x 0.99
    assert "68.1%" in text  # legacy occupancy 0.9731 x 0.7
    assert "12.3%" in text  # unallocated fraction
    assert "95.1%" in text  # availability
    assert "24 s / 1.8 h / 5.6 h" in text  # waits, all
    assert "3 s / 30 s / 1.5 min" in text  # waits, debug
    assert "12.5" in text  # lost GPU-hours
    assert "2 of 2" in text and "0 of 2" in text  # teams at >= 95%


def test_report_shows_outstanding_demand_and_abandoned_work(
        two: tuple[Path, Path, str]) -> None:
    """The headline table shows the outstanding-demand ratio (mean, p10, p90) and the
    abandoned counts per policy; the budget table counts abandoned work per team."""
    text = two[2]
    assert "2.41x (1.50x / 3.25x)" in text
    assert "<td>3 / 0</td><td>17 / 9</td>" in text
    assert "<th>legacy abandoned</th>" in text
    row = re.search(r"<tr class='team'><th[^>]*>b/y</th>(.*?)</tr>", text)
    assert row is not None and row.group(1).endswith("<td>2</td><td>2</td>")


def test_report_lists_attainment_at_every_level(two: tuple[Path, Path, str]) -> None:
    """Every node of the budget tree appears in the attainment tables, with its share."""
    text = two[2]
    for node in NODES:
        assert f">{node}</th>" in text
    assert "60.00%" in text  # share of program a


def test_report_shows_the_scenario_calibration(two: tuple[Path, Path, str]) -> None:
    """Scenario meta given to write_report is shown."""
    text = two[2]
    assert "submitted_supply_ratio" in text and "2.5" in text


def test_report_works_for_one_policy(tmp_path: Path) -> None:
    """A single policy gives a report with one result column and all its plots."""
    summary = _tables(tmp_path, "fairshare", 0.99)
    text = write_report(tmp_path, [summary]).read_text(encoding="utf-8")
    assert "<th>fairshare</th>" in text and "<th>legacy</th>" not in text
    assert text.count("<svg") == 6


def test_report_survives_missing_tables(tmp_path: Path) -> None:
    """With only the summary, the report still renders its tables and says what is missing."""
    summary = _tables(tmp_path, "fairshare", 0.99)
    for f in tmp_path.glob("*.csv"):
        f.unlink()
    text = write_report(tmp_path, [summary]).read_text(encoding="utf-8")
    assert "workloads-fairshare.csv" in text
    assert "<svg" in text  # attainment bars come from the summary alone
    assert "96.3%" in text
