"""``apportion simulate`` and ``apportion sweep`` end to end on tiny inputs."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from apportion.cli.main import main
from apportion.sim.engine import WORKLOAD_COLUMNS
from apportion.sim.metrics import BUDGET_HOUR_COLUMNS, CLUSTER_HOUR_COLUMNS
from apportion.sim.scenarios import seed_scenario

SUMMARY_KEYS = {
    "policy", "sim_days", "workloads", "occupancy", "unallocated_fraction", "availability",
    "attainment", "wait_s", "preemptions", "protected_preemptions", "lost_gpu_hours", "drains",
    "wall_s", "events", "peak_memory_mb", "squat_gpu_hours", "priority_inflation",
}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def header(path: Path) -> list[str]:
    with path.open() as f:
        return next(csv.reader(f))


def test_simulate_writes_the_documented_outputs(tmp_path: Path) -> None:
    """The small scenario under both policies: summary.json is an array with the documented
    keys, one per policy, and every table has the documented columns."""
    code, out = invoke("simulate", "--scenario", "small", "--quiet", "--out", str(tmp_path))
    assert code == 0, out
    summaries = json.loads((tmp_path / "summary.json").read_text())
    assert [s["policy"] for s in summaries] == ["fairshare", "legacy"]
    for s in summaries:
        assert set(s) >= SUMMARY_KEYS, SUMMARY_KEYS - set(s)
        assert set(s["wait_s"]["all"]) >= {"p50", "p90", "p99"}
        assert set(s["wait_s"]) >= {"all", "debug"}
        assert set(s["attainment"]) >= {"overall", "min", "per_budget"}
        assert set(s["preemptions"]) >= {"unallocated", "rebalance", "drain", "host_failure"}
        assert set(s["drains"]) >= {"count", "p90_time_to_drain_s", "automated_fraction"}
        policy = s["policy"]
        assert header(tmp_path / f"workloads-{policy}.csv") == list(WORKLOAD_COLUMNS)
        assert header(tmp_path / f"budget_hours-{policy}.csv") == list(BUDGET_HOUR_COLUMNS)
        assert header(tmp_path / f"cluster_hours-{policy}.csv") == list(CLUSTER_HOUR_COLUMNS)
    assert "attainment overall" in out and "fairshare" in out and "legacy" in out


def test_set_parses_durations_and_one_policy(tmp_path: Path) -> None:
    """--set lookback=1d is 86,400 s in the summary's config; --policy picks one policy;
    --cluster 2x8 sizes the cluster."""
    code, out = invoke("simulate", "--scenario", "small", "--policy", "fairshare", "--set",
                       "lookback=1d", "--set", "restart_overhead=5m", "--cluster", "2x8",
                       "--quiet", "--out", str(tmp_path))
    assert code == 0, out
    (s,) = json.loads((tmp_path / "summary.json").read_text())
    assert s["config"]["lookback"] == 86400
    assert s["sim_config"]["restart_overhead"] == 300
    assert s["gpus"] == 16


def test_bad_set_key_lists_valid_keys(tmp_path: Path) -> None:
    """An unknown --set key is a usage error naming the option and the valid keys."""
    code, out = invoke("simulate", "--scenario", "small", "--set", "lookbak=3d",
                       "--out", str(tmp_path))
    assert code == 2
    assert "--set" in out and "lookbak" in out and "max_min_runtime" in out


def test_bad_set_value_names_the_key(tmp_path: Path) -> None:
    """A value that is not a duration is refused, naming the key."""
    code, out = invoke("simulate", "--scenario", "small", "--set", "lookback=soon",
                       "--out", str(tmp_path))
    assert code == 2
    assert "lookback" in out


def test_a_set_key_given_twice_is_refused(tmp_path: Path) -> None:
    """--set lookback=1d --set lookback=2d is a usage error naming the key, as --grid
    refuses a key given twice (it ran with the last value, silently)."""
    code, out = invoke("simulate", "--scenario", "small", "--set", "lookback=1d", "--set",
                       "lookback=2d", "--out", str(tmp_path))
    assert code == 2
    assert "Invalid value for --set: lookback is given twice" in out


def test_bad_set_values_say_what_is_expected(tmp_path: Path) -> None:
    """--set errors name the key and what would do, in the user's terms: a duration, a
    whole number, a boolean, a plain number (a margin or factor is no duration: 2h is
    refused, not read as 7,200)."""
    for item, expected in (("lookback=-1h", "lookback: must be a duration like 30m, 8h"),
                           ("decide_rounds=x", "decide_rounds: not a whole number: 'x'"),
                           ("rebalance=maybe", "rebalance: not a boolean: 'maybe'"),
                           ("victim_max_factor=2h",
                            "victim_max_factor: must be a number >= 0, got '2h'"),
                           ("rebalance_margin=-0.1",
                            "rebalance_margin: must be a number >= 0, got '-0.1'"),
                           ("legacy_cap_factor=1d",
                            "legacy_cap_factor: must be a number >= 0, got '1d'")):
        code, out = invoke("simulate", "--scenario", "small", "--set", item,
                           "--out", str(tmp_path))
        assert code == 2 and "--set" in out and expected in out, (item, out)


def test_tree_file_must_cover_the_budgets(tmp_path: Path) -> None:
    """A --tree that lacks the scenario's budgets is refused, naming a missing budget."""
    tree = tmp_path / "tree.toml"
    tree.write_text('"other/team/x" = 1\n')
    code, out = invoke("simulate", "--scenario", "small", "--tree", str(tree),
                       "--out", str(tmp_path / "o"))
    assert code == 2
    assert "--tree" in out and "not a leaf" in out


def test_an_output_place_that_cannot_be_written_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    """--out under a regular file: simulate and sweep exit 2 naming --out and why, before
    simulating (before, a traceback once the runs had ended); a new --out (and its parents)
    is made."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for command in (["simulate"], ["sweep", "--grid", "lookback=1d"]):
        code, out = invoke(*command, "--scenario", "small", "--days", "0.1",
                           "--out", str(blocker / "out"))
        assert code == 2
        assert (f"Invalid value for '--out': {blocker / 'out'}: cannot write there: Not a "
                "directory") in out
    code, out = invoke("simulate", "--scenario", "small", "--days", "0.1", "--quiet",
                       "--out", str(tmp_path / "new" / "dir"))
    assert code == 0, out
    assert (tmp_path / "new" / "dir" / "summary.json").exists()


def test_days_sets_every_built_in_scenarios_length_and_size_is_refused_where_fixed(
    tmp_path: Path,
) -> None:
    """--days 0.5 on the small scenario simulates half a day (it was 2 days whatever --days
    said); --size with small or fleet, whose clusters are their own, is a usage error naming
    --size (it was ignored)."""
    code, out = invoke("simulate", "--scenario", "small", "--days", "0.5", "--quiet",
                       "--policy", "fairshare", "--out", str(tmp_path / "half"))
    assert code == 0, out
    (summary,) = json.loads((tmp_path / "half" / "summary.json").read_text())
    assert summary["sim_days"] == 0.5
    for scenario in ("small", "fleet"):
        code, out = invoke("simulate", "--scenario", scenario, "--size", "64", "--out",
                           str(tmp_path / scenario))
        assert code == 2
        assert (f"Invalid value for --size: scenario '{scenario}' has its own cluster; --size "
                "sizes the seed scenario and traces") in out


def test_trace_replay(tmp_path: Path) -> None:
    """An ITP-format trace with 3 synthetic budgets replays on a 2x8 cluster."""
    trace = tmp_path / "trace.csv"
    lines = ["job_id,submission_time,duration,num_gpu"]
    lines += [f"j{i},{1000 + 600 * i},{1800 + 300 * (i % 5)},{1 + i % 8}" for i in range(30)]
    lines += [f"d{i},{1200 + 900 * i},300,1" for i in range(10)]  # short debug-sized jobs
    trace.write_text("\n".join(lines) + "\n")
    code, out = invoke("simulate", "--trace", str(trace), "--format", "itp", "--budgets", "3",
                       "--cluster", "2x8", "--quiet", "--out", str(tmp_path / "o"))
    assert code == 0, out
    summaries = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert all(s["workloads"] == 40 for s in summaries)


def test_a_gzipped_traces_scenario_is_named_without_its_suffixes(tmp_path: Path) -> None:
    """``--trace trace.csv.gz``: the run's scenario (summary.json, the report's title) is
    ``trace``, as for ``trace.csv``; it was ``trace.csv``."""
    import gzip

    lines = ["job_id,submission_time,duration,num_gpu"]
    lines += [f"j{i},{1000 + 600 * i},{1800 + 300 * (i % 5)},{1 + i % 8}" for i in range(10)]
    with gzip.open(tmp_path / "trace.csv.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    code, out = invoke("simulate", "--trace", str(tmp_path / "trace.csv.gz"), "--format",
                       "itp", "--budgets", "2", "--cluster", "2x8", "--quiet", "--out",
                       str(tmp_path / "o"))
    assert code == 0, out
    summaries = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [s["scenario"] for s in summaries] == ["trace", "trace"]


def test_sweep_runs_every_combination(tmp_path: Path) -> None:
    """A 2 x 1 grid on two worker processes: two rows in sweep.csv and sweep.json, a plot."""
    code, out = invoke("sweep", "--scenario", "small", "--grid", "lookback=1d,3d", "--grid",
                       "max_min_runtime=4h", "--jobs", "2", "--quiet", "--out", str(tmp_path))
    assert code == 0, out
    with (tmp_path / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [float(r["lookback"]) for r in rows] == [86400, 3 * 86400]
    assert all(float(r["max_min_runtime"]) == 4 * 3600 for r in rows)
    assert len(json.loads((tmp_path / "sweep.json").read_text())) == 2
    assert (tmp_path / "sweep.png").stat().st_size > 0
    assert (tmp_path / "sweep.svg").stat().st_size > 0


def test_sweep_bad_grid_key(tmp_path: Path) -> None:
    """An unknown --grid key is a usage error naming --grid."""
    code, out = invoke("sweep", "--scenario", "small", "--grid", "nope=1,2", "--out",
                       str(tmp_path))
    assert code == 2
    assert "--grid" in out and "nope" in out


def test_tree_and_cluster_files(tmp_path: Path) -> None:
    """A JSON tree re-weighting the small scenario's own budgets and a TOML host list are
    used: the summary reports the file's cluster, and per-budget waits cover teams and
    leaves."""
    from apportion.sim.scenarios import small_scenario

    leaves = small_scenario().tree.leaves
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps({leaf: 1 + i for i, leaf in enumerate(leaves)}))
    hosts = tmp_path / "hosts.toml"
    hosts.write_text("".join(f'[[hosts]]\nname = "n{i}"\ngpus = 4\n' for i in range(6)))
    code, out = invoke("simulate", "--scenario", "small", "--tree", str(tree), "--cluster",
                       str(hosts), "--policy", "fairshare", "--quiet", "--out",
                       str(tmp_path / "o"))
    assert code == 0, out
    (s,) = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (s["hosts"], s["gpus"]) == (6, 24)
    assert set(s["wait_s"]["per_budget"]) & set(leaves)


DATA = Path(__file__).parent / "data"


def test_trace_without_budgets_names_the_flags(tmp_path: Path) -> None:
    """An ITP trace (no budget column) without --budgets is a usage error that names the
    flags as typed (--budgets N, --budget-column NAME), not the Python arguments."""
    code, out = invoke("simulate", "--trace", str(DATA / "itp" / "cluster10.csv"), "--format",
                       "itp", "--cluster", "2x8", "--quiet", "--out", str(tmp_path))
    assert code == 2, out
    assert "pass --budgets N" in out and "--budget-column NAME" in out
    assert "budgets=N" not in out and "budget_column" not in out


def test_sacct_trace_without_cluster_runs_on_its_own_hosts(tmp_path: Path) -> None:
    """A sacct trace with NodeList and no --cluster runs on the hosts it names (4 hosts of
    8 GPUs), and says so."""
    code, out = invoke("simulate", "--trace", str(DATA / "sacct_nodes.txt"), "--format",
                       "sacct", "--policy", "fairshare", "--quiet", "--out", str(tmp_path))
    assert code == 0, out
    assert "cluster from the trace's NodeList: 4 hosts, 8 GPUs each, 32 GPUs" in out
    (s,) = json.loads((tmp_path / "summary.json").read_text())
    assert (s["hosts"], s["gpus"]) == (4, 32)


def test_sacct_trace_without_nodelist_or_cluster_is_refused(tmp_path: Path) -> None:
    """A sacct trace that does not name its hosts, given without --cluster, is refused with
    a message naming --cluster (and NodeList); nothing is written."""
    out_dir = tmp_path / "o"
    code, out = invoke("simulate", "--trace", str(DATA / "sacct_sample.txt"), "--format",
                       "sacct", "--quiet", "--out", str(out_dir))
    assert code == 2, out
    assert "--cluster HOSTSxGPUS" in out and "NodeList" in out
    assert not out_dir.exists()


def test_size_gives_a_trace_its_cluster(tmp_path: Path) -> None:
    """--size 16 without --cluster runs a trace on 2 hosts of 8 GPUs."""
    code, out = invoke("simulate", "--trace", str(DATA / "sacct_sample.txt"), "--format",
                       "sacct", "--size", "16", "--policy", "fairshare", "--quiet",
                       "--out", str(tmp_path))
    assert code == 0, out
    (s,) = json.loads((tmp_path / "summary.json").read_text())
    assert (s["hosts"], s["gpus"]) == (2, 16)


def test_map_with_sacct_is_refused_naming_the_flags(tmp_path: Path) -> None:
    """--map with --format sacct is a usage error naming both flags."""
    code, out = invoke("simulate", "--trace", str(DATA / "sacct_sample.txt"), "--format",
                       "sacct", "--map", "gpus=x", "--cluster", "2x8", "--out", str(tmp_path))
    assert code == 2, out
    assert "--map" in out and "--format sacct" in out


def test_map_errors_name_the_flag(tmp_path: Path) -> None:
    """A --map item without '=' or naming no canonical field is refused naming --map."""
    for item, expected in (("gpus", "expected canonical=column, got 'gpus'"),
                           ("gpuz=num_gpu", "gpuz: not a canonical field")):
        code, out = invoke("simulate", "--trace", str(DATA / "itp" / "cluster10.csv"),
                           "--format", "csv", "--map", item, "--cluster", "2x8",
                           "--out", str(tmp_path))
        assert code == 2 and "--map" in out and expected in out, (item, out)
        assert "mapping" not in out


def test_a_report_writer_that_cannot_be_imported_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When apportion.sim.report cannot be imported, simulate exits non-zero saying that
    report.html could not be written (no silent skip)."""
    monkeypatch.setitem(sys.modules, "apportion.sim.report", None)
    code, out = invoke("simulate", "--scenario", "small", "--days", "1", "--policy",
                       "fairshare", "--quiet", "--out", str(tmp_path))
    assert code == 1, out
    assert "report.html: cannot write the report" in out
    assert not (tmp_path / "report.html").exists()


def test_an_optional_engine_setting_takes_none_whatever_the_build(tmp_path: Path) -> None:
    """--set checkpoint_default=none (its documented default) is read as None, with the
    compiled core as with the pure one (the compiled class reports ``float | None`` as a
    plain ``type``, which once made it refuse 'none')."""
    code, out = invoke("simulate", "--scenario", "small", "--days", "0.2", "--policy",
                       "fairshare", "--set", "checkpoint_default=none", "--quiet",
                       "--out", str(tmp_path))
    assert code == 0, out
    (s,) = json.loads((tmp_path / "summary.json").read_text())
    assert s["sim_config"]["checkpoint_default"] is None


def test_a_trace_spanning_more_than_the_simulator_replays_is_refused_naming_the_row(
        tmp_path: Path) -> None:
    """A submit time of 1e12 s (a time in milliseconds, say) would make a run of 11.6
    million days that fills the memory hour by hour: refused at once naming the workload
    and the span, and --days over 3,660 is refused as typed; --days 2 replays the start
    (1 of the 2 workloads, said in the header)."""
    trace = tmp_path / "far.csv"
    trace.write_text("id,submit_time,gpus,duration\na,0,1,3600\nb,1e12,1,60\n")
    args = ("simulate", "--trace", str(trace), "--budgets", "2", "--cluster", "2x8",
            "--policy", "fairshare", "--quiet", "--out")
    code, out = invoke(*args, str(tmp_path / "o1"))
    assert code == 1
    assert "workload 'b' is submitted 11,574,074 days after the first" in out
    assert "Give --days" in out
    code, out = invoke(*args, str(tmp_path / "o2"), "--days", "5000")
    assert code == 2 and "'--days': 5000 is not in the range" in out
    code, out = invoke(*args, str(tmp_path / "o3"), "--days", "2")
    assert code == 0, out
    assert out.startswith("scenario far: 1 workload submitted in the 2 d replayed (of 2 in "
                          "it), 2 hosts")


def test_trace_warnings_and_rejected_workloads_are_shown(tmp_path: Path) -> None:
    """Rows the import skips are named on stderr with their line (once for a sweep over
    two seeds), and workloads that cannot run on the cluster are a row of the table, not
    left out of it: here a 16-GPU job on 8 GPUs."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration\na,0,1,3600\nb,60,0,1800\nc,120,16,60\n")
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--budgets", "2", "--cluster", "1x8", "--days",
        "1", "--policy", "fairshare", "--quiet", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert f"warning: {trace}: skipped 1 row: no GPUs (first at line 3)\n" in result.stderr
    rejected = next(line for line in result.stdout.splitlines() if "rejected" in line)
    assert rejected.split() == ["rejected", "(too", "large", "or", "invalid)", "1"]
    assert "rejected (too large or invalid)</th><td>1<" in (
        tmp_path / "o" / "report.html").read_text()
    result = CliRunner().invoke(main, [
        "sweep", "--trace", str(trace), "--budgets", "2", "--cluster", "1x8", "--days", "1",
        "--grid", "lookback=1h,2h", "--seeds", "0,1", "--quiet", "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("skipped 1 row: no GPUs") == 1


def test_cluster_on_the_seed_scenario_warns_of_the_workload_size_and_dropped_host_events(
        tmp_path: Path) -> None:
    """--cluster 10x8 on the seed scenario: stderr says its workload is sized for 1,024
    GPUs and which --size fits the 80 GPUs, and how many host events (those of its hosts
    h010 and up) were dropped, which summary.json counts in ignored_host_events, and why
    its 128-GPU workloads were rejected (more than the 80 GPUs). With
    --size 80 the scenario is built on hosts h000-h009 itself: nothing to say. The report's
    Scenario table counts the 10 hosts and the host events replayed, not the 128 hosts'."""
    events = seed_scenario(days=1, size=1024).host_events
    dropped = sum(1 for e in events if int(e.host[1:]) >= 10)
    assert dropped  # the check below means something
    args = ["simulate", "--scenario", "seed", "--cluster", "10x8", "--days", "1",
            "--policy", "fairshare", "--quiet", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    dropped_line = (f"warning: --cluster: {dropped} host events of hosts not in --cluster "
                    "were dropped (counted in ignored_host_events)\n")
    assert result.stderr == (
        "warning: --cluster: the seed scenario's workload is sized for 1,024 GPUs; with 80 "
        "GPUs here give --size 80 to scale it\n" + dropped_line
        + "warning: 5 workloads rejected: gpus: 128 is more than the cluster's 80 (first: "
        "workload train-00020)\n")
    (s,) = json.loads((tmp_path / "summary.json").read_text())
    assert s["ignored_host_events"] == dropped
    kept = [e for e in events if int(e.host[1:]) < 10]  # the report's Scenario table: these
    scenario = (tmp_path / "report.html").read_text().split("<h2>Scenario</h2>", 1)[1]
    for key, value in (("hosts", 10), ("host_failures", sum(e.kind.name == "FAIL" for e in kept)),
                       ("host_drains", sum(e.kind.name == "UNHEALTHY" for e in kept))):
        assert f"<tr><th>{key}</th><td>{value}</td></tr>" in scenario, key
    scaled = CliRunner().invoke(main, [*args, "--size", "80"])
    assert scaled.exit_code == 0, scaled.output
    assert scaled.stderr == ""


def test_the_fleet_toml_example_of_the_docs_runs_as_written(tmp_path: Path) -> None:
    """The fleet.toml of docs/simulator.md "Fleets", with the command its first line gives
    (for 2 days): it runs without a warning (its override names a budget of the seed tree,
    its hosts the seed scenario's own at the --size given) on its two pools."""
    docs = (Path(__file__).parents[2] / "docs" / "simulator.md").read_text()
    example = docs.split("```toml\n# fleet.toml:", 1)[1].split("```", 1)[0]
    command = example.split("\n", 1)[0].split()
    fleet = tmp_path / "fleet.toml"
    fleet.write_text("# fleet.toml:" + example)
    assert command[:2] == ["apportion", "simulate"] and command[-2:] == ["--out", "DIR"]
    args = [str(fleet) if a == "fleet.toml" else a for a in command[1:-2]]
    result = CliRunner().invoke(main, [*args, "--days", "2", "--quiet", "--out",
                                       str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    summaries = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert list(summaries[0]["pools"]) == ["east/H100", "west/B200", "fleet"]


def test_a_trace_where_no_workload_starts_is_reported_to_the_end(tmp_path: Path) -> None:
    """A trace whose only workload asks for more GPUs than the cluster has (32 on 2x8), so
    that nothing ever starts and every number column of the workloads table is empty where
    a start would be: the run ends normally, prints its table with the workload rejected
    under both policies, and writes summary.json and report.html saying so."""
    trace = tmp_path / "big.csv"
    trace.write_text("id,submit_time,gpus,duration\na,0,32,1h\n")
    out = tmp_path / "o"
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--budgets", "1", "--cluster", "2x8", "--days",
        "1", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rejected = next(line for line in result.stdout.splitlines() if "rejected" in line)
    assert rejected.split()[-2:] == ["1", "1"]
    summaries = json.loads((out / "summary.json").read_text())
    assert [(s["policy"], s["rejected"]) for s in summaries] == [("fairshare", 1),
                                                                 ("legacy", 1)]
    assert "rejected (too large or invalid)</th><td>1</td><td>1<" in (
        out / "report.html").read_text()


def test_a_run_whose_report_fails_leaves_its_own_summary_and_no_earlier_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 0.1-day run into the --out of a 0.2-day run, whose report writer fails: summary.json
    is this run's (written before the report), and the earlier run's report.html is gone
    rather than left beside this run's tables."""
    args = ["simulate", "--scenario", "small", "--quiet", "--out", str(tmp_path), "--days"]
    assert CliRunner().invoke(main, [*args, "0.2"]).exit_code == 0

    def failing_report(*_args: object, **_kw: object) -> None:
        raise RuntimeError("the report failed")

    monkeypatch.setattr("apportion.sim.report.write_report", failing_report)
    with pytest.raises(RuntimeError, match="the report failed"):
        CliRunner().invoke(main, [*args, "0.1"], catch_exceptions=False)
    summaries = json.loads((tmp_path / "summary.json").read_text())
    assert [s["sim_days"] for s in summaries] == [0.1, 0.1]
    assert not (tmp_path / "report.html").exists()


def test_a_run_that_stops_before_its_outputs_leaves_no_earlier_summary_or_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run into the --out of an earlier run that stops after fair share's run (its
    tables written), before legacy's: neither the earlier summary.json nor its report.html
    is left beside the new tables."""
    args = ["simulate", "--scenario", "small", "--days", "0.1", "--quiet", "--out",
            str(tmp_path)]
    assert CliRunner().invoke(main, args).exit_code == 0
    from apportion.sim import run

    real_make_policy = run.make_policy

    def legacy_fails(name: str, *rest: Any) -> Any:
        if name == "legacy":
            raise RuntimeError("legacy failed")
        return real_make_policy(name, *rest)

    monkeypatch.setattr(run, "make_policy", legacy_fails)
    with pytest.raises(RuntimeError, match="legacy failed"):
        CliRunner().invoke(main, args, catch_exceptions=False)
    assert (tmp_path / "workloads-fairshare.csv").exists()
    assert not (tmp_path / "summary.json").exists()
    assert not (tmp_path / "report.html").exists()


def test_cluster_files_and_size_are_read_as_typed(tmp_path: Path) -> None:
    """A host list's gpus must be a whole number (8.7 and true are refused, not read as 8
    and 1) and a missing key is named; --size must be a multiple of 8 (not rounded down),
    refused naming --size for the seed scenario and for a trace."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration\na,0,1,3600\n")
    for text, problem in (('gpus = 8.7', "hosts[1].gpus: must be a whole number >= 1, got 8.7"),
                          ('gpus = true', "hosts[1].gpus: must be a whole number >= 1, got true"),
                          ('', "hosts[1].gpus: missing")):
        hosts = tmp_path / "hosts.toml"
        hosts.write_text(f'[[hosts]]\nname = "a"\n{text}\n')
        code, out = invoke("simulate", "--trace", str(trace), "--budgets", "1", "--cluster",
                           str(hosts), "--quiet", "--out", str(tmp_path / "o"))
        assert code == 2 and problem in out, out
    for source in (("--scenario", "seed"), ("--trace", str(trace), "--budgets", "1")):
        code, out = invoke("simulate", *source, "--size", "100", "--days", "1", "--quiet",
                           "--out", str(tmp_path / "o"))
        assert code == 2
        assert "'--size': 100 is not a multiple of 8 (hosts of 8 GPUs); 96 or 104?" in out


def test_tables_left_by_an_earlier_run_in_the_same_directory_are_named(tmp_path: Path) -> None:
    """Both policies, then fair share alone into the same --out: legacy's three tables are
    an earlier run's, beside this run's summary and report, and a warning says so."""
    args = ["simulate", "--scenario", "small", "--days", "0.2", "--quiet", "--out",
            str(tmp_path)]
    assert CliRunner().invoke(main, args).exit_code == 0
    result = CliRunner().invoke(main, [*args, "--policy", "fairshare"])
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"warning: {tmp_path}: budget_hours-legacy.csv, cluster_hours-legacy.csv, "
        "workloads-legacy.csv are from an earlier run (this one ran fairshare)\n")
    again = CliRunner().invoke(main, [*args, "--policy", "fairshare"])
    assert "earlier run" in again.stderr  # still there: never deleted
    both = CliRunner().invoke(main, args)
    assert both.stderr == ""


@pytest.mark.parametrize("times", [
    ("2024-01-01T09:00:00", "2024-01-02T09:00:00", "2024-01-03T09:00:00"),
    ("0", "86400", "172800"),
])
def test_the_default_span_of_a_trace_replays_its_last_workload_submitted_on_a_day_boundary(
        tmp_path: Path, times: tuple[str, ...]) -> None:
    """Without --days, a trace whose last workload is submitted exactly 2 days after its
    first (ISO times a day apart, or seconds 0, 86400, 172800) replays 3 whole days and
    all 3 workloads (the span was 2 days, which left the last one out)."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration\n" + "".join(
        f"{name},{t},x,1,100\n" for name, t in zip("abc", times, strict=True)))
    code, out = invoke("simulate", "--trace", str(trace), "--cluster", "1x8", "--policy",
                       "fairshare", "--quiet", "--out", str(tmp_path / "o"))
    assert code == 0, out
    origin = "; hour 0 is 2024-01-01 09:00:00+00:00" if "T" in times[0] else ""
    assert out.startswith(f"scenario t: 3 workloads submitted in the 3 d replayed, 1 host"
                          f"{origin}\n")
    (summary,) = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (summary["sim_days"], summary["workloads"], summary["completed"]) == (3, 3, 3)


@pytest.mark.parametrize(("times", "origin"), [
    (("2024-03-01T10:30:00+01:00", "2024-03-01T11:00:00+01:00"), "2024-03-01T09:30:00+00:00"),
    (("5000", "6800"), None),
])
def test_the_outputs_say_when_hour_0_of_a_trace_of_wall_clock_times_is(
        tmp_path: Path, times: tuple[str, ...], origin: str | None) -> None:
    """A trace of ISO times whose first submission is 2024-03-01T10:30:00+01:00: summary.json's
    ``time_origin`` (after ``scenario``) is that time in UTC, 2024-03-01T09:30:00+00:00, for
    every policy; report.html's header note and simulate's line above the table say hour 0
    is then. A trace in seconds has no such time: ``time_origin`` is null, and neither the
    report nor the line names an hour 0."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration\n" + "".join(
        f"{name},{t},x,1,100\n" for name, t in zip("ab", times, strict=True)))
    code, out = invoke("simulate", "--trace", str(trace), "--cluster", "1x8", "--quiet",
                       "--out", str(tmp_path / "o"))
    assert code == 0, out
    summaries = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [s["time_origin"] for s in summaries] == [origin, origin]
    assert list(summaries[0])[:3] == ["policy", "scenario", "time_origin"]
    report = (tmp_path / "o" / "report.html").read_text()
    first_line = out.splitlines()[0]
    if origin is None:
        assert "hour 0" not in report and "hour 0" not in first_line
    else:
        assert f"; hour 0 is {origin} (the trace's first submission)" in report
        assert first_line.endswith("; hour 0 is 2024-03-01 09:30:00+00:00"), first_line


def test_clamped_min_runtime_counts_a_min_runtime_the_trace_import_lowered(
        tmp_path: Path) -> None:
    """A trace job asking 2 h of minimum runtime, run with max_min_runtime=1h: the import
    lowers it (and warns), and summary.json's clamped_min_runtime counts it, 1, in simulate
    and at every point of a sweep with that setting, as in a sweep over the cap where the
    engine lowers it (simulate said 0, and so did a sweep whose points all had the
    import's cap)."""
    trace = tmp_path / "cl.csv"
    trace.write_text("id,submit_time,budget,gpus,duration,min_runtime\n"
                     "j1,0,a,1,36000,2h\nj2,0,b,1,36000,30m\n")
    common = ("--trace", str(trace), "--cluster", "1x8", "--days", "1", "--quiet")
    result = CliRunner().invoke(main, [
        "simulate", *common, "--policy", "fairshare", "--set", "max_min_runtime=1h",
        "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert "1 row: min_runtime above max_min_runtime (1 h): lowered to it" in result.stderr
    (summary,) = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["clamped_min_runtime"] == 1
    for out, grid in (("w1", ("--set", "max_min_runtime=1h", "--grid", "lookback=1d,2d")),
                      ("w2", ("--grid", "max_min_runtime=1h,8h"))):
        code, text = invoke("sweep", *common, *grid, "--out", str(tmp_path / out))
        assert code == 0, text
        points = json.loads((tmp_path / out / "sweep.json").read_text())
        assert [p["summary"]["clamped_min_runtime"] for p in points] == (
            [1, 1] if out == "w1" else [1, 0])


def test_an_empty_output_path_is_refused_naming_the_flag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--out '' (simulate, sweep, whatif, export-trace) and report usage -o '' are usage
    errors naming the flag, and nothing is written: an empty path is the current directory,
    where simulate wrote its outputs."""
    monkeypatch.chdir(tmp_path)
    directory = "directory (. for the current one)"
    for args, flag, kind in (
            (("simulate", "--scenario", "small", "--days", "0.05", "--quiet", "--out"),
             "'--out'", directory),
            (("sweep", "--scenario", "small", "--grid", "lookback=1d", "--quiet", "--out"),
             "'--out'", directory),
            (("whatif", "--since", "1d", "--out"), "'--out'", directory),
            (("export-trace", "--since", "1d", "--out"), "'--out'", "file"),
            (("report", "usage", "-o"), "'--output' / '-o'", "file")):
        code, out = invoke(*args, "")
        assert code == 2, (args, out)
        assert f"Invalid value for {flag}: empty; give a {kind}" in out
    assert list(tmp_path.iterdir()) == []


def test_a_host_name_given_twice_is_refused_naming_the_host(tmp_path: Path) -> None:
    """A --cluster file naming a host twice is refused naming the host and both places (it
    said only "duplicate host names")."""
    hosts = tmp_path / "c2.toml"
    hosts.write_text("".join(f'[[hosts]]\nname = "{n}"\ngpus = 8\n' for n in "aba"))
    code, out = invoke("simulate", "--scenario", "small", "--cluster", str(hosts), "--out",
                       str(tmp_path / "o"))
    assert code == 2
    assert (f"Invalid value for --cluster: {hosts}:8: hosts[3].name: 'a' is the name of "
            "hosts[1] too") in out


def test_a_toml_error_at_the_end_of_a_file_gives_its_line(tmp_path: Path) -> None:
    """A --cluster or --tree TOML file that breaks off gives its line and column, as tomllib
    gives them for any other place, with the file's name (it said only "at end of
    document")."""
    cluster = tmp_path / "c.toml"
    cluster.write_text('hosts = [{name = "h1", gpus = 8}\n')
    tree = tmp_path / "t.toml"
    tree.write_text("a = ")
    for flag, path, problem in (
            ("--cluster", cluster, "Unclosed array (at line 2, column 1: the end of the file)"),
            ("--tree", tree, "Invalid value (at line 1, column 5: the end of the file)")):
        code, out = invoke("simulate", "--scenario", "small", flag, str(path), "--out",
                           str(tmp_path / "o"))
        assert code == 2
        assert f"Invalid value for {flag}: {path}: {problem}" in out
    tree.write_text("a = \nb = 1\n")
    code, out = invoke("simulate", "--scenario", "small", "--tree", str(tree), "--out",
                       str(tmp_path / "o"))
    assert f"{tree}: Invalid value (at line 1, column 5)\n" in out


SACCT_KINDS = """\
JobID|User|Account|Partition|Submit|Start|End|Elapsed|AllocTRES|State
1|alice|llm|main|2026-12-06T22:06:00|2026-12-06T22:06:01|2026-12-06T23:06:01|01:00:00|gres/gpu=8,gres/gpu:a100=8|COMPLETED
2|bob|vision|main|2026-12-06T22:06:30|2026-12-06T22:06:38|2026-12-06T23:06:38|01:00:00|gres/gpu=4,gres/gpu:h100=4|COMPLETED
3|bob|vision|main|2026-12-06T22:07:30|2026-12-06T22:07:38|2026-12-06T23:07:38|01:00:00|gres/gpu=4,gres/gpu:h100=4|COMPLETED
"""


def fleet_file(tmp_path: Path, cluster: str) -> Path:
    """Two hosts of 8 GPUs in ``cluster``, kinds named as in Slurm's gres.conf (a100, h100)."""
    path = tmp_path / f"fleet-{cluster}.toml"
    path.write_text(f'hosts = [\n  {{ name = "gpu1", gpus = 8, cluster = "{cluster}", '
                    'kind = "a100" },\n'
                    f'  {{ name = "gpu3", gpus = 8, cluster = "{cluster}", kind = "h100" }},\n]\n')
    return path


def test_a_fleet_names_kinds_in_lower_case_and_sacct_work_asking_in_upper_case_runs(
        tmp_path: Path) -> None:
    """The sacct importer upper-cases GPU kinds (A100, H100); a --cluster file naming them
    a100 and h100, as gres.conf does, takes that work: none of the 3 workloads is rejected,
    and the run says nothing on stderr about rejections."""
    trace = tmp_path / "s.txt"
    trace.write_text(SACCT_KINDS)
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--format", "sacct", "--cluster",
        str(fleet_file(tmp_path, "main")), "--policy", "fairshare", "--quiet", "--out",
        str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    (s,) = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (s["workloads"], s["rejected"], s["rejected_reasons"]) == (3, 0, [])
    assert "rejected" not in result.stderr


def test_rejected_workloads_say_why_on_stderr_and_in_the_summary(tmp_path: Path) -> None:
    """Work asking for a cluster the fleet does not have (partition main; the fleet's hosts
    are in east) is rejected, and the run says why: one stderr line per reason with the
    count and the first workload, printed once for two policies, and the same reason, count
    and first workload in summary.json's rejected_reasons under each policy."""
    trace = tmp_path / "s.txt"
    trace.write_text(SACCT_KINDS)
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--format", "sacct", "--cluster",
        str(fleet_file(tmp_path, "east")), "--quiet", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    why = "cluster: unknown cluster 'main' (the fleet has east)"
    assert result.stderr == f"warning: 3 workloads rejected: {why} (first: workload 1)\n"
    for s in json.loads((tmp_path / "o" / "summary.json").read_text()):
        assert s["rejected"] == 3
        assert s["rejected_reasons"] == [{"reason": why, "count": 3, "first": "1"}]


@pytest.mark.parametrize(("cluster", "problem"), [
    ("1000000x8", "1000000x8: 1,000,000 hosts is more than any fleet has (at most 100,000)"),
    ("4x2048", "4x2048: 2,048 GPUs per host is more than any fleet has (at most 1,024)"),
])
def test_cluster_hosts_x_gpus_beyond_any_fleet_is_refused_naming_the_flag(
        tmp_path: Path, cluster: str, problem: str) -> None:
    """--cluster HOSTSxGPUS with more than 100,000 hosts or more than 1,024 GPUs per host (a
    typo with extra zeros) is a usage error naming --cluster and the bound, before any run."""
    code, out = invoke("simulate", "--scenario", "small", "--cluster", cluster, "--quiet",
                       "--out", str(tmp_path / "o"))
    assert code == 2 and f"Invalid value for --cluster: {problem}" in out, out
    assert not (tmp_path / "o" / "summary.json").exists()


def test_cluster_and_tree_files_unreadable_or_not_utf8_are_refused_and_a_bom_is_skipped(
        tmp_path: Path) -> None:
    """A --cluster that is a directory, or a --cluster / --tree file with a byte that is
    not UTF-8, is a usage error naming the flag, the file and (for the byte) its line and
    column, not a traceback; a file saved with a byte-order mark and CRLF line ends (as
    Windows editors write) is read like any other."""
    folder = tmp_path / "hosts.toml"
    folder.mkdir()
    code, out = invoke("simulate", "--scenario", "small", "--cluster", str(folder), "--quiet",
                       "--out", str(tmp_path / "o"))
    assert code == 2 and f"Invalid value for --cluster: {folder}: cannot read: " in out, out
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'hosts = [\r\n  { name = "h\xe9", gpus = 8 },\r\n]\r\n')
    for flag in ("--cluster", "--tree"):
        code, out = invoke("simulate", "--scenario", "small", flag, str(latin1), "--quiet",
                           "--out", str(tmp_path / "o"))
        assert code == 2, out
        assert (f"Invalid value for {flag}: {latin1}:2: not UTF-8 text: byte 0xe9 at column "
                "14 (save the file as UTF-8)") in out, out
    hosts = tmp_path / "bom.toml"
    hosts.write_bytes(b"\xef\xbb\xbfhosts = [\r\n" + b"".join(
        b'  { name = "h00%d", gpus = 8 },\r\n' % i for i in range(4)) + b"]\r\n")
    tree = tmp_path / "bom-tree.json"
    tree.write_bytes(b'\xef\xbb\xbf{"a": 1, "b": 1}\r\n')
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration,budget\nx,0,8,3600,a\ny,0,8,3600,b\n")
    code, out = invoke("simulate", "--trace", str(trace), "--cluster", str(hosts), "--tree",
                       str(tree), "--policy", "fairshare", "--quiet", "--out", str(tmp_path / "o"))
    assert code == 0, out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary[0]["gpus"] == 32 and summary[0]["completed"] == 2


@pytest.mark.parametrize(("cluster", "problem"), [
    ("fleet-next.toml", "no such file, and not HOSTSxGPUS: 'fleet-next.toml'"),
    ("hosts.toml", "no such file, and not HOSTSxGPUS: 'hosts.toml'"),
    ("4x8x2", "expected HOSTSxGPUS like 128x8 or a file, got '4x8x2'"),
])
def test_a_missing_cluster_file_is_named_as_missing_even_with_an_x_in_its_name(
        tmp_path: Path, cluster: str, problem: str) -> None:
    """--cluster naming a .toml or .json file that does not exist says no such file, whether
    or not its name holds an 'x' (fleet-next.toml was told 'expected HOSTSxGPUS like
    128x8', as if it were a mistyped size); a mistyped size still gets that message."""
    where = str(tmp_path / cluster) if cluster.endswith(".toml") else cluster
    code, out = invoke("simulate", "--scenario", "small", "--cluster", where, "--quiet",
                       "--out", str(tmp_path / "o"))
    assert code == 2, out
    assert f"Invalid value for --cluster: {problem.replace(cluster, where)}" in " ".join(
        out.split()), out


@pytest.mark.parametrize("scenario", ["small", "seed", "fleet"])
def test_a_built_in_scenario_of_less_than_a_second_runs(tmp_path: Path, scenario: str) -> None:
    """--days 1e-9 (a window shorter than a second) is a run like any other: the scenario's
    workloads arrive at 0, not at 'a second before the end', which was before the start
    and crashed the run ('CoreError: state: time went backwards (-1.0 < 0.0)', a
    traceback); its calibration has no nan."""
    size = ("--size", "32") if scenario == "seed" else ()
    code, out = invoke("simulate", "--scenario", scenario, *size, "--days", "1e-9",
                       "--quiet", "--out", str(tmp_path))
    assert code == 0, out
    assert json.loads((tmp_path / "summary.json").read_text())[0]["sim_days"] == 1e-9
    assert "<td>nan</td>" not in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("command", [
    ("simulate",), ("sweep", "--grid", "lookback=1d"), ("bench",)])
def test_a_scenario_beside_a_trace_or_a_format_without_one_is_refused(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    """--trace with --scenario, and --format with a built-in scenario, are usage errors
    naming the flags, before anything runs: the trace was replayed with the --scenario
    ignored, and the --format ignored, without a word (bench refused only the first)."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration\na,0,8,3600\n")
    out = ("--quiet", "--out", str(tmp_path / "o")) if command[0] != "bench" else ()
    code, text = invoke(*command, "--trace", str(trace), "--budgets", "1", "--size", "32",
                        "--scenario", "small", *out)
    assert code == 2 and "--trace and --scenario exclude each other" in text, text
    code, text = invoke(*command, "--scenario", "small", "--format", "itp", "--days", "0.1",
                        *out)
    assert code == 2 and "Error: --format needs --trace" in text, text
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", [("simulate",), ("sweep", "--grid", "lookback=1d"), ("bench",)])
def test_budgets_beyond_any_organisation_are_refused_naming_the_flag(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    """--budgets 100000000 (a typo with extra zeros) is a usage error naming --budgets and
    the bound of 10,000, before any run: every synthetic budget is a tree node with a row
    per simulated hour, so it ran for hours on gigabytes (100,000 budgets took over 2 min
    and 1.7 GB for one simulated day)."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration\na,0,8,3600\n")
    out = ("--quiet", "--out", str(tmp_path / "o")) if command[0] != "bench" else ()
    code, text = invoke(*command, "--trace", str(trace), "--budgets", "100000000", "--size",
                        "32", *out)
    assert code == 2, text
    assert "Invalid value for '--budgets': 100000000 is not in the range 1<=x<=10000." in text
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("source", [("--scenario", "seed"), ("--trace",)])
@pytest.mark.parametrize("command", [("simulate",), ("sweep", "--grid", "lookback=1d"), ("bench",)])
def test_a_size_beyond_any_fleet_is_refused_naming_the_flag(
        tmp_path: Path, command: tuple[str, ...], source: tuple[str, ...]) -> None:
    """--size 800000000 (a typo with extra zeros) is a usage error naming --size and the
    bound, 100,000 hosts of 8 GPUs as --cluster HOSTSxGPUS allows, before any run: it ran
    for minutes building the hosts, printing nothing."""
    if source == ("--trace",):
        trace = tmp_path / "t.csv"
        trace.write_text("id,submit_time,gpus,duration\na,0,8,3600\n")
        source = ("--trace", str(trace), "--budgets", "1")
    out = ("--quiet", "--out", str(tmp_path / "o")) if command[0] != "bench" else ()
    code, text = invoke(*command, *source, "--size", "800000000", "--days", "0.1", *out)
    assert code == 2, text
    assert ("Invalid value for '--size': 800,000,000 GPUs is more than any fleet has (at "
            "most 800,000: 100,000 hosts of 8)") in " ".join(text.split())
    assert not (tmp_path / "o").exists()


def test_a_trace_whose_budget_column_is_empty_says_so_naming_the_flags(tmp_path: Path) -> None:
    """simulate on a trace whose budget column is empty on every row: a usage error naming
    the column as empty and the flags to use, not 'the trace has no budget column'."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration,budget\na,0,8,3600,\n")
    code, out = invoke("simulate", "--trace", str(trace), "--size", "32", "--quiet", "--out",
                       str(tmp_path / "o"))
    assert code == 2, out
    assert (f"{trace}: budget: the budget column is empty on every row; pass --budgets N"
            in " ".join(out.split())), out


@pytest.mark.parametrize(("name", "text", "problem"), [
    ("hosts.json", '{"hosts": [{"name": null, "gpus": 8}]}',
     "hosts[1].name: must be a non-empty string, got null"),
    ("hosts.json", '{"hosts": [null]}', "hosts[1]: expected a table with name and gpus, got null"),
    ("hosts.json", '{"hosts": [["a", 8]]}',
     'hosts[1]: expected a table with name and gpus, got ["a", 8]'),
    ("hosts.json", '{"hosts": [{"name": "a", "gpus": 8, "cluster": null, "kind": "H100"}]}',
     "host #1 (a): cluster: must be a name without '/', got null"),
    ("hosts.toml", '[[hosts]]\nname = "a"\ngpus = 8\ncluster = "x"\nkind = true\n',
     ":5: host #1 (a): kind: must be a name without '/', got true"),
])
def test_a_cluster_files_refused_value_is_shown_as_the_file_writes_it(
        tmp_path: Path, name: str, text: str, problem: str) -> None:
    """A --cluster file's refused value is shown as JSON or TOML writes it (``null``,
    ``true``, ``["a", 8]``), by the one helper the trace readers use (text.as_written),
    never Python's ``None``, ``True`` or ``['a', 8]``; in a TOML file, after the line of
    the key the message names (``kind`` of host #1, line 5; not the host's ``[[hosts]]``
    line)."""
    hosts = tmp_path / name
    hosts.write_text(text)
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration\na,0,1,3600\n")
    code, out = invoke("simulate", "--trace", str(trace), "--budgets", "1", "--cluster",
                       str(hosts), "--quiet", "--out", str(tmp_path / "o"))
    assert code == 2, out
    at = "" if problem.startswith(":") else ": "
    assert f"Invalid value for --cluster: {hosts}{at}{problem}" in " ".join(out.split()), out


@pytest.mark.parametrize(("text", "problem"), [
    ('{"ai": {"weight": "x", "x": 1, "y": 1}}', "ai: weight must be a number, got 'x'"),
    ('{"ai": {"weight": null, "x": 1, "y": 1}}', "ai: weight must be a number, got null"),
    ('{"ai": {"weight": true, "x": 1, "y": 1}}', "ai: weight must be a number, got true"),
])
def test_a_tree_nodes_own_weight_is_checked_as_a_leafs_is(
        tmp_path: Path, text: str, problem: str) -> None:
    """--tree with a node's own weight ({"ai": {"weight": ..., "x": 1}}) that is not a number
    is a usage error naming --tree, the file and the node, as a leaf's weight is: a string
    or null was a traceback (ValueError, TypeError from float()), and true was read as 1."""
    tree = tmp_path / "tree.json"
    tree.write_text(text)
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration,budget\na,0,8,3600,ai/x\n")
    code, out = invoke("simulate", "--trace", str(trace), "--tree", str(tree), "--size", "32",
                       "--quiet", "--out", str(tmp_path / "o"))
    assert code == 2, out
    assert f"Invalid value for --tree: {tree}: {problem}" in " ".join(out.split()), out


def test_a_budget_column_of_more_than_10000_values_is_refused_naming_the_flag(
        tmp_path: Path) -> None:
    """--budget-column job_id (a column of ids, one budget per job) on a trace of 10,001 jobs
    is a usage error naming --budget-column, the count and the bound --budgets has, before
    any run: it ran as 10,001 budgets (cluster04's 15,802 jobs took a minute and 650 MB for
    one simulated day)."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,gpus,duration\n"
                     + "".join(f"j{i},{i},1,60\n" for i in range(10_001)))
    code, out = invoke("simulate", "--trace", str(trace), "--budget-column", "job_id",
                       "--size", "32", "--days", "0.01", "--quiet", "--out", str(tmp_path / "o"))
    assert code == 2, out
    assert ("Invalid value for --budget-column: job_id: 10,001 distinct values, so 10,001 "
            "budgets (at most 10,000, as --budgets): a column of ids rather than of teams?"
            in " ".join(out.split())), out
    assert not (tmp_path / "o").exists()


def test_a_cluster_file_beyond_any_fleet_is_refused_as_hosts_x_gpus_is(tmp_path: Path) -> None:
    """A --cluster file with a host of more than 1,024 GPUs, or more than 100,000 hosts, is
    refused naming --cluster, the file (and the host) and the bound, as --cluster HOSTSxGPUS
    is: the file was taken as typed (a host of 2,000 GPUs ran)."""
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"hosts": [{"name": "h000", "gpus": 2000}]}))
    code, out = invoke("simulate", "--scenario", "small", "--cluster", str(big), "--quiet",
                       "--out", str(tmp_path / "o"))
    assert code == 2, out
    assert (f"Invalid value for --cluster: {big}: hosts[1].gpus: 2,000 GPUs is more than any "
            "host has (at most 1,024)") in " ".join(out.split()), out
    many = tmp_path / "many.json"
    many.write_text(json.dumps([{"name": f"h{i}", "gpus": 8} for i in range(100_001)]))
    code, out = invoke("simulate", "--scenario", "small", "--cluster", str(many), "--quiet",
                       "--out", str(tmp_path / "o"))
    assert code == 2, out
    assert (f"Invalid value for --cluster: {many}: 100,001 hosts is more than any fleet has "
            "(at most 100,000)") in " ".join(out.split()), out
    assert not (tmp_path / "o").exists()


def test_size_and_cluster_together_on_a_trace_are_refused(tmp_path: Path) -> None:
    """--trace with both --cluster 2x8 and --size 800 is a usage error naming both: each
    gives the trace's cluster, and --size was dropped without a word (the run was on 2
    hosts). With the seed scenario both still run (--size sizes its workload)."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration\na,0,8,3600\n")
    code, out = invoke("simulate", "--trace", str(trace), "--budgets", "1", "--cluster", "2x8",
                       "--size", "800", "--quiet", "--out", str(tmp_path / "o"))
    assert code == 2, out
    assert "--size and --cluster exclude each other with --trace" in out
    assert not (tmp_path / "o").exists()
    code, out = invoke("simulate", "--scenario", "seed", "--cluster", "2x8", "--size", "32",
                       "--days", "0.1", "--policy", "fairshare", "--quiet", "--out",
                       str(tmp_path / "o"))
    assert code == 0, out


@pytest.mark.parametrize("command", [("simulate", "--quiet", "--out", "OUT"), ("bench",)])
def test_a_set_rule_between_two_settings_is_said_in_durations(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    """--set checkpoint_wait=2h --set max_min_runtime=1h: the refusal says the times as
    durations, as they were typed and as sweep's --grid says them, not in seconds
    ('7200 s is over max_min_runtime (3600 s)')."""
    args = [str(tmp_path / "o") if a == "OUT" else a for a in command]
    code, out = invoke(*args, "--set", "checkpoint_wait=2h", "--set", "max_min_runtime=1h")
    assert code == 2, out
    assert ("Invalid value for --set: policy: checkpoint_wait: 2 h is over max_min_runtime "
            "(1 h)") in " ".join(out.split()), out


@pytest.mark.parametrize(("option", "name", "text", "problem"), [
    ("--tree", "tree.yaml", "ai: 1\n", "tree.yaml:1: not valid JSON (read as JSON: only a "
     "name ending in .toml is read as TOML): Expecting value at column 1"),
    ("--tree", "tree.json", '{\n "ai": 1,\n}', "tree.json:3: not valid JSON: Expecting "
     "property name enclosed in double quotes at column 1"),
    ("--cluster", "hosts.tml", 'hosts = [{name = "h1", gpus = 8}]\n',
     "hosts.tml:1: not valid JSON (read as JSON: only a name ending in .toml is read as "
     "TOML): Expecting value at column 1"),
])
def test_a_tree_or_host_file_that_is_not_json_says_it_was_read_as_json(
        tmp_path: Path, option: str, name: str, text: str, problem: str) -> None:
    """A --tree or --cluster file not named .toml is read as JSON; one that is no JSON is a
    usage error naming the option, the file, the line and column, and, unless it is named
    .json, that it was read as JSON because of its name (it said only 'Expecting value:
    line 1 column 1 (char 0)' of a YAML tree or a TOML file named .tml)."""
    path = tmp_path / name
    path.write_text(text)
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,gpus,duration,budget\na,0,8,3600,ai\n")
    code, out = invoke("simulate", "--trace", str(trace), option, str(path),
                       *(["--size", "32"] if option == "--tree" else []),
                       "--quiet", "--out", str(tmp_path / "o"))
    assert code == 2, out
    assert f"Invalid value for {option}: {tmp_path}/{problem}" in " ".join(out.split()), out


def test_a_workload_the_policy_refuses_is_not_said_to_be_too_big_for_the_cluster(
        tmp_path: Path) -> None:
    """A trace row whose time limit (1 h) is shorter than its minimum runtime (2 h) fits the
    cluster but is refused at submission: the table's and the report's row call it rejected
    as too large or invalid, not 'cannot run on this cluster' (which sent the reader to a
    larger --cluster), and stderr gives the reason with the workload."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration,min_runtime,time_limit\n"
                     "a,0,x/y,1,7200,2h,1h\nb,0,x/y,1,600,,\n")
    result = CliRunner().invoke(main, [
        "simulate", "--trace", str(trace), "--cluster", "1x8", "--days", "1", "--policy",
        "fairshare", "--quiet", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    rejected = next(line for line in result.stdout.splitlines() if "rejected" in line)
    assert rejected.split() == ["rejected", "(too", "large", "or", "invalid)", "1"]
    assert ("warning: 1 workload rejected: time_limit: 1 h is shorter than its minimum "
            "runtime of 2 h (first: workload a)") in result.stderr
    report = (tmp_path / "o" / "report.html").read_text()
    assert "rejected (too large or invalid)</th><td>1<" in report
    assert "cannot run on this cluster" not in report


@pytest.mark.parametrize(("option", "text", "where"), [
    ("--tree", "[ai]\nweight = 2\nllm = 1\nvision = \"x\"\n",
     "t.toml:4: ai/vision: weight must be a number, got 'x'"),
    ("--tree", "[budgets]\nai = 1\n\n[budgets.ml]\nweight = true\n",
     "t.toml:5: ml: weight must be a number, got true"),
    ("--cluster", "[[hosts]]\nname = \"h1\"\ngpus = 8\n\n[[hosts]]\nname = \"h2\"\n"
     "gpus = \"eight\"\n", "t.toml:7: hosts[2].gpus: must be a whole number >= 1"),
    ("--cluster", "[[hosts]]\nname = \"h1\"\ngpus = 8\nknid = \"H100\"\n",
     "t.toml:4: hosts[1].knid: not a key of a host"),
    ("--cluster", "[[hosts]]\nname = \"h1\"\ngpus = 8\ncluster = \"east\"\nkind = \"H100\"\n"
     "\n[[hosts]]\nname = \"h2\"\ngpus = 8\n",
     "t.toml:7: host #2 (h2): cluster and kind: every host needs both"),
    ("--cluster", "[[hosts]]\nname = \"h1\"\ngpus = 8\ncluster = \"east\"\nkind = \"H100\"\n"
     "\n[billing]\nH100 = 1\nB200 = 2\n", "t.toml:9: billing.B200: no host has GPU kind B200"),
    ("--cluster", "[[hosts]]\nname = \"h1\"\ngpus = 8\ncluster = \"east\"\nkind = \"H100\"\n"
     "\n[overrides.\"east/H100\"]\n# no such budget\nnobody = 2\n",
     "t.toml:9: overrides: east/H100: 'nobody': unknown budget"),
    ("--cluster", "[overides.\"east/H100\"]\nsmall = 1\n\n[[hosts]]\nname = \"h1\"\ngpus = 8\n",
     "t.toml:1: overides: not a key of a host list"),
], ids=["tree leaf", "tree node weight", "host value", "host key", "host pool", "billing",
        "override budget", "table inside a misspelt key"])
def test_a_refused_toml_tree_or_cluster_file_names_the_line_of_its_key(
        tmp_path: Path, option: str, text: str, where: str) -> None:
    """A --tree or --cluster TOML file refused for a value or a key found after the file
    is read names the line the file writes that key on (or its [[hosts]] table: hosts
    are counted from 1 in the message, host #N as hosts[N]), ``file:line: key: problem``,
    as a trace's rows are named; it named the file and the key only."""
    (tmp_path / "t.toml").write_text(text)
    code, out = invoke("simulate", "--scenario", "small", option, str(tmp_path / "t.toml"),
                       "--quiet", "--out", str(tmp_path / "o"))
    assert code == 2, out
    assert f"Invalid value for {option}: {tmp_path / where}" in out, out
