"""Run one or several policies on the same scenario and write the outputs
(summary.json, per-workload, per-budget-hour and per-cluster-hour tables, report.html).
Schemas: docs/simulator.md."""

from __future__ import annotations

import csv
import importlib
import json
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import click

from apportion.core import SIZE_CLASSES, PolicyConfig, PreemptReason, decide, format_duration

from .engine import WORKLOAD_COLUMNS, Engine, Policy, RunResult, SimConfig, peak_memory_mb
from .legacy import LegacyPolicy
from .metrics import BUDGET_HOUR_COLUMNS, CLUSTER_HOUR_COLUMNS
from .model import Scenario

POLICIES = ("fairshare", "legacy")
RUN_FILES = ("summary.json", "report.html")  # one per run, unlike the per-policy tables


def make_policy(name: str, scenario: Scenario, sim: SimConfig) -> Policy:
    """The policy function called ``name``: core's ``decide`` or the legacy model."""
    if scenario.pools is not None:  # several clusters and kinds
        from .fleet import FleetFairShare, FleetLegacy

        if name == "fairshare":
            return FleetFairShare()
        if name == "legacy":
            return FleetLegacy(scenario, sim.legacy_team_depth, sim.legacy_cap_factor)
    if name == "fairshare":
        return partial(decide, reasons=False)  # the simulator never asks why work waits
    if name == "legacy":
        return LegacyPolicy(
            {j.spec.id: j for j in scenario.jobs}, scenario.tree,
            sum(h.gpus for h in scenario.hosts),
            team_depth=sim.legacy_team_depth, cap_factor=sim.legacy_cap_factor,
        )
    raise ValueError(f"policy: unknown policy {name!r} (choose from {', '.join(POLICIES)})")


def run_policies(
    scenario: Scenario,
    policies: Sequence[str] = POLICIES,
    config: PolicyConfig | None = None,
    seed: int = 0,
    progress: bool = True,
    sim: SimConfig | None = None,
    out: Path | None = None,
    keep_log: bool = False,
    keep_tables: bool = True,
) -> list[RunResult]:
    """Run each policy on the identical scenario; write the outputs to ``out`` if given.

    With ``out``, each run's tables are written as soon as it ends; ``keep_tables=False``
    then drops them from its :class:`RunResult` (empty lists), so the next run and the
    report reuse their memory. Every summary's ``peak_memory_mb`` is then the process's peak
    over the whole call, outputs included (see docs/simulator.md)."""
    config = config or PolicyConfig()
    sim = sim or SimConfig()
    results = []
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        remove_run_files(out)
    for name in policies:
        engine = Engine(
            scenario, make_policy(name, scenario, sim), config, name=name, sim=sim, seed=seed,
            progress=progress, keep_log=keep_log,
        )
        result = engine.run()
        result.summary = with_time_origin(result.summary, scenario)
        del engine  # its state and indexes: only the result is kept
        if out is not None:
            write_tables(out, result)
            if not keep_tables:
                result.workloads, result.budget_hours, result.cluster_hours = [], [], []
        results.append(result)
    if out is not None:
        write_outputs(out, results, scenario, tables=False)
    return results


def with_time_origin(summary: dict[str, Any], scenario: Scenario) -> dict[str, Any]:
    """``summary`` with ``time_origin`` after ``scenario``: the wall-clock time of the run's
    0 as ISO 8601 in UTC (``2024-03-01T09:00:00+00:00``) for a trace of wall-clock times,
    else None (the engine's own figures are left as they are)."""
    origin = (None if scenario.time_origin is None
              else datetime.fromtimestamp(scenario.time_origin, UTC).isoformat())
    out: dict[str, Any] = {}
    for key, value in summary.items():
        out[key] = value
        if key == "scenario":
            out["time_origin"] = origin
    return out


# ---- outputs -------------------------------------------------------------------------
def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(round(value, 6)) if math.isfinite(value) else ""
    return value


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for row in rows:
            w.writerow([_cell(v) for v in row])


def shows_published_reference(scenario: Scenario) -> bool:
    """Whether the report puts the published rollout figures next to the results: only for
    the built-in seed scenario, which models that rollout (a trace, even one named "seed",
    carries its ``source`` in ``meta``)."""
    return scenario.name == "seed" and "source" not in scenario.meta


def write_tables(out: Path, r: RunResult) -> None:
    """The per-policy tables of one run: workloads-P.csv, budget_hours-P.csv and
    cluster_hours-P.csv."""
    write_csv(out / f"workloads-{r.policy}.csv", WORKLOAD_COLUMNS,
              ([row[c] for c in WORKLOAD_COLUMNS] for row in r.workloads))
    write_csv(out / f"budget_hours-{r.policy}.csv", BUDGET_HOUR_COLUMNS, r.budget_hours)
    write_csv(out / f"cluster_hours-{r.policy}.csv", CLUSTER_HOUR_COLUMNS, r.cluster_hours)


def write_outputs(out: Path, results: Sequence[RunResult],
                  scenario: Scenario | None = None, tables: bool = True) -> None:
    """The per-policy tables (unless ``tables`` is False: already written), summary.json,
    report.html, then summary.json again, its ``peak_memory_mb`` now the process's peak
    over every run and every output, summary.json's own few kilobytes aside. summary.json
    comes first so that a report that fails leaves it beside the tables; a report writer
    that cannot be imported is an error (``click.ClickException``), never a silent skip."""
    out.mkdir(parents=True, exist_ok=True)
    summaries = [r.summary for r in results]
    if tables:
        remove_run_files(out)
        for r in results:
            write_tables(out, r)
    write_summary(out, summaries)
    try:  # imported here: matplotlib is slow to load and only the report needs it
        report = importlib.import_module("apportion.sim.report")
    except ImportError as e:
        raise click.ClickException(
            f"{out / 'report.html'}: cannot write the report: {e} (the tables and "
            "summary.json are written; reinstall apportion with its dependencies)"
        ) from None
    report.write_report(
        out, summaries, scenario_meta=scenario.meta if scenario is not None else None,
        reference=scenario is not None and shows_published_reference(scenario))
    write_summary(out, summaries)


def remove_run_files(out: Path) -> None:
    """Remove an earlier run's summary.json and report.html from ``out``: they would describe
    that run beside this run's tables if this one stopped before writing its own."""
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)


def write_summary(out: Path, summaries: Sequence[dict[str, Any]]) -> None:
    """summary.json, each ``peak_memory_mb`` set to the process's peak so far (the figure
    of the whole command: the same in every entry)."""
    peak = peak_memory_mb()
    for s in summaries:
        s["peak_memory_mb"] = peak
    (out / "summary.json").write_text(json.dumps(list(summaries), indent=2) + "\n")


# ---- terminal table --------------------------------------------------------------------
def _get(summary: dict[str, Any], path: str) -> Any:
    value: Any = summary
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _dur(v: Any) -> str:
    return "-" if v is None else format_duration(float(v))


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"


def _ratio(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _p50_p90(v: Any) -> str:
    if not isinstance(v, dict) or not v.get("n"):
        return "-"
    return f"{_dur(v.get('p50'))} / {_dur(v.get('p90'))}"


def _spread(v: Any) -> str:
    if not isinstance(v, dict):
        return "-"
    return f"{_ratio(v.get('p10'))} / {_ratio(v.get('p90'))}"


ROWS: tuple[tuple[str, str, Any], ...] = (
    ("workloads", "workloads", _num),
    ("  rejected (too large or invalid)", "rejected", _num),
    ("outstanding / healthy (mean)", "outstanding_ratio.mean", _ratio),
    ("  p10 / p90", "outstanding_ratio", _spread),
    ("abandoned", "abandoned.count", _num),
    ("  debug", "abandoned.debug", _num),
    ("pending at the end", "unfinished.pending", _num),
    ("attainment overall (researchers)", "attainment.overall", _pct),
    ("attainment overall (teams)", "attainment.overall_teams", _pct),
    ("attainment min (team)", "attainment.min", _pct),
    ("teams >= 95%", "attainment.teams_ge_95", _num),
    ("occupancy", "occupancy", _pct),
    ("unallocated fraction", "unallocated_fraction", _pct),
    ("availability", "availability", _pct),
    ("wait p50", "wait_s.all.p50", _dur),
    ("wait p90", "wait_s.all.p90", _dur),
    ("wait p99", "wait_s.all.p99", _dur),
    ("debug wait p50", "wait_s.debug.p50", _dur),
    ("debug wait p90", "wait_s.debug.p90", _dur),
    *(
        (f"wait p50 / p90, {c} GPU{'' if c == '1' else 's'}", f"wait_s.by_size.{c}", _p50_p90)
        for c in SIZE_CLASSES
    ),
    ("preemptions", "preemptions.total", _num),
    ("  unallocated", "preemptions.unallocated", _num),
    ("  rebalance", "preemptions.rebalance", _num),
    ("  drain", "preemptions.drain", _num),
    ("  host failure", "preemptions.host_failure", _num),
    ("protected preemptions", "protected_preemptions", _num),
    ("preemptions / 1,000 GPU-h", "preemptions_per_1000_gpu_hours", _num),
    ("lost GPU-hours", "lost_gpu_hours", _num),
    *(
        (f"  lost: {r.value.replace('_', ' ')}", f"lost_gpu_hours_by_reason.{r.value}", _num)
        for r in PreemptReason
    ),
    ("squat GPU-hours", "squat_gpu_hours", _num),
    ("drains", "drains.count", _num),
    ("drain p90", "drains.p90_time_to_drain_s", _dur),
    ("drains automated (no human kill)", "drains.automated_fraction", _pct),
    ("events", "events", _num),
    ("wall", "wall_s", lambda v: "-" if v is None else f"{v:.2f}s"),
    ("cpu", "cpu_s", lambda v: "-" if v is None else f"{v:.2f}s"),
    ("peak memory MB", "peak_memory_mb", _num),
)


def format_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A side-by-side text table of the main figures of each policy."""
    header = ["", *[str(s["policy"]) for s in summaries]]
    rows = [header] + [
        [label, *[fmt(_get(s, path)) for s in summaries]] for label, path, fmt in ROWS
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(
            r[i].ljust(widths[i]) if i == 0 else r[i].rjust(widths[i]) for i in range(len(r))
        ).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
