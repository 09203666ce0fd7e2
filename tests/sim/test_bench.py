"""``apportion bench``: the pass benchmark's limits, and the replay benchmark (fair share
against legacy on the same input in one process, peak memory as the OS counts it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from apportion.bench.replay import peak_rss_mb
from apportion.cli.main import main
from apportion.sim.scenarios import SCENARIOS
from apportion.sim.traces import load_trace

DATA = Path(__file__).parent / "data"
ITP = DATA / "itp" / "cluster10.csv"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/self/status")


def test_peak_rss_is_the_kernels_high_water_mark() -> None:
    """peak_rss_mb() is the process's maximum resident set as the kernel counts it: VmHWM
    of /proc/self/status (to within 1 MiB: the kernel batches each thread's resident-page
    counts, 64 pages at a time), and it grows by what a freshly touched 64 MiB buffer adds
    to the resident set, which Python-level accounting would not see the same way."""
    before = status_kib("VmHWM")
    peak = peak_rss_mb()
    after = status_kib("VmHWM")
    assert before - 1024 <= peak * 1024 <= after + 1024
    current = status_kib("VmRSS")
    extra = max(0, int(peak * 1024) - current) * 1024  # climb past the old high-water mark
    buffer = bytearray(b"\x01") * (extra + 64 * 1024 * 1024)  # written: every page resident
    assert peak_rss_mb() >= peak + 64 - 1
    del buffer


def test_bench_replay_times_both_policies_on_the_same_trace() -> None:
    """bench --trace on an ITP trace: one run per policy in order on every workload the
    importer reads, each with CPU time, policy calls and events; the ratio is fair share's
    CPU time over legacy's; the process's peak memory never falls from one stage to the
    next."""
    code, out = invoke("bench", "--trace", str(ITP), "--format", "itp", "--cluster", "4x8",
                       "--budgets", "3", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["workloads"] == len(load_trace(ITP, "itp", budgets=3).jobs)
    assert (result["hosts"], result["gpus"], result["budgets"]) == (4, 32, 3)
    runs = {r["policy"]: r for r in result["runs"]}
    assert list(runs) == ["fairshare", "legacy"]
    for r in runs.values():
        assert r["cpu_s"] > 0 and r["calls"] > 0 and r["events"] >= result["workloads"]
    assert result["ratio"] == runs["fairshare"]["cpu_s"] / runs["legacy"]["cpu_s"]
    peaks = [result["rss_before_mb"], runs["fairshare"]["peak_rss_mb"],
             runs["legacy"]["peak_rss_mb"]]
    assert peaks == sorted(peaks) and peaks[0] > 0


def test_bench_replay_text_names_the_ratio() -> None:
    """The text form prints one line per policy and the ratio line."""
    code, out = invoke("bench", "--scenario", "small", "--days", "1")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("replay: small,")
    assert [line.split()[0] for line in lines[2:4]] == ["fairshare", "legacy"]
    assert "fair share / legacy CPU time:" in lines[4]


def test_bench_one_policy_has_no_ratio() -> None:
    """--policy legacy alone: one run, and no ratio."""
    code, out = invoke("bench", "--scenario", "small", "--days", "1", "--policy", "legacy",
                       "--json")
    assert code == 0, out
    result = json.loads(out)
    assert [r["policy"] for r in result["runs"]] == ["legacy"] and result["ratio"] is None


def test_bench_pass_reports_build_time_and_memory() -> None:
    """The pass benchmark on a small queue reports the queue it timed (the 200 asked for,
    plus what the settling rounds preempted and requeued, less what they started), the time
    to build the state and the process's peak memory."""
    code, out = invoke("bench", "--pending", "200", "--passes", "3", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert 100 < result["pending"] < 300 and result["passes"] == 3
    assert result["submitted"] == 200
    assert result["build_s"] > 0 and result["peak_rss_mb"] > 0


def test_bench_pass_says_how_the_timed_queue_differs_from_pending_asked() -> None:
    """The pass benchmark's text names both the queue it timed and the --pending asked for,
    so that 1,940 pending after ``--pending 2000`` does not read as a miscount."""
    code, out = invoke("bench", "--pending", "200", "--passes", "2")
    assert code == 0, out
    pending = int(re.search(r", ([\d,]+) pending, ", out).group(1).replace(",", ""))
    assert f"the {pending:,} pending timed: the 200 submitted, less what settling started, " \
        "plus what it requeued" in out


def test_bench_flags_are_checked() -> None:
    """--pending over 100,000, --pending with --trace, and trace options without a trace
    are usage errors naming the flag."""
    code, out = invoke("bench", "--pending", "100001")
    assert code == 2 and "--pending" in out and "100000" in out
    code, out = invoke("bench", "--pending", "10", "--scenario", "small")
    assert code == 2 and "--pending times one pass: not with --trace or --scenario" in out
    code, out = invoke("bench", "--cluster", "4x8")
    assert code == 2 and "--cluster needs --trace or --scenario" in out
    code, out = invoke("bench", "--budget-column", "team")
    assert code == 2 and "--budget-column needs --trace or --scenario" in out


def test_bench_pass_takes_policy_settings() -> None:
    """--set applies to the benchmarked passes: with rebalancing off, settling the same
    random fill makes fewer preemptions than with it on; an engine setting, which a lone
    pass has no use for, is a usage error naming it."""
    runs = {}
    for settings in ((), ("--set", "rebalance=false")):
        code, out = invoke("bench", "--pending", "200", "--passes", "3", "--json", *settings)
        assert code == 0, out
        runs[settings] = json.loads(out)["first_pass_preemptions"]
    assert runs[("--set", "rebalance=false")] < runs[()]
    code, out = invoke("bench", "--set", "restart_overhead=0")
    assert code == 2 and "restart_overhead: an engine setting" in out


def test_bench_replay_runs_each_policy_on_the_first_hour_before_timing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the timed runs, each policy runs once, untimed, on the scenario's first hour
    (only the workloads submitted in it), so that a process's one-time costs do not all
    fall on the policy timed first: the engines made are, in order, a one-hour run of each
    policy, then each policy on the whole scenario."""
    from apportion.bench import replay
    from apportion.cli.simulate import build_scenario

    made: list[tuple[str, float, int]] = []
    real = replay.Engine

    def recording(scenario: Any, policy: Any, config: Any, **kw: Any) -> Any:
        made.append((kw["name"], scenario.days, len(scenario.jobs)))
        return real(scenario, policy, config, **kw)

    monkeypatch.setattr(replay, "Engine", recording)
    sc = build_scenario("seed", ITP, "itp", (), 3, None, None, "2x8", 2.0, 0, None, 28800.0)
    replay.run(sc, policies=("legacy", "fairshare"))
    first_hour = sum(1 for j in sc.jobs if j.spec.submit_time < 3600.0)
    assert 0 < first_hour < len(sc.jobs)
    assert made == [("legacy", 1 / 24, first_hour), ("fairshare", 1 / 24, first_hour),
                    ("legacy", 2.0, len(sc.jobs)), ("fairshare", 2.0, len(sc.jobs))]


def test_bench_days_is_capped_as_simulate_caps_it() -> None:
    """bench --days over 3,660 is refused naming the flag, as simulate refuses it (it was
    let through, and the trace's last workload was blamed for the span)."""
    code, out = invoke("bench", "--trace", str(ITP), "--format", "itp", "--cluster", "4x8",
                       "--budgets", "3", "--days", "5000")
    assert code == 2
    assert "Invalid value for '--days': 5000 is not in the range 0<x<=3660." in out


@pytest.mark.parametrize("command", ["bench", "simulate", "sweep"])
def test_the_scenario_help_names_every_built_in_scenario(command: str) -> None:
    """`apportion COMMAND --help` names, under --scenario, every built-in scenario each of
    these commands accepts: seed, small and fleet (bench's said "seed, small" alone)."""
    code, out = invoke(command, "--help")
    assert code == 0, out
    options = out.split("Options:", 1)[1]
    scenario_help = " ".join(options.split("--scenario", 1)[1].split("--", 1)[0].split())
    for name in SCENARIOS:
        assert name in scenario_help, (name, scenario_help)


def test_bench_replay_counts_the_workloads_of_the_days_replayed() -> None:
    """bench --trace cluster10 (260 workloads over 33 days) with --days 4: the first line
    counts the workloads submitted in the 4 days replayed (times from the first
    submission), as the runs see them, with the trace's own count beside it (`(of 260 in
    it)`), and says `4 days`; it said `260 workloads`, every workload of the trace, beside a
    4-day replay. Its JSON has both counts."""
    args = ("bench", "--trace", str(ITP), "--format", "itp", "--cluster", "4x8", "--budgets",
            "3", "--days", "4")
    jobs = load_trace(ITP, "itp", budgets=3).jobs
    first = min(j.spec.submit_time for j in jobs)
    replayed = sum(1 for j in jobs if j.spec.submit_time - first < 4 * 86400.0)
    assert 0 < replayed < len(jobs) == 260
    code, out = invoke(*args)
    assert code == 0, out
    assert out.splitlines()[0].startswith(
        f"replay: cluster10, {replayed:,} workloads submitted in the 4 days replayed (of "
        "260 in it), 4 hosts (32 GPUs), 3 budgets, ")
    code, out = invoke(*args, "--json")
    result = json.loads(out)
    assert (result["workloads"], result["workloads_in_input"]) == (replayed, 260)


def test_documented_first_pass_preemptions_are_what_bench_makes() -> None:
    """docs/policy.md ("Speed") and docs/simulator.md give the number of preemptions of
    ``apportion bench``'s first pass on its random fill (a count, not a timing: the same on
    every machine and either build) as the default benchmark state makes it now."""
    from apportion.bench.decide import build_state, settle
    from apportion.core import PolicyConfig

    _, _, first = settle(build_state(), PolicyConfig())
    docs = Path(__file__).parents[2] / "docs"
    policy = re.search(r"random fill \((\d+) preemptions", (docs / "policy.md").read_text())
    sim = re.search(r"random fill \((\d+ preemptions then; )?(\d+)",
                    (docs / "simulator.md").read_text())
    assert policy is not None and sim is not None
    assert (int(policy.group(1)), int(sim.group(2))) == (first, first)
