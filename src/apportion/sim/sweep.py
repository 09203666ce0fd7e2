"""Run the fair-share policy over a grid of settings in parallel processes and chart the
trade-offs (sweep.csv, sweep.json, sweep.png, sweep.svg)."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from apportion.core import PolicyConfig

from .engine import Engine, SimConfig
from .model import Scenario
from .run import _dur, _get, _pct, make_policy, write_csv

METRICS: tuple[tuple[str, str], ...] = (
    ("attainment_overall", "attainment.overall"),
    ("attainment_teams", "attainment.overall_teams"),
    ("attainment_min", "attainment.min"),
    ("teams_ge_95", "attainment.teams_ge_95"),
    ("occupancy", "occupancy"),
    ("unallocated_fraction", "unallocated_fraction"),
    ("availability", "availability"),
    ("wait_p50_s", "wait_s.all.p50"),
    ("wait_p90_s", "wait_s.all.p90"),
    ("wait_p99_s", "wait_s.all.p99"),
    ("debug_wait_p50_s", "wait_s.debug.p50"),
    ("debug_wait_p90_s", "wait_s.debug.p90"),
    ("debug_wait_p99_s", "wait_s.debug.p99"),
    ("preemptions", "preemptions.total"),
    ("protected_preemptions", "protected_preemptions"),
    ("lost_gpu_hours", "lost_gpu_hours"),
    ("drain_p90_s", "drains.p90_time_to_drain_s"),
    ("automated_fraction", "drains.automated_fraction"),
    ("wall_s", "wall_s"),
    ("events", "events"),
)

_SCENARIO: Scenario | None = None  # set once per worker process


def _init(scenario: Scenario) -> None:
    global _SCENARIO
    _SCENARIO = scenario


def _split(settings: dict[str, Any]) -> tuple[PolicyConfig, SimConfig]:
    policy_keys = set(PolicyConfig.__dataclass_fields__)
    return (
        PolicyConfig(**{k: v for k, v in settings.items() if k in policy_keys}),
        SimConfig(**{k: v for k, v in settings.items() if k not in policy_keys}),
    )


def run_one(settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """One fair-share run of the worker's scenario with ``settings``; its summary."""
    assert _SCENARIO is not None, "worker not initialised"
    config, sim = _split(settings)
    engine = Engine(_SCENARIO, make_policy("fairshare", _SCENARIO, sim), config,
                    name="fairshare", sim=sim, seed=seed)
    return engine.run().summary


def combinations(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the axes' values, first axis slowest."""
    keys = list(axes)
    return [dict(zip(keys, values, strict=True))
            for values in itertools.product(*(axes[k] for k in keys))]


def run_sweep(
    scenario: Scenario,
    base: dict[str, Any],
    axes: Mapping[str, Sequence[Any]],
    out: Path,
    jobs: int = 2,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run every combination (on ``jobs`` processes), write the outputs, return the rows."""
    combos = combinations(axes)
    summaries: list[dict[str, Any] | None] = [None] * len(combos)
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(combos), desc="sweep", unit="run", file=sys.stderr, leave=False)
    if jobs == 1:
        _init(scenario)
        for i, combo in enumerate(combos):
            summaries[i] = run_one({**base, **combo}, seed)
            if bar is not None:
                bar.update(1)
    else:
        # fork: workers inherit the scenario instead of unpickling it (the compiled core's
        # classes cannot be pickled, and a 30-day scenario is large)
        with ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=(scenario,),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(run_one, {**base, **c}, seed): i for i, c in enumerate(combos)}
            for fut in as_completed(futures):
                summaries[futures[fut]] = fut.result()
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    rows = []
    for combo, summary in zip(combos, summaries, strict=True):
        assert summary is not None
        row: dict[str, Any] = dict(combo)
        row.update({name: _get(summary, path) for name, path in METRICS})
        row["summary"] = summary
        rows.append(row)
    write_sweep(out, rows, list(axes))
    return rows


def write_sweep(out: Path, rows: list[dict[str, Any]], keys: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    columns = [*keys, *(name for name, _ in METRICS)]
    write_csv(out / "sweep.csv", columns, ([row[c] for c in columns] for row in rows))
    (out / "sweep.json").write_text(json.dumps(rows, indent=2) + "\n")
    plot_sweep(out, rows, keys)


def plot_sweep(out: Path, rows: list[dict[str, Any]], keys: list[str]) -> None:
    """Four panels against the first grid key, one line per combination of the others."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key, others = keys[0], keys[1:]
    xs = list(dict.fromkeys(row[x_key] for row in rows))
    numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs)
    # durations are seconds: show them in hours when they are whole hours
    scale, unit = (3600.0, " (h)") if numeric and all(
        x >= 3600 and float(x) % 3600 == 0 for x in xs) else (1.0, "")
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in others), []).append(row)
    panels = (
        ("attainment (overall solid, worst team dashed)",
         ("attainment_overall", "attainment_min"), False),
        ("debug wait p90 (s)", ("debug_wait_p90_s",), True),
        ("occupancy (solid), unallocated fraction (dashed)",
         ("occupancy", "unallocated_fraction"), False),
        ("lost GPU-hours", ("lost_gpu_hours",), False),
    )
    fig, axs = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (title, metrics, log) in zip(axs.flat, panels, strict=True):
        for n, (label, members) in enumerate(groups.items()):
            members = sorted(members, key=lambda r: xs.index(r[x_key]))
            px = [r[x_key] / scale if numeric else xs.index(r[x_key]) for r in members]
            name = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in zip(others, label, strict=True)) or "fairshare"
            for style, metric in zip(("-", "--"), metrics, strict=False):
                py = [r[metric] if r[metric] is not None else float("nan") for r in members]
                ax.plot(px, py, style, marker="o", color=f"C{n % 10}",
                        label=name if style == "-" else None)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(x_key + unit)
        if not numeric:
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
        if log:  # symlog: a wait of 0 s (every debug job started at once) is a valid point
            ax.set_yscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
    if groups and len(groups) > 1:
        axs.flat[0].legend(fontsize=8)
    fig.suptitle("apportion sweep: fair-share trade-offs")
    fig.tight_layout()
    fig.savefig(out / "sweep.png", dpi=110)
    fig.savefig(out / "sweep.svg")
    plt.close(fig)


def format_sweep(rows: list[dict[str, Any]], keys: list[str]) -> str:
    """The sweep as a text table, one line per combination."""
    cols = [*keys, "attain", "teams", "worst team", "occupancy", "unalloc", "wait p90", "debug p90",
            "preempt", "lost GPU-h", "wall"]
    lines = [cols]
    for r in rows:
        lines.append([
            *[f"{r[k]:g}" if isinstance(r[k], float) else str(r[k]) for k in keys],
            _pct(r["attainment_overall"]), _pct(r["attainment_teams"]),
            _pct(r["attainment_min"]), _pct(r["occupancy"]),
            _pct(r["unallocated_fraction"]), _dur(r["wait_p90_s"]), _dur(r["debug_wait_p90_s"]),
            f"{r['preemptions']:,}", f"{r['lost_gpu_hours']:,.0f}", f"{r['wall_s']:.1f}s",
        ])
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))
                     for line in lines)
