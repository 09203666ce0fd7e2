"""Run the fair-share policy over a grid of settings and seeds, in parallel processes on this
host or as tasks on a Ray cluster, and chart the trade-offs (sweep.csv, sweep.json,
sweep.png, sweep.svg).

A point is one (setting, seed): one fair-share run of the seed's scenario with the base
settings and the point's grid values. A point that fails is reported with its error (its
row keeps the grid values and the error, its figures are empty); the others go on.

Each point is written to ``points.jsonl`` in the output directory as it finishes, so a sweep
that stops half way (Ctrl-C, a time limit, a Ray cluster that goes away and takes the
driver with it) keeps what it ran: ``resume`` runs only the rest (:class:`Journal`)."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from apportion.core import PolicyConfig, format_duration
from apportion.core.config import policy_from

from .engine import Engine, SimConfig
from .model import Scenario
from .run import _get, _pct, make_policy, with_time_origin, write_csv

if TYPE_CHECKING:  # matplotlib is imported only when a sweep is plotted
    from matplotlib.figure import Figure

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
    ("rejected", "rejected"),
    ("wall_s", "wall_s"),
    ("events", "events"),
)

ENGINES = ("process", "ray")

#: summary -> the point's figures; ``run_point`` unless a caller brings its own
Runner = Callable[[Scenario, dict[str, Any], int], dict[str, Any]]

#: which scenario a point runs on: its seed, and the max_min_runtime its trace was imported
#: with (None: the seed's one scenario, whatever the cap)
ScenarioKey = tuple[int, float | None]


@dataclass(frozen=True, slots=True)
class Point:
    """One run of the sweep: the settings (base and grid values), the scenario's seed and
    the key of the scenario it runs on."""

    index: int
    settings: dict[str, Any]
    seed: int
    scenario: ScenarioKey


def split_settings(settings: dict[str, Any]) -> tuple[PolicyConfig, SimConfig]:
    """The policy and engine configs of one point's settings (raises on a bad value)."""
    policy_keys = set(PolicyConfig.__dataclass_fields__)
    return (
        policy_from({k: v for k, v in settings.items() if k in policy_keys}),
        SimConfig(**{k: v for k, v in settings.items() if k not in policy_keys}),
    )


def run_point(scenario: Scenario, settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """One fair-share run of ``scenario`` with ``settings``; its summary."""
    config, sim = split_settings(settings)
    engine = Engine(scenario, make_policy("fairshare", scenario, sim), config,
                    name="fairshare", sim=sim, seed=seed)
    return with_time_origin(engine.run().summary, scenario)


def describe(error: BaseException) -> str:
    """A failed point's error in one line: its type and message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


# ---- the process engine: forked workers on this host -----------------------------------
_SCENARIOS: Mapping[ScenarioKey, Scenario] = {}  # set once per worker process
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends


def _init(scenarios: Mapping[ScenarioKey, Scenario], parent: int) -> None:
    global _SCENARIOS
    _SCENARIOS = scenarios
    # a worker dies with the sweep, however it ends (SIGKILL by the OOM killer included):
    # it would otherwise run its points on, orphaned, and hold its memory
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the sweep ended before the line above took effect
        os._exit(1)
    # Ctrl-C reaches the whole process group: the parent handles it (it kills the workers);
    # a worker taking it would report its point as failed and go on to the next one
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the parent's SIGTERM handler (see :func:`_terminate_as_interrupt`) is not a worker's
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _run_in_worker(point: Point, runner: Runner) -> dict[str, Any]:
    return runner(_SCENARIOS[point.scenario], point.settings, point.seed)


def run_processes(
    scenarios: Mapping[ScenarioKey, Scenario], points: Sequence[Point], runner: Runner,
    jobs: int,
    done: Callable[[int, dict[str, Any] | None, str | None], None],
) -> None:
    """Run every point on ``jobs`` processes of this host; ``done(index, summary, error)``
    as each finishes."""
    if jobs == 1:
        for p in points:
            try:
                summary = runner(scenarios[p.scenario], p.settings, p.seed)
            except Exception as e:  # a failed point is reported; the others go on
                done(p.index, None, describe(e))
            else:
                done(p.index, summary, None)
        return
    # fork: workers inherit the scenarios instead of unpickling them (the compiled core's
    # classes cannot be pickled, and a 30-day scenario is large). A forking pool starts all
    # its workers at once: no more than there are points (--jobs 500 for 4 points forked 500)
    pool = ProcessPoolExecutor(max_workers=max(1, min(jobs, len(points))), initializer=_init,
                               initargs=(scenarios, os.getpid()),
                               mp_context=multiprocessing.get_context("fork"))
    try:
        futures = {pool.submit(_run_in_worker, p, runner): p.index for p in points}
        for fut in as_completed(futures):
            try:
                summary = fut.result()
            except Exception as e:  # the point's own error, or its worker died
                done(futures[fut], None, describe(e))
            else:
                done(futures[fut], summary, None)
    except BaseException:  # Ctrl-C: stop now, not after every queued point
        _stop(pool)
        raise
    pool.shutdown()


def _stop(pool: ProcessPoolExecutor) -> None:
    """Drop the queued points and kill the running ones (pure computation: nothing is lost
    but the run). The pool's processes are reachable only through its ``_processes``
    (``terminate_workers()`` came in Python 3.14)."""
    workers = list((pool._processes or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        proc.kill()
    for proc in workers:
        proc.join()


# ---- the sweep ----------------------------------------------------------------------------
def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a batch system's time limit) stops the sweep as Ctrl-C does: its
    workers killed and no table written, not the command killed with its workers running on.
    Only the main thread can take a signal; elsewhere SIGTERM is left as it is. (``ray.init``
    puts Ray's own handler in its place: the Ray engine's SIGTERM is Ray's.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def combinations(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the axes' values, first axis slowest."""
    keys = list(axes)
    return [dict(zip(keys, values, strict=True))
            for values in itertools.product(*(axes[k] for k in keys))]


class Journal:
    """The points of a sweep finished so far, one JSON line each in ``points.jsonl`` in the
    output directory, written as each finishes (a line and a flush: what a killed command
    wrote stays). The first line names the sweep (:func:`sweep_identity`): a resumed sweep
    keeps the points only if it is the same sweep. Only points that ran to the end are kept;
    a failed one runs again on resume (its error may have been the cluster's)."""

    NAME = "points.jsonl"

    def __init__(self, out: Path, identity: str, points: int, resume: bool) -> None:
        self.path = out / self.NAME
        self.done: dict[int, dict[str, Any]] = {}
        kept = self._read(identity, points)
        if resume:
            if kept is None:
                raise RuntimeError(f"--resume: {self.path} holds no points of this sweep "
                                   "(none was written, or it is of a sweep with other "
                                   "settings, grid, seeds or input); run without --resume")
            self.done = kept
        elif kept:
            print(f"warning: {self.path}: the {len(kept)} points an earlier run of this sweep "
                  "finished are run again (--resume would have kept them)", file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = self.path.open("w")
        self._write({"sweep": identity})
        for index, summary in sorted(self.done.items()):
            self._write({"point": index, "summary": summary})

    def _read(self, identity: str, points: int) -> dict[int, dict[str, Any]] | None:
        """The points kept for ``identity`` of its ``points`` (None: no journal of this
        sweep). A last line cut short (the command killed while writing it) is dropped: that
        point runs again."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return None
        records = []
        for number, line in enumerate(lines, 1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if number == len(lines):
                    break
                raise RuntimeError(f"{self.path}, line {number}: not a point of a sweep") from None
        if not records or records[0] != {"sweep": identity}:
            return None
        kept = {}
        for number, r in enumerate(records[1:], 2):
            index = r.get("point") if isinstance(r, dict) else None
            if (type(index) is not int or not 0 <= index < points
                    or not isinstance(r.get("summary"), dict)):
                raise RuntimeError(f"{self.path}, line {number}: not a point of this sweep (a "
                                   f"point's number, 0 to {points - 1}, and its summary)")
            kept[index] = r["summary"]
        return kept

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def record(self, index: int, summary: dict[str, Any]) -> None:
        self._write({"point": index, "summary": summary})

    def close(self) -> None:
        self._file.close()


def sweep_identity(scenarios: Mapping[ScenarioKey, Scenario], base: Mapping[str, Any],
                   axes: Mapping[str, Sequence[Any]]) -> str:
    """A digest of everything a sweep's figures depend on: every scenario (all its fields,
    as the Ray engine ships them), the base settings and the grid (its keys and values in
    order, which numbers the points)."""
    from .sweep_ray import pack  # no Ray import: plain data

    text = repr((sorted((repr(k), pack(sc)) for k, sc in scenarios.items()),
                 sorted(base.items()), [(k, list(v)) for k, v in axes.items()]))
    return hashlib.sha256(text.encode()).hexdigest()


def run_sweep(
    scenarios: Scenario | Mapping[int, Scenario | Mapping[float, Scenario]],
    base: dict[str, Any],
    axes: Mapping[str, Sequence[Any]],
    out: Path,
    jobs: int = 2,
    seed: int = 0,
    progress: bool = True,
    engine: str = "process",
    address: str | None = None,
    labels: Mapping[str, Mapping[Any, str]] | None = None,
    runner: Runner = run_point,
    resume: bool = False,
) -> list[dict[str, Any]]:
    """Run every (combination, seed) point, write the outputs, return the rows (grid values
    first axis slowest, then seeds). ``scenarios`` maps each seed to its scenario (a single
    scenario is run with ``seed``), or, for a trace swept over max_min_runtime, to its
    imports by cap: a point runs on the import at its own cap, the scenario ``simulate``
    with that setting runs (what an import makes of a minimum runtime depends on the cap,
    and so does what the summary counts as lowered). ``engine`` is ``process`` (``jobs``
    forked processes) or ``ray`` (a task per point on the cluster at ``address``, or
    RAY_ADDRESS, or a local one started for the sweep with ``jobs`` CPUs). ``labels`` give
    the grid values as the user typed them (``3d``), for the table and the plot. With
    ``resume``, the points a stopped run of the same sweep finished (its ``points.jsonl``,
    :class:`Journal`) are kept and only the others run."""
    if isinstance(scenarios, Scenario):
        scenarios = {seed: scenarios}
    if engine not in ENGINES:
        raise ValueError(f"engine: unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
    combos = combinations(axes)
    seeds = list(scenarios)
    by_key: dict[ScenarioKey, Scenario] = {}
    for s, of_seed in scenarios.items():
        if isinstance(of_seed, Scenario):
            by_key[s, None] = of_seed
        else:
            by_key.update(((s, float(cap)), sc) for cap, sc in of_seed.items())
    points = []
    for i, (combo, s) in enumerate(itertools.product(combos, seeds)):
        settings = {**base, **combo}
        key: ScenarioKey = (s, None)
        if key not in by_key:
            key = (s, float(settings.get("max_min_runtime", math.nan)))
            if key not in by_key:
                raise ValueError(f"scenarios: seed {s} has no import at the max_min_runtime "
                                 f"of point {i + 1} ({key[1]:g} s)")
        points.append(Point(i, settings, s, key))
    journal = Journal(out, sweep_identity(by_key, base, axes), len(points), resume)
    results: list[tuple[dict[str, Any] | None, str | None] | None] = [None] * len(points)
    for index, summary_kept in journal.done.items():
        results[index] = (summary_kept, None)
    todo = [p for p in points if results[p.index] is None]
    if resume:
        print(f"sweep: --resume: {len(points) - len(todo)} of {len(points)} points kept from "
              f"{journal.path}; running the other {len(todo)}", file=sys.stderr)
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(points), initial=len(points) - len(todo),
                   desc=f"sweep ({engine})", unit="run", file=sys.stderr, leave=False)

    def done(index: int, summary: dict[str, Any] | None, error: str | None) -> None:
        results[index] = (summary, error)
        if summary is not None:
            journal.record(index, summary)
        if error is not None:  # said as it happens, bar or no bar (a log, a pipe)
            line = f"sweep: point {index + 1} failed: {error}"
            if bar is not None:
                bar.write(line, file=sys.stderr)  # above the bar, which stays whole
            else:
                print(line, file=sys.stderr, flush=True)
        if bar is not None:
            bar.update(1)

    try:
        with _terminate_as_interrupt():
            if engine == "ray":
                from .sweep_ray import run_ray

                if todo:
                    run_ray(by_key, todo, runner, address, jobs, done)
            elif todo:
                run_processes(by_key, todo, runner, jobs, done)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        if bar is not None:
            bar.close()
        finished = sum(1 for r in results if r is not None and r[0] is not None)
        kept = (f"they are kept in {journal.path} (the same command with --resume runs only "
                "the rest)" if finished else "none finished")
        print(f"sweep: interrupted after {finished} of {len(points)} points; {kept}",
              file=sys.stderr)
        raise
    finally:
        journal.close()
        if bar is not None:
            bar.close()
    rows = []
    for (combo, s), result in zip(itertools.product(combos, seeds), results, strict=True):
        summary, error = result if result is not None else (None, "not run")
        row: dict[str, Any] = dict(combo)
        row["seed"] = s
        row.update({name: None if summary is None else _get(summary, path)
                    for name, path in METRICS})
        row["error"] = error
        row["summary"] = summary
        rows.append(row)
    write_sweep(out, rows, list(axes), labels)
    return rows


def label(key: str, value: Any, labels: Mapping[str, Mapping[Any, str]] | None) -> str:
    """A grid value as typed (``3d``) when known, else as a number or text; no value
    (typed ``none`` or empty, ``checkpoint_default=,30m``) is ``none``, never blank."""
    typed = (labels or {}).get(key, {}).get(value)
    if typed:
        return typed
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def write_sweep(out: Path, rows: list[dict[str, Any]], keys: list[str],
                labels: Mapping[str, Mapping[Any, str]] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    columns = [*keys, "seed", *(name for name, _ in METRICS), "error"]
    write_csv(out / "sweep.csv", columns, ([row[c] for c in columns] for row in rows))
    typed = [{k: label(k, row[k], labels) for k in keys} for row in rows]
    (out / "sweep.json").write_text(
        json.dumps([{**row, "typed": t} for row, t in zip(rows, typed, strict=True)],
                   indent=2) + "\n")
    plot_sweep(out, rows, keys, labels)


def _mean(values: list[Any]) -> float:
    got = [float(v) for v in values if v is not None]
    return sum(got) / len(got) if got else float("nan")


def _wide(values: list[float]) -> bool:
    """Whether the values spread over more than two decades (a value below 1 counts as 1:
    symlog is linear there): only then does a log axis surely show two or more powers of
    ten; over less it may show one or none, and so no tick label."""
    got = [v for v in values if math.isfinite(v)]
    return bool(got) and max(got) > 100 * max(min(got), 1.0)


def plot_sweep(out: Path, rows: list[dict[str, Any]], keys: list[str],
               labels: Mapping[str, Mapping[Any, str]] | None = None) -> None:
    """Write sweep.png and sweep.svg (see :func:`sweep_figure`)."""
    fig = sweep_figure(rows, keys, labels)  # first: it picks matplotlib's backend
    import matplotlib.pyplot as plt

    fig.savefig(out / "sweep.png", dpi=110)
    fig.savefig(out / "sweep.svg")
    plt.close(fig)


def sweep_figure(rows: list[dict[str, Any]], keys: list[str],
                 labels: Mapping[str, Mapping[Any, str]] | None = None) -> Figure:
    """Four panels against the first grid key, one line per combination of the others (the
    mean over the seeds when there are several; failed points are left out)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    import matplotlib.pyplot as plt

    x_key, others = keys[0], keys[1:]
    xs = list(dict.fromkeys(row[x_key] for row in rows))
    numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs)
    groups: dict[tuple[Any, ...], dict[Any, list[dict[str, Any]]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in others), {}).setdefault(row[x_key], []).append(row)
    # the worst team against the teams' overall (not the researchers': a team can be
    # attained better than its researchers are, and the worst team then read above it)
    panels = (
        ("attainment per team (solid), worst team (dashed)",
         ("attainment_teams", "attainment_min"), False),
        ("debug wait p90 (s)", ("debug_wait_p90_s",), True),
        ("occupancy (solid), unallocated fraction (dashed)",
         ("occupancy", "unallocated_fraction"), False),
        ("lost GPU-hours", ("lost_gpu_hours",), False),
    )
    n_seeds = len({row["seed"] for row in rows})
    fig, axs = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (title, metrics, log) in zip(axs.flat, panels, strict=True):
        drawn: list[float] = []
        for n, (group, at_x) in enumerate(groups.items()):
            # along the axis: by value when the values are its positions, else as typed
            order = sorted(at_x) if numeric else sorted(at_x, key=xs.index)
            px = [x if numeric else xs.index(x) for x in order]
            name = ", ".join(f"{k}={label(k, v, labels)}"
                             for k, v in zip(others, group, strict=True)) or "fairshare"
            for style, metric in zip(("-", "--"), metrics, strict=False):
                py = [_mean([r[metric] for r in at_x[x]]) for x in order]
                drawn += py
                ax.plot(px, py, style, marker="o", color=f"C{n % 10}",
                        label=name if style == "-" else None)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(x_key)
        # ticks at the grid values, labelled as typed (3d, 8h), not in seconds
        ax.set_xticks([x if numeric else i for i, x in enumerate(xs)],
                      [label(x_key, x, labels) for x in xs])
        # symlog: a wait of 0 s (every debug job started at once) is a valid point; over
        # two decades or less a linear axis, whose ticks fall between the values
        if log and _wide(drawn):
            ax.set_yscale("symlog", linthresh=1.0)
        # every figure here is >= 0: an axis whose margin dips below a 0 (no debug wait, no
        # work lost) would show negative waits and GPU-hours; a zoomed one is left as it is
        if ax.get_ylim()[0] < 0:
            ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    if groups and len(groups) > 1:
        axs.flat[0].legend(fontsize=8)
    mean = f" (mean of {n_seeds} seeds)" if n_seeds > 1 else ""
    fig.suptitle(f"apportion sweep: fair-share trade-offs{mean}")
    fig.tight_layout()
    return fig


def _dur(v: Any) -> str:
    return "-" if v is None else format_duration(float(v))


def format_sweep(rows: list[dict[str, Any]], keys: list[str],
                 labels: Mapping[str, Mapping[Any, str]] | None = None) -> str:
    """The sweep as a text table, one line per point (grid values as typed); a failed
    point's line gives its error instead of figures."""
    seeds = len({r["seed"] for r in rows}) > 1
    head = [*keys, *(["seed"] if seeds else [])]
    cols = [*head, "attain", "teams", "worst team", "occupancy", "unalloc", "wait p90",
            "debug p90", "preempt", "lost GPU-h", "wall"]
    lines = [cols]
    errors: list[tuple[int, str]] = []
    for r in rows:
        first = [*(label(k, r[k], labels) for k in keys), *([str(r["seed"])] if seeds else [])]
        if r["error"] is not None:
            lines.append([*first, "failed", *[""] * (len(cols) - len(first) - 1)])
            errors.append((len(lines) - 1, r["error"]))
            continue
        lines.append([
            *first,
            _pct(r["attainment_overall"]), _pct(r["attainment_teams"]),
            _pct(r["attainment_min"]), _pct(r["occupancy"]),
            _pct(r["unallocated_fraction"]), _dur(r["wait_p90_s"]), _dur(r["debug_wait_p90_s"]),
            f"{r['preemptions']:,}", f"{r['lost_gpu_hours']:,.0f}", f"{r['wall_s']:.1f}s",
        ])
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    text = [("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))).rstrip()
            for line in lines]
    for n, error in errors:  # the error under the failed point's line
        text[n] += f"  {error}"
    return "\n".join(text)
