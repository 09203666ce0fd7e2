"""The built-in scenarios: deterministic, and calibrated to the description they claim."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from apportion.core import PolicyConfig, is_debug
from apportion.sim.model import HostEventKind, LegacyPriority, Scenario
from apportion.sim.run import run_policies
from apportion.sim.scenarios import (
    DEBUG,
    MAX_MIN_RUNTIME,
    PATIENCE,
    SQUAT,
    SWEEP,
    TARGET_RATIO,
    get_scenario,
    job_class,
    seed_scenario,
    small_scenario,
)

HOUR = 3600.0
OUTSTANDING_DAYS = 10  # a short run (256 GPUs) for the outstanding-demand check
RAMP_HOURS = 48  # the cluster starts empty: the queues take about two days to fill


@pytest.fixture(scope="module")
def seed() -> Scenario:
    return seed_scenario()


def test_same_seed_gives_identical_scenario() -> None:
    """Two builds with the same seed give the same jobs, hosts, events and tree."""
    a, b = seed_scenario(days=10, seed=7, size=256), seed_scenario(days=10, seed=7, size=256)
    assert a.jobs == b.jobs
    assert a.hosts == b.hosts
    assert a.host_events == b.host_events
    assert a.tree.as_dict() == b.tree.as_dict()
    assert a.meta == b.meta


def test_other_seed_gives_other_jobs() -> None:
    """The seed changes the workload, not the organisation."""
    a, b = seed_scenario(days=5, seed=1, size=256), seed_scenario(days=5, seed=2, size=256)
    assert a.jobs != b.jobs
    assert a.tree.as_dict() == b.tree.as_dict()


def test_cluster_is_hosts_of_eight(seed: Scenario) -> None:
    """1,024 GPUs are 128 hosts of 8; 88 GPUs are 11 hosts."""
    assert len(seed.hosts) == 128 and {h.gpus for h in seed.hosts} == {8}
    assert len(seed_scenario(days=2, size=88).hosts) == 11


def test_organisation(seed: Scenario) -> None:
    """4 programs, 15 teams, 150 researchers; workloads draw on researcher leaves."""
    tree = seed.tree
    programs = tree.children("")
    assert len(programs) == 4
    assert sum(len(tree.children(p)) for p in programs) == 15
    assert len(tree.leaves) == 150
    assert all(p.count("/") == 2 for p in tree.leaves)
    assert {j.spec.budget for j in seed.jobs} <= set(tree.leaves)


def test_weights_are_unequal(seed: Scenario) -> None:
    """Programs, teams inside each program and researchers inside a team are funded
    unequally."""
    tree = seed.tree
    programs = tree.children("")
    assert len({tree.weight(p) for p in programs}) == 4
    for p in programs:
        assert len({tree.weight(t) for t in tree.children(p)}) > 1
        for t in tree.children(p):
            assert len({tree.weight(r) for r in tree.children(t)}) > 1


def test_submitted_work_is_the_demand_setting(seed: Scenario) -> None:
    """Submitted GPU-seconds over GPUs x window match ``demand`` (default ``TARGET_RATIO``),
    recomputed here, and ``meta`` reports the same figure."""
    requested = sum(j.spec.gpus * j.duration for j in seed.jobs)
    ratio = requested / (1024 * 30 * 86400)
    assert ratio == pytest.approx(TARGET_RATIO, abs=0.03)
    assert seed.meta["submitted_supply_ratio"] == pytest.approx(ratio, abs=0.001)


@pytest.mark.parametrize("size", [88, 256])
def test_submitted_ratio_holds_on_small_clusters(size: int) -> None:
    """The submitted volume scales with the cluster."""
    ratio = seed_scenario(seed=3, size=size).meta["submitted_supply_ratio"]
    assert ratio == pytest.approx(TARGET_RATIO, abs=0.1)


def test_outstanding_demand_is_two_to_three_times_supply() -> None:
    """Measured, not assumed: in a fair-share run of the seed scenario on 256 GPUs, the GPUs
    asked for by pending and running work average 2-3x the healthy GPUs over the hours
    after the queues have filled (abandoned work stops asking), and the queue stays
    bounded."""
    res = run_policies(seed_scenario(days=OUTSTANDING_DAYS, size=256), ["fairshare"],
                       progress=False)[0]
    ratios = [float(r[12]) / float(r[3])  # type: ignore[arg-type]
              for r in res.cluster_hours[RAMP_HOURS:]]
    mean = sum(ratios) / len(ratios)
    assert 2.0 <= mean <= 3.0, mean
    assert res.summary["abandoned"]["count"] > 0


def test_every_class_has_its_patience(seed: Scenario) -> None:
    """Each workload's patience lies in its class's range; squatters never give up."""
    for j in seed.jobs:
        cls = job_class(j)
        if cls == SQUAT:
            assert j.patience is None
        else:
            lo, hi = PATIENCE[cls]
            assert j.patience is not None and lo <= j.patience <= hi


def test_patience_does_not_change_the_workload() -> None:
    """Patience comes from its own random stream: the same seed gives the same sizes,
    durations and submission times whatever the patience draws."""
    a = seed_scenario(days=5, size=256)
    assert [j.spec for j in a.jobs] == [j.spec for j in seed_scenario(days=5, size=256).jobs]
    assert len({j.patience for j in a.jobs if j.patience is not None}) > 10


def test_every_workload_fits_and_respects_the_cap(seed: Scenario) -> None:
    """No workload asks for more than the cap on min_runtime or half the cluster, and
    multi-host ones take whole hosts."""
    for j in seed.jobs:
        assert 0 <= j.spec.min_runtime <= MAX_MIN_RUNTIME
        assert 1 <= j.spec.gpus <= 128
        assert j.spec.gpus <= 8 or j.spec.gpus % 8 == 0
        assert 0 <= j.spec.submit_time < 30 * 86400
        assert j.duration > 0


def test_debug_workloads_match_the_debug_definition(seed: Scenario) -> None:
    """Debug workloads have at most 8 GPUs and 0 < min_runtime <= 15 min, run minutes, and
    no other allocated workload falls under that definition."""
    config = PolicyConfig()
    for j in seed.jobs:
        if job_class(j) == DEBUG:
            assert j.spec.gpus <= 8 and 0 < j.spec.min_runtime <= 900
            assert j.duration <= 90 * 60
            assert is_debug(j.spec, config)
        elif j.spec.allocated:
            assert not is_debug(j.spec, config)


def test_debug_is_bursty_in_working_hours(seed: Scenario) -> None:
    """Most debug submissions fall on weekdays between 09:00 and 18:00."""
    times = [j.spec.submit_time for j in seed.jobs if job_class(j) == DEBUG]
    office = [t for t in times if (t // 86400) % 7 < 5 and 9 <= (t % 86400) / HOUR < 18]
    assert len(office) / len(times) > 0.6


def test_workload_mix(seed: Scenario) -> None:
    """Every class is present; unallocated work is 15-25% of requested GPU-time; the total
    count stays in the range the engine simulates quickly."""
    counts = Counter(job_class(j) for j in seed.jobs)
    assert set(counts) == {"train", "single", "eval", "debug", "sweep", "squat"}
    assert 15_000 <= len(seed.jobs) <= 40_000
    unalloc = sum(j.spec.gpus * j.duration for j in seed.jobs if not j.spec.allocated)
    total = sum(j.spec.gpus * j.duration for j in seed.jobs)
    assert 0.15 <= unalloc / total <= 0.25
    assert all(job_class(j) == SWEEP for j in seed.jobs if not j.spec.allocated)


def test_legacy_fields_show_inflation_and_opt_out(seed: Scenario) -> None:
    """At least 70% of workloads are HIGH under the old scheduler, and about 40% of the
    allocated ones opted out of preemption."""
    jobs = seed.jobs
    high = sum(j.legacy_priority is LegacyPriority.HIGH for j in jobs) / len(jobs)
    assert high >= 0.7
    allocated = [j for j in jobs if j.spec.allocated]
    opted_out = sum(not j.legacy_preemptible for j in allocated) / len(allocated)
    assert 0.35 <= opted_out <= 0.45


def test_squatters_hold_idle_placeholders(seed: Scenario) -> None:
    """Squat jobs are few-GPU, day-long, non-preemptible placeholders that still declare a
    minimum runtime, so under budgets they are charged like any allocated workload."""
    squats = [j for j in seed.jobs if j.squat]
    assert squats and all(job_class(j) == SQUAT for j in squats)
    for j in squats:
        assert j.spec.gpus <= 8 and j.duration >= 86400
        assert j.spec.allocated and not j.legacy_preemptible
    assert seed.meta["squat_count"] == len(squats)


def test_host_events(seed: Scenario) -> None:
    """Failures and drains at roughly 1 per host per 75 and 30 days, never two on one host
    within a day and a half."""
    kinds = Counter(e.kind for e in seed.host_events)
    host_days = 128 * 30
    assert 0.5 * host_days / 75 <= kinds[HostEventKind.FAIL] <= 1.5 * host_days / 75
    assert 0.5 * host_days / 30 <= kinds[HostEventKind.UNHEALTHY] <= 1.5 * host_days / 30
    last: dict[str, float] = {}
    for e in seed.host_events:
        assert e.time - last.get(e.host, -1e9) >= 1.5 * 86400
        last[e.host] = e.time
    assert seed.repair_time > 0


def test_teams_have_quiet_seasons(seed: Scenario) -> None:
    """Each team's daily requested GPU-time swings: its busiest week asks at least twice as
    much as its quietest (teams are seasonal, not busy all the time)."""
    days: dict[str, list[float]] = {}
    for j in seed.jobs:
        team = j.spec.budget.rsplit("/", 1)[0]
        week = int(j.spec.submit_time // (7 * 86400))
        days.setdefault(team, [0.0] * 5)[week] += j.spec.gpus * j.duration
    swinging = sum(max(w[:4]) >= 2 * min(w[:4]) for w in days.values())
    assert swinging >= 8


def test_meta_has_calibration_figures(seed: Scenario) -> None:
    """Scenario.meta carries the figures docs/scenarios.md quotes."""
    for key in ("submitted_supply_ratio", "patience_h", "workloads_by_class", "legacy_high_share",
                "squat_count", "unallocated_demand_share", "offered_load_p50"):
        assert key in seed.meta
    assert seed.meta["teams"] == 15 and seed.meta["researchers"] == 150


def test_documented_class_counts_and_squat_share_are_seed_zeros(seed: Scenario) -> None:
    """The workload classes table of docs/scenarios.md gives, for seed 0 on 1,024 GPUs,
    each class's count as the scenario generates it, and for squatting (which is not part of
    the mix) its share of the requested GPU-time to the tenth of a per cent."""
    docs = (Path(__file__).parents[2] / "docs" / "scenarios.md").read_text()
    rows = {line.split("`")[1]: [c.strip() for c in line.strip("|").split("|")]
            for line in docs.splitlines() if line.startswith("| `")}
    counts = Counter(job_class(j) for j in seed.jobs)
    for cls in ("train", "single", "eval", "debug", "sweep", "squat"):
        assert int(rows[cls][-1].replace(",", "")) == counts[cls], cls
    hours = seed.meta["gpu_hours_by_class"]
    assert isinstance(hours, dict)
    share = 100 * hours[SQUAT] / sum(hours.values())
    assert rows[SQUAT][-2].startswith(f"{share:.1f}%"), (rows[SQUAT][-2], share)


def test_small_scenario() -> None:
    """The small scenario: 4 hosts of 8 GPUs, 2 days, every class, one drain and one failure,
    deterministic."""
    sc = small_scenario(seed=1)
    assert len(sc.hosts) == 4 and sc.days == 2
    assert 20 <= len(sc.jobs) <= 300
    assert all(j.spec.gpus <= 16 for j in sc.jobs)
    assert {e.kind for e in sc.host_events} == {HostEventKind.FAIL, HostEventKind.UNHEALTHY}
    assert {job_class(j) for j in sc.jobs} >= {"train", "debug", "sweep"}
    assert small_scenario(seed=1).jobs == sc.jobs


def test_small_scenario_takes_its_length() -> None:
    """small_scenario(days=1): one day of submissions, and of its host events only the drain
    at 20 h (the failure at 30 h is after the period)."""
    sc = small_scenario(seed=1, days=1.0)
    assert sc.days == 1.0
    assert sc.jobs and max(j.spec.submit_time for j in sc.jobs) < 86400.0
    assert [(e.time, e.kind) for e in sc.host_events] == [(72000.0, HostEventKind.UNHEALTHY)]
    assert (sc.meta["host_drains"], sc.meta["host_failures"]) == (1, 0)


def test_get_scenario_by_name() -> None:
    """The command line finds built-in scenarios by name and names an unknown one."""
    assert get_scenario("small").name == "small"
    assert get_scenario("seed", days=1, size=88).days == 1
    with pytest.raises(ValueError, match="nope"):
        get_scenario("nope")


def test_demand_keyword_sets_the_ratio() -> None:
    """``demand`` sets requested GPU-time over GPUs x window (for what-if runs)."""
    ratio = seed_scenario(days=10, size=256, demand=1.2).meta["submitted_supply_ratio"]
    assert ratio == pytest.approx(1.2, abs=0.1)
