"""``apportion sweep`` on this host's processes: seeds, failed points, grid values shown as
typed, the lookback warning and errors that name the flag."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from apportion.cli.main import main
from apportion.core import After, BudgetTree, Hold, Host, HostState, WorkloadSpec
from apportion.core.fleet import FleetConfig
from apportion.sim.engine import Engine, RunResult
from apportion.sim.model import (
    HostEvent,
    HostEventKind,
    LegacyPriority,
    Pools,
    Scenario,
    SimJob,
)
from apportion.sim.scenarios import get_scenario
from apportion.sim.sweep import format_sweep, run_point, run_sweep, sweep_figure
from apportion.sim.sweep_ray import pack, unpack

DATA = Path(__file__).parent / "data"
COST = ("wall_s", "cpu_s", "events_per_s", "peak_memory_mb")  # measured, not computed


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def figures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows without what a run costs (wall and CPU time, memory): what must not depend
    on where the run happened."""
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k not in COST}
        if row.get("summary") is not None:
            row["summary"] = {k: v for k, v in row["summary"].items() if k not in COST}
        out.append(row)
    return out


def failing_at_one_day(scenario: Scenario, settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """``run_point``, except that the point with a 1-day lookback raises."""
    if settings["lookback"] == 86400.0:
        raise ValueError("injected failure at lookback=1d")
    return run_point(scenario, settings, seed)


def test_sweep_runs_every_setting_on_every_seed(tmp_path: Path) -> None:
    """--seeds 0,1 with a 2-value grid: four rows, grid value slowest, then the seed; the
    two seeds' scenarios differ, so their rows do too; sweep.csv has a seed column."""
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "2", "--grid",
                            "lookback=12h,1d", "--seeds", "0,1", "--quiet", "--out",
                            str(tmp_path))
    assert code == 0, out + err
    with (tmp_path / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["lookback"], r["seed"]) for r in rows] == [
        ("43200.0", "0"), ("43200.0", "1"), ("86400.0", "0"), ("86400.0", "1")]
    assert all(r["error"] == "" for r in rows)
    assert all(r["rejected"] == "0" for r in rows)  # every workload fits the small cluster
    assert rows[0]["events"] != rows[1]["events"]  # another seed, another scenario
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert [d["summary"]["seed"] for d in data] == [0, 1, 0, 1]


def test_sweep_process_engine_matches_one_process(tmp_path: Path) -> None:
    """Two forked workers give exactly the figures of the same points run one after the
    other in this process."""
    scenario = get_scenario("small", days=2, seed=0)
    axes = {"lookback": [43200.0, 86400.0]}
    two = run_sweep(scenario, {}, axes, tmp_path / "two", jobs=2, progress=False)
    one = run_sweep(scenario, {}, axes, tmp_path / "one", jobs=1, progress=False)
    assert figures(two) == figures(one)
    assert two[0]["attainment_overall"] != two[1]["attainment_overall"]


def test_a_failed_point_is_reported_and_the_others_run(tmp_path: Path) -> None:
    """On two worker processes, the point that raises gets its error in its row (no
    figures); the other point has the figures of a normal run; the table shows the error."""
    scenario = get_scenario("small", days=2, seed=0)
    rows = run_sweep(scenario, {}, {"lookback": [86400.0, 43200.0]}, tmp_path, jobs=2,
                     progress=False, runner=failing_at_one_day)
    assert rows[0]["error"] == "ValueError: injected failure at lookback=1d"
    assert rows[0]["attainment_overall"] is None and rows[0]["summary"] is None
    assert rows[1]["error"] is None
    alone = run_point(scenario, {"lookback": 43200.0}, 0)
    assert rows[1]["attainment_overall"] == alone["attainment"]["overall"]
    table = format_sweep(rows, ["lookback"])
    assert "failed" in table.splitlines()[1] and "injected failure" in table.splitlines()[1]
    with (tmp_path / "sweep.csv").open() as f:
        assert [r["error"] for r in csv.DictReader(f)] == [
            "ValueError: injected failure at lookback=1d", ""]


def test_sweep_shows_grid_values_as_typed(tmp_path: Path) -> None:
    """Durations typed as 12h and 1d appear as 12h and 1d in the table, in the plot's tick
    labels and legend, and in sweep.json's ``typed``, not in seconds; sweep.csv keeps the
    seconds for programs."""
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "2", "--grid",
                            "lookback=12h,1d", "--grid", "max_min_runtime=2h,90m", "--quiet",
                            "--out", str(tmp_path))
    assert code == 0, out + err
    table = out.splitlines()
    assert [line.split()[:2] for line in table[1:5]] == [
        ["12h", "2h"], ["12h", "90m"], ["1d", "2h"], ["1d", "90m"]]
    assert "43200" not in out and "86400" not in out and "7200" not in out
    svg = (tmp_path / "sweep.svg").read_text()
    assert "max_min_runtime=90m" in svg and "max_min_runtime=2h" in svg  # legend
    assert ">12h<" in svg and ">1d<" in svg  # x tick labels
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data[1]["typed"] == {"lookback": "12h", "max_min_runtime": "90m"}
    with (tmp_path / "sweep.csv").open() as f:
        assert float(next(csv.DictReader(f))["lookback"]) == 43200


def test_an_empty_grid_value_is_shown_as_none(tmp_path: Path) -> None:
    """``--grid checkpoint_default=,30m``: the empty value (no default checkpoint interval)
    is ``none`` in the table's first column, in the plot's tick labels and in sweep.json's
    ``typed`` (it was blank in all three)."""
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "1", "--grid",
                            "checkpoint_default=,30m", "--quiet", "--out", str(tmp_path))
    assert code == 0, out + err
    assert [line.split()[0] for line in out.splitlines()[1:3]] == ["none", "30m"]
    assert (tmp_path / "sweep.svg").read_text().count(">none<") == 4  # one per panel
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert [d["typed"] for d in data] == [{"checkpoint_default": "none"},
                                          {"checkpoint_default": "30m"}]


@pytest.mark.parametrize("waits", [(150.0, 600.0), (20.0, 150.0)])
def test_debug_wait_panel_has_tick_labels_among_its_values(waits: tuple[float, float]) -> None:
    """Debug wait p90s of 150 and 600 s (within one decade, no power of ten among them) or
    of 20 and 150 s (one power of ten among them): once drawn, the panel's y axis has at
    least two labelled ticks between the smallest and the largest value."""
    import matplotlib.pyplot as plt

    rows = [{"lookback": x, "seed": 0, "attainment_overall": 0.9, "attainment_teams": 0.9,
             "attainment_min": 0.8, "debug_wait_p90_s": wait, "occupancy": 0.9,
             "unallocated_fraction": 0.1, "lost_gpu_hours": 10.0}
            for x, wait in zip((43200.0, 86400.0), waits, strict=True)]
    fig = sweep_figure(rows, ["lookback"])
    fig.canvas.draw()
    (ax,) = [a for a in fig.axes if a.get_title() == "debug wait p90 (s)"]
    shown = [t.get_text() for t in ax.get_yticklabels()
             if t.get_text() and min(waits) <= t.get_position()[1] <= max(waits)]
    plt.close(fig)
    assert len(shown) >= 2, shown


def test_no_panel_of_the_plot_goes_below_zero_when_its_figures_are_all_zero() -> None:
    """Two points with no debug wait and no lost GPU-hours (all 0, as a small trace gives):
    no panel's y axis starts below 0, none shows negative waits or GPU-hours (an axis
    centred on a constant 0 ran from -0.05 to 0.05); the waits, occupancy and loss panels
    start at 0, and the attainment panel stays zoomed on its values (0.8 to 0.9)."""
    import matplotlib.pyplot as plt

    rows = [{"lookback": x, "seed": 0, "attainment_overall": 0.9, "attainment_teams": 0.9,
             "attainment_min": 0.8, "debug_wait_p90_s": 0.0, "occupancy": 0.9,
             "unallocated_fraction": 0.0, "lost_gpu_hours": 0.0}
            for x in (43200.0, 86400.0)]
    fig = sweep_figure(rows, ["lookback"])
    fig.canvas.draw()
    bottoms = {a.get_title(): a.get_ylim()[0] for a in fig.axes}
    plt.close(fig)
    assert bottoms == {"attainment per team (solid), worst team (dashed)": pytest.approx(0.795),
                       "debug wait p90 (s)": 0,
                       "occupancy (solid), unallocated fraction (dashed)": 0,
                       "lost GPU-hours": 0}


def test_sweep_warns_when_the_lookback_covers_the_whole_run(tmp_path: Path) -> None:
    """--days 2 with lookbacks of 2d and 3d: a warning on stderr naming both as typed and
    --days, and indeed the two rows have the same figures."""
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "2", "--grid",
                            "lookback=2d,3d", "--quiet", "--out", str(tmp_path))
    assert code == 0, out + err
    assert "warning: lookback 2d, 3d is not shorter than the simulated period (--days 2)" in err
    assert "identical" in err
    rows = figures(json.loads((tmp_path / "sweep.json").read_text()))
    for row in rows:
        del row["lookback"], row["typed"], row["summary"]["config"]
    assert rows[0] == rows[1]


def test_sweep_warns_when_every_seed_imports_a_trace_alike(tmp_path: Path) -> None:
    """--seeds 0,1 over a trace with a budget column of its own: the seed changes nothing the
    import makes, so stderr warns that each setting's rows are one run repeated (and indeed
    the two seeds' figures are equal); over a trace given --budgets 3, where the seed
    assigns the budgets, there is no such warning."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration\n"
                     + "".join(f"j{i},{i * 600},{'ab'[i % 2]}/x,{1 + i % 8},3600\n"
                               for i in range(24)))
    code, out, err = invoke("sweep", "--trace", str(trace), "--cluster", "2x8", "--days", "1",
                            "--grid", "lookback=6h,12h", "--seeds", "0,1", "--quiet", "--out",
                            str(tmp_path / "s"))
    assert code == 0, out + err
    assert ("warning: --seeds 0,1: the trace imports the same for every seed (with a trace, "
            "the seed only changes budgets the import synthesises, as with --budgets N), so "
            "each setting's rows are one run repeated; give one seed") in " ".join(err.split())
    rows = figures(json.loads((tmp_path / "s" / "sweep.json").read_text()))
    for row in rows:
        del row["seed"], row["typed"], row["summary"]["seed"]
    assert rows[0] == rows[1] and rows[2] == rows[3]
    itp = tmp_path / "itp.csv"
    itp.write_text("job_id,submission_time,duration,num_gpu\n"
                   + "".join(f"j{i},{i * 600},3600,{1 + i % 8}\n" for i in range(24)))
    code, out, err = invoke("sweep", "--trace", str(itp), "--format", "itp", "--budgets", "3",
                            "--cluster", "2x8", "--days", "1", "--grid", "lookback=6h,12h",
                            "--seeds", "0,1", "--quiet", "--out", str(tmp_path / "i"))
    assert code == 0, out + err
    assert "--seeds" not in err


def test_sweep_does_not_warn_when_the_run_outlasts_every_lookback(tmp_path: Path) -> None:
    """--days 2 with lookbacks of 12h and 1d: no warning."""
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "2", "--grid",
                            "lookback=12h,1d", "--quiet", "--out", str(tmp_path))
    assert code == 0, out + err
    assert "warning" not in err


def test_sweep_errors_name_the_flag_and_the_value_as_typed(tmp_path: Path) -> None:
    """A grid value that makes an invalid config, two values that are the same duration,
    --address without --engine ray, and --seed with --seeds: usage errors (exit 2) naming
    the flag and what was typed."""
    out = str(tmp_path)
    code, _, err = invoke("sweep", "--scenario", "small", "--grid", "lookback=0,1d", "--out", out)
    assert code == 2
    assert "Invalid value for --grid: lookback=0: policy: lookback: must be > 0" in err
    code, _, err = invoke("sweep", "--scenario", "small", "--grid", "lookback=24h,1d", "--out",
                          out)
    assert code == 2 and "lookback=24h and lookback=1d are the same value" in err
    code, _, err = invoke("sweep", "--scenario", "small", "--grid", "lookback=1d", "--address",
                          "127.0.0.1:1", "--out", out)
    assert code == 2 and "--address needs --engine ray" in err
    code, _, err = invoke("sweep", "--scenario", "small", "--grid", "lookback=1d", "--seed", "1",
                          "--seeds", "1,2", "--out", out)
    assert code == 2 and "--seed and --seeds exclude each other" in err
    code, _, err = invoke("sweep", "--scenario", "small", "--grid", "lookback=1d", "--seeds",
                          "1,x", "--out", out)
    assert code == 2 and "Invalid value for --seeds: not a whole number: 'x'" in err


def test_attainment_panel_plots_the_teams_overall_against_the_worst_team() -> None:
    """The attainment panel draws attainment_teams (solid) and attainment_min (dashed), two
    figures over the same teams, not the per-researcher attainment_overall, which can be
    below the worst team (0.507 against 0.514 on a three-level tree), so that the worst
    team was drawn above the overall."""
    import matplotlib.pyplot as plt

    rows = [{"lookback": x, "seed": 0, "attainment_overall": 0.507 + d,
             "attainment_teams": 0.6 + d, "attainment_min": 0.514 + d,
             "debug_wait_p90_s": 60.0, "occupancy": 0.9, "unallocated_fraction": 0.1,
             "lost_gpu_hours": 10.0} for x, d in ((43200.0, 0.0), (86400.0, 0.01))]
    fig = sweep_figure(rows, ["lookback"])
    (ax,) = [a for a in fig.axes
             if a.get_title() == "attainment per team (solid), worst team (dashed)"]
    lines = {line.get_linestyle(): list(line.get_ydata()) for line in ax.get_lines()}
    plt.close(fig)
    assert lines == {"-": [0.6, 0.61], "--": [0.514, 0.524]}


def test_the_plot_joins_the_points_in_the_order_of_the_x_axis() -> None:
    """Grid values typed out of order (lookback=12h,1h,6h): every panel's lines have
    increasing x data (1h, 6h, 12h), so each line runs along the axis; it joined them as
    typed, 12h -> 1h -> 6h, doubling back. The ticks stay labelled as typed."""
    import matplotlib.pyplot as plt

    typed = {43200.0: "12h", 3600.0: "1h", 21600.0: "6h"}
    rows = [{"lookback": x, "seed": 0, "attainment_overall": 0.9, "attainment_teams": 0.9,
             "attainment_min": 0.8, "debug_wait_p90_s": 60.0, "occupancy": 0.9,
             "unallocated_fraction": 0.1, "lost_gpu_hours": 10.0} for x in typed]
    fig = sweep_figure(rows, ["lookback"], {"lookback": typed})
    xdata = [list(line.get_xdata()) for ax in fig.axes for line in ax.get_lines()]
    ticks = {t.get_text() for t in fig.axes[0].get_xticklabels()}
    plt.close(fig)
    assert xdata and all(x == [3600.0, 21600.0, 43200.0] for x in xdata)
    assert ticks == {"12h", "1h", "6h"}


def every_field_set() -> Scenario:
    """A scenario in which every field of every class it is made of holds a value other
    than its default (``test_every_field_is_set`` keeps it so when a field is added)."""
    spec = WorkloadSpec("w1", "ai/llm", 8, 3600.0, 60.0, user="alice", resumable=True,
                        priority=2, checkpoint_interval=900.0, time_limit=7200.0,
                        hosts=("h1",), checkpoint_on_term=True, gpu_kinds=("H100", "B200"),
                        cluster="east")
    hold = Hold("w1", after=((After.OK, "w0"),), array="arr", index=3, throttle=2)
    job = SimJob(spec, 5400.0, legacy_priority=LegacyPriority.URGENT, legacy_preemptible=False,
                 squat=True, patience=600.0, hold=hold)
    pools = Pools({"h1": ("east", "H100"), "h2": ("west", "B200")},
                  FleetConfig(billing={"B200": 2.0}, overrides={"west/B200": {"ai/llm": 0.5}}))
    return Scenario(
        name="every-field", tree=BudgetTree.build([("ai", 1.0), ("ai/llm", 2.0)]),
        hosts=(Host("h1", 8, HostState.DRAINING), Host("h2", 4, HostState.DOWN)),
        jobs=(job,), host_events=(HostEvent(30.0, "h2", HostEventKind.FAIL),),
        days=2.5, repair_time=1800.0, meta={"seed": 7, "pools": ["east/H100", "west/B200"]},
        pools=pools, min_runtime_lowered=("w1",), dropped_host_events=3,
        time_origin=1709283600.0)


def defaulted_fields(value: Any, where: str = "scenario") -> list[str]:
    """The fields, in ``value`` and every dataclass inside it, left at their default."""
    if not dataclasses.is_dataclass(value):
        if isinstance(value, tuple | list):
            return [f for i, v in enumerate(value) for f in defaulted_fields(v, f"{where}[{i}]")]
        return []
    found = []
    for f in dataclasses.fields(value):
        got = getattr(value, f.name)
        if f.default is not dataclasses.MISSING and got == f.default or (
                f.default_factory is not dataclasses.MISSING and got == f.default_factory()):
            found.append(f"{where}.{f.name}")
        found += defaulted_fields(got, f"{where}.{f.name}")
    return found


def test_every_field_is_set() -> None:
    """The scenario the round-trip test packs leaves no field of any of its classes at its
    default, so a field added to Scenario, SimJob, WorkloadSpec, Hold, Host, HostEvent,
    Pools or FleetConfig fails here until the round trip covers it."""
    assert defaulted_fields(every_field_set()) == []


def test_pack_round_trips_every_field_of_a_scenario() -> None:
    """What the Ray engine ships: unpack(pack(s)) equals s, every field of every class in
    it included (pools, a workload's GPU kinds, cluster, hosts and time limit, its hold);
    the tree has every node with its weight."""
    sc = every_field_set()
    back = unpack(pack(sc))
    assert back.tree.as_dict() == sc.tree.as_dict()
    assert dataclasses.replace(back, tree=sc.tree) == sc  # a BudgetTree equals only itself


def test_pack_round_trips_the_fleet_scenario() -> None:
    """The built-in fleet scenario (several pools, workloads asking for GPU kinds) comes back
    from unpack(pack(s)) equal, its pools included."""
    sc = get_scenario("fleet", days=1, seed=0)
    assert sc.pools is not None and any(j.spec.gpu_kinds for j in sc.jobs)
    back = unpack(pack(sc))
    assert dataclasses.replace(back, tree=sc.tree) == sc


def test_pack_refuses_a_value_it_cannot_ship() -> None:
    """A value of a class pack does not know (a field added with a new type) is an error
    naming the class, not a scenario shipped without it."""
    sc = dataclasses.replace(every_field_set(), meta={"when": object()})
    with pytest.raises(TypeError, match="cannot ship a object"):
        pack(sc)


def test_lookback_warning_names_the_period_that_was_simulated(tmp_path: Path) -> None:
    """The warning quotes the period simulated: the small scenario's own 2 days without
    --days; --days 1.5 when given (the small scenario takes --days, as the others do)."""
    code, out, err = invoke("sweep", "--scenario", "small", "--grid", "lookback=1d,3d",
                            "--quiet", "--out", str(tmp_path / "a"))
    assert code == 0, out + err
    assert ("warning: lookback 3d is not shorter than the simulated period (the scenario's "
            "2 d)") in err
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "1.5", "--grid",
                            "lookback=1d,3d", "--quiet", "--out", str(tmp_path / "b"))
    assert code == 0, out + err
    assert ("warning: lookback 3d is not shorter than the simulated period (--days 1.5)"
            in err)


def test_a_sweep_over_the_cap_on_a_trace_equals_simulate_with_that_cap(tmp_path: Path) -> None:
    """A trace whose job asks 10 h of minimum runtime, swept over max_min_runtime=8h,12h:
    each point's figures equal those of ``simulate --set max_min_runtime=`` that value (the
    12 h point keeps the job's 10 h, the 8 h point lowers it to 8 h), so the two differ.
    (The sweep used to load the trace once with the base 8 h cap, so its 12 h point ran
    the job with 8 h.) clamped_min_runtime included: 1 at 8 h, lowered by the trace import
    in both."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration,min_runtime,budget\n"
                     "a,0,8,86400,10h,x/a\nb,3600,4,36000,1h,x/b\n")
    common = ("--trace", str(trace), "--cluster", "1x8", "--days", "2", "--quiet")
    code, out, err = invoke("sweep", *common, "--grid", "max_min_runtime=8h,12h",
                            "--out", str(tmp_path / "sweep"))
    assert code == 0, out + err
    points = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    for cap, point in zip(("8h", "12h"), points, strict=True):
        code, out, err = invoke("simulate", *common, "--policy", "fairshare", "--set",
                                f"max_min_runtime={cap}", "--out", str(tmp_path / cap))
        assert code == 0, out + err
        alone = json.loads((tmp_path / cap / "summary.json").read_text())[0]
        swept = figures([point])[0]["summary"]
        alone = figures([{"summary": alone}])[0]["summary"]
        assert {k for k in swept if swept[k] != alone.get(k)} == set()
        assert swept["clamped_min_runtime"] == (1 if cap == "8h" else 0)
    assert points[0]["summary"]["attainment"] != points[1]["summary"]["attainment"]


def test_a_one_point_sweep_over_the_cap_of_an_itp_trace_is_simulate_with_that_cap(
        tmp_path: Path) -> None:
    """An ITP trace (no minimum runtimes: the import derives them, up to the cap) swept
    over max_min_runtime=2h alone: the point's whole summary, clamped_min_runtime
    included, equals that of ``simulate --set max_min_runtime=2h`` (0 lowered: the
    derived minimum runtimes are at most 2 h). (The sweep imported the trace at the 8 h
    default and let the engine lower the derived values to 2 h, counting 122 of them.)"""
    common = ("--trace", str(DATA / "itp" / "cluster10.csv"), "--format", "itp",
              "--budgets", "3", "--cluster", "2x8", "--quiet")
    code, out, err = invoke("sweep", *common, "--grid", "max_min_runtime=2h",
                            "--out", str(tmp_path / "sweep"))
    assert code == 0, out + err
    swept = figures(json.loads((tmp_path / "sweep" / "sweep.json").read_text()))[0]["summary"]
    code, out, err = invoke("simulate", *common, "--policy", "fairshare", "--set",
                            "max_min_runtime=2h", "--out", str(tmp_path / "simulate"))
    assert code == 0, out + err
    alone = json.loads((tmp_path / "simulate" / "summary.json").read_text())[0]
    assert swept == figures([{"summary": alone}])[0]["summary"]
    assert swept["clamped_min_runtime"] == 0


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # the field after the state
            found.append(int(entry.name))
    return found


def start_long_sweep(out: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """A process sweep of a minute or more in its own session, once its two worker
    processes are in their first points; the sweep and its workers' pids."""
    sweep = subprocess.Popen(
        [sys.executable, "-m", "apportion.cli.main", "sweep", "--scenario", "seed", "--days",
         "30", "--grid", "lookback=1d,2d,3d,4d,5d,6d,7d,8d", "--seeds", "0,1", "--jobs", "2",
         "--quiet", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(workers := children(sweep.pid)) < 2:  # the scenarios are built first
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        time.sleep(0.1)
    time.sleep(1)  # the workers are in their first points
    return sweep, workers


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids of ``pids`` still running after waiting up to ``seconds`` for them to end."""
    deadline = time.monotonic() + seconds
    while (running := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return running


def assert_only_the_finished_points_kept(out: Path, stderr: str) -> None:
    """The interrupted sweep's line names as many finished points as ``points.jsonl`` keeps
    (after its first line, the sweep's name), and --out holds nothing else."""
    said = re.search(r"^sweep: interrupted after (\d+) of 16 points; (.*)$", stderr,
                     re.MULTILINE)
    assert said, stderr
    journal = out / "points.jsonl"
    assert sorted(p.name for p in out.iterdir()) == ["points.jsonl"]
    kept = journal.read_text().splitlines()[1:]
    assert len(kept) == int(said[1])
    assert said[2] == (f"they are kept in {journal} (the same command with --resume runs "
                       "only the rest)" if kept else "none finished")


def test_ctrl_c_stops_a_process_sweep_at_once_and_leaves_no_worker(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) while two
    worker processes run points of a sweep of a minute or more: the command ends within a
    few seconds with click's "Aborted!" (exit 1) and a line saying how many points were
    done, its workers are gone, and --out holds only points.jsonl with those points.
    (The sweep used to run every queued point first, then write nothing.)"""
    out = tmp_path / "out"
    sweep, workers = start_long_sweep(out)
    try:
        os.killpg(sweep.pid, signal.SIGINT)
        start = time.monotonic()
        stdout, stderr = sweep.communicate(timeout=30)
        took = time.monotonic() - start
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    assert took < 5, f"the sweep took {took:.1f} s to stop"
    assert sweep.returncode == 1, stdout + stderr
    assert "Aborted!" in stderr and "wrote" not in stdout
    assert_only_the_finished_points_kept(out, stderr)
    assert not [p for p in workers if Path(f"/proc/{p}").exists()]


def test_sigterm_to_a_process_sweep_stops_it_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGTERM to the sweep's own process only (``kill PID``, not its group) while its two
    workers run points: as Ctrl-C, the command ends within a few seconds with exit 1, the
    "interrupted after N of 16 points" line and "Aborted!", its workers are gone and --out
    holds only points.jsonl with those N points. (SIGTERM used to kill the command alone
    and leave its workers running their points on, orphaned.)"""
    out = tmp_path / "out"
    sweep, workers = start_long_sweep(out)
    try:
        sweep.terminate()
        sweep.wait(timeout=30)
        assert gone_within(workers, 5) == []
        stdout, stderr = sweep.communicate()  # once no worker holds the pipes open
    finally:
        with contextlib.suppress(ProcessLookupError):  # the sweep's session: nothing left
            os.killpg(sweep.pid, signal.SIGKILL)
        sweep.wait()
    assert sweep.returncode == 1, stdout + stderr
    assert "Aborted!" in stderr and "wrote" not in stdout
    assert_only_the_finished_points_kept(out, stderr)


def test_the_workers_of_a_process_sweep_die_with_it_when_it_is_killed(tmp_path: Path) -> None:
    """SIGKILL to the sweep's own process (as the OOM killer sends it; it cannot be
    handled) while its two workers run points: the workers are gone within a few seconds.
    (They used to run on, orphaned, each holding its memory.)"""
    sweep, workers = start_long_sweep(tmp_path / "out")
    try:
        sweep.kill()
        sweep.wait(timeout=30)
        assert gone_within(workers, 5) == []
    finally:
        with contextlib.suppress(ProcessLookupError):  # the sweep's session: nothing left
            os.killpg(sweep.pid, signal.SIGKILL)
        sweep.communicate()


class FailingAtThreeHours:
    """The engine, except that a run with checkpoint_wait 3h raises (a wrapper, not a
    subclass: the compiled engine cannot be subclassed by interpreted code)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.engine = Engine(*args, **kwargs)

    def run(self) -> RunResult:
        if self.engine.config.checkpoint_wait == 3 * 3600.0:
            raise ValueError("injected failure at checkpoint_wait=3h")
        return self.engine.run()


def test_failed_points_are_reported_on_stderr_without_a_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two points of eight fail (checkpoint_wait=3h, on both seeds; the forked workers
    inherit the failing engine) with stderr not a terminal (no progress bar): stderr has
    one line per failed point with its error (in the order they fail), then the summary
    line; before, only the summary line."""
    monkeypatch.setattr("apportion.sim.sweep.Engine", FailingAtThreeHours)
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "1", "--grid",
                            "max_min_runtime=4h,8h", "--grid", "checkpoint_wait=10m,3h",
                            "--seeds", "0,1", "--out", str(tmp_path))
    assert code == 1, out + err
    error = "ValueError: injected failure at checkpoint_wait=3h"
    assert sorted(line for line in err.splitlines() if line.startswith("sweep: ")) == [
        f"sweep: point {n} failed: {error}" for n in (3, 4, 7, 8)]
    assert err.endswith("Error: 4 of 8 points failed (errors above)\n")


def test_grid_values_that_break_a_rule_together_are_refused_before_anything_runs(
        tmp_path: Path) -> None:
    """--grid checkpoint_wait=2h,3h --grid max_min_runtime=1h,90m: every combination has
    checkpoint_wait over max_min_runtime, though each value alone is valid. A usage error
    (exit 2) before any point runs, naming the first such pair of values as typed, and
    the durations not in seconds; nothing written. (All four points ran and failed with
    'CoreError: policy: checkpoint_wait: 7200 s is over max_min_runtime (3600 s)'.) With
    a third axis (lookback), the refusal names only the two values that break the rule."""
    out = tmp_path / "out"
    code, _, err = invoke("sweep", "--scenario", "small", "--days", "1", "--grid",
                          "checkpoint_wait=2h,3h", "--grid", "max_min_runtime=1h,90m",
                          "--out", str(out))
    assert code == 2, err
    assert ("Invalid value for --grid: checkpoint_wait=2h with max_min_runtime=1h: policy: "
            "checkpoint_wait: 2 h is over max_min_runtime (1 h)") in err
    assert "sweep: point" not in err and not out.exists()
    code, _, err = invoke("sweep", "--scenario", "small", "--days", "1", "--grid",
                          "lookback=1d", "--grid", "max_min_runtime=8h,90m", "--grid",
                          "restart_protection=30m,2h", "--out", str(out))
    assert code == 2, err
    assert ("Invalid value for --grid: max_min_runtime=90m with restart_protection=2h: "
            "policy: restart_protection: 2 h is over max_min_runtime (1 h 30 min)") in err
    assert not out.exists()


def test_a_process_sweep_forks_no_more_workers_than_it_has_points(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--engine process --jobs 8 on a sweep of 2 points starts a pool of 2 workers, not 8:
    a forking pool starts all its workers at once, so a large --jobs forked that many
    copies of the command for nothing. The rows are those of any --jobs."""
    import apportion.sim.sweep as sweep_module

    sizes: list[int] = []

    class Recording(sweep_module.ProcessPoolExecutor):  # type: ignore[misc]
        def __init__(self, max_workers: int, **kw: Any) -> None:
            sizes.append(max_workers)
            super().__init__(max_workers=max_workers, **kw)

    monkeypatch.setattr(sweep_module, "ProcessPoolExecutor", Recording)
    code, _, err = invoke("sweep", "--scenario", "small", "--days", "0.2", "--grid",
                          "lookback=1d,2d", "--jobs", "8", "--quiet", "--out", str(tmp_path))
    assert code == 0, err
    assert sizes == [2]
    with (tmp_path / "sweep.csv").open() as f:
        assert [r["error"] for r in csv.DictReader(f)] == ["", ""]


def test_a_setting_given_by_both_set_and_grid_is_refused(tmp_path: Path) -> None:
    """sweep --set lookback=2d --grid lookback=1d,3d: a usage error (exit 2) naming --grid
    and the key, before anything runs (the grid's values replaced the --set one without a
    word, so the run was not the one asked for); nothing written."""
    out = tmp_path / "out"
    code, _, err = invoke("sweep", "--scenario", "small", "--days", "1", "--set",
                          "lookback=2d", "--grid", "lookback=1d,3d", "--out", str(out))
    assert code == 2, err
    assert ("Invalid value for --grid: lookback is given by --set too; give its values in "
            "--grid only") in " ".join(err.split())
    assert not out.exists()


def test_a_negative_seed_is_refused_naming_its_flag(tmp_path: Path) -> None:
    """--seeds 0,-1 (sweep) and --seed -1 (sweep, simulate, bench): a usage error naming
    the flag typed; it was 'Invalid value for --scenario: expected non-negative integer'."""
    out = str(tmp_path)
    code, _, err = invoke("sweep", "--scenario", "small", "--grid", "lookback=1d", "--seeds",
                          "0,-1", "--out", out)
    assert code == 2 and "Invalid value for --seeds: a seed must be >= 0, got '-1'" in err
    for command in (("sweep", "--grid", "lookback=1d", "--out", out), ("simulate", "--out", out),
                    ("bench",)):
        code, _, err = invoke(*command, "--scenario", "small", "--seed", "-1")
        assert code == 2, err
        assert "Invalid value for '--seed': -1 is not in the range x>=0" in err
        assert "--scenario" not in err


def test_a_ray_address_where_nothing_listens_is_refused_at_once(tmp_path: Path) -> None:
    """--address (or RAY_ADDRESS) naming a port where nothing listens: the sweep ends within
    seconds with exit 1 and one error naming where the address came from (it printed Ray's
    connection retries for minutes)."""
    with socket.socket() as s:  # a free port: nothing listens there once it is closed
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    command = [sys.executable, "-m", "apportion.cli.main", "sweep", "--scenario", "small",
               "--days", "1", "--grid", "lookback=12h", "--engine", "ray", "--quiet", "--out",
               str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for args, extra, source in ((["--address", address], {}, "--address"),
                                ([], {"RAY_ADDRESS": address}, "RAY_ADDRESS")):
        start = time.monotonic()
        run = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60,
                             env={**env, **extra})
        assert time.monotonic() - start < 20
        assert (run.returncode, run.stderr) == (1, (
            f"Error: {source} {address}: no Ray cluster answers there (Connection refused); "
            "give the head's GCS address, HOST:PORT (port 6379 by default)\n"))


def test_a_ray_address_with_a_port_out_of_range_is_refused_naming_the_port(
        tmp_path: Path) -> None:
    """--address HOST:99999 (or :0): the sweep ends with exit 1 and one error saying the
    port is no TCP port (it said no Ray cluster answered there, "Connection refused", as if
    the network were at fault)."""
    command = [sys.executable, "-m", "apportion.cli.main", "sweep", "--scenario", "small",
               "--days", "1", "--grid", "lookback=12h", "--engine", "ray", "--quiet", "--out",
               str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for port in ("99999", "0"):
        run = subprocess.run([*command, "--address", f"127.0.0.1:{port}"], capture_output=True,
                             text=True, timeout=60, env=env)
        assert (run.returncode, run.stderr) == (1, (
            f"Error: --address 127.0.0.1:{port}: {port} is not a port: a TCP port is 1 to "
            "65535 (the head's GCS listens on 6379 by default)\n"))


def test_a_ray_address_of_a_server_that_is_no_ray_cluster_is_refused_quickly(
        tmp_path: Path) -> None:
    """--address naming a port that accepts connections but is no Ray cluster (a web
    server answering HTTP/1, a server that accepts and says nothing): the sweep ends within
    seconds with exit 1 and one error naming --address, the address and that no Ray cluster
    answers there (ray.init retried there for minutes: the old probe only connected)."""
    import http.server
    import threading

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    silent = socket.create_server(("127.0.0.1", 0))  # its backlog accepts; nobody answers
    threading.Thread(target=web.serve_forever, daemon=True).start()
    command = [sys.executable, "-m", "apportion.cli.main", "sweep", "--scenario", "small",
               "--days", "1", "--grid", "lookback=12h", "--engine", "ray", "--quiet", "--out",
               str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    try:
        for port, why in ((web.server_address[1], "it accepts connections but answered "),
                          (silent.getsockname()[1], "it accepts connections but sent no gRPC "
                                                    "answer within 5 s")):
            address = f"127.0.0.1:{port}"
            start = time.monotonic()
            run = subprocess.run([*command, "--address", address], capture_output=True,
                                 text=True, timeout=60, env=env)
            assert time.monotonic() - start < 30, run.stderr
            assert run.returncode == 1, run.stdout + run.stderr
            assert run.stderr.startswith(
                f"Error: --address {address}: no Ray cluster answers there ({why}"), run.stderr
            assert run.stderr.endswith(
                "; give the head's GCS address, HOST:PORT (port 6379 by default)\n")
            assert run.stderr.count("\n") == 1, run.stderr
    finally:
        web.shutdown()
        web.server_close()
        silent.close()


def test_a_grid_of_more_points_than_a_sweep_runs_is_refused_at_once(tmp_path: Path) -> None:
    """sweep with three --grid of 30 values each and --seeds 0,1 (54,000 points, over the
    bound of 10,000): a usage error (exit 2) naming --grid, the number of points and how
    they multiply, within seconds and before anything runs; it checked combinations for
    minutes without a word (200 x 200 x 200 values ran over a minute before any point)."""
    out = tmp_path / "out"
    values = {"lookback": [f"{i}h" for i in range(1, 31)],
              "checkpoint_wait": [f"{i}m" for i in range(1, 31)],
              "rebalance_margin": [f"{1 + i / 100:g}" for i in range(30)]}
    grids = [a for key, vs in values.items() for a in ("--grid", f"{key}={','.join(vs)}")]
    start = time.monotonic()
    code, _, err = invoke("sweep", "--scenario", "small", "--days", "1", *grids,
                          "--seeds", "0,1", "--out", str(out))
    assert code == 2, err
    assert ("Invalid value for --grid: 54,000 points (30 x 30 x 30 values x 2 seeds) is more "
            "than a sweep runs (at most 10,000)") in " ".join(err.split())
    assert time.monotonic() - start < 10
    assert not out.exists()
