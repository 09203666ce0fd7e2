"""The legacy priority scheduler driven by the engine, on hand-built cases."""

from __future__ import annotations

import pytest

from apportion.core import BudgetTree, Host, PolicyConfig, WorkloadSpec
from apportion.sim.engine import Engine, RunResult, SimConfig
from apportion.sim.legacy import LegacyPolicy
from apportion.sim.model import HostEvent, HostEventKind, LegacyPriority, Scenario, SimJob

TREE = BudgetTree.build([("a/x/u", 1.0), ("b/y/v", 1.0)])  # two teams, 50/50
LOW, NORMAL, HIGH = LegacyPriority.LOW, LegacyPriority.NORMAL, LegacyPriority.HIGH


def job(wid: str, budget: str, gpus: int, submit: float, duration: float,
        prio: LegacyPriority = NORMAL, preemptible: bool = True, min_runtime: float = 600.0,
        resumable: bool = True) -> SimJob:
    leaf = {"a": "a/x/u", "b": "b/y/v"}[budget]
    spec = WorkloadSpec(wid, leaf, gpus, min_runtime, submit, resumable=resumable,
                        checkpoint_interval=1000.0)
    return SimJob(spec, duration, legacy_priority=prio, legacy_preemptible=preemptible)


def run(jobs: list[SimJob], hours: float = 3, hosts: int = 1,
        events: tuple[HostEvent, ...] = (), sim: SimConfig | None = None) -> RunResult:
    sc = Scenario("legacy", TREE, tuple(Host(f"h{i}", 8) for i in range(hosts)), tuple(jobs),
                  events, days=hours / 24.0, repair_time=1000.0)
    sim = sim or SimConfig()
    policy = LegacyPolicy({j.spec.id: j for j in jobs}, TREE, 8 * hosts,
                          team_depth=sim.legacy_team_depth, cap_factor=sim.legacy_cap_factor)
    return Engine(sc, policy, PolicyConfig(), name="legacy", sim=sim).run()


def row(result: RunResult, wid: str) -> dict[str, object]:
    return next(r for r in result.workloads if r["id"] == wid)


def test_higher_priority_preempts_preemptible_work() -> None:
    """low (LOW, preemptible, min_runtime 600 s) holds the host from 0; high (HIGH) arrives at
    100 s and takes it at once. The old scheduler ignores minimum runtimes, so the engine
    counts one protected preemption; low keeps no checkpoint (100 s < 1000 s) and restarts
    when high ends at 1100 s."""
    res = run([job("low", "a", 8, 0, 5000, prio=LOW), job("high", "b", 8, 100, 1000, prio=HIGH)])
    assert row(res, "high")["first_start"] == 100
    assert res.summary["preemptions"]["rebalance"] == 1
    assert res.summary["protected_preemptions"] == 1
    assert row(res, "low")["runs"] == 2
    assert row(res, "low")["lost_gpu_hours"] == pytest.approx(100 * 8 / 3600)
    assert row(res, "low")["wait_s"] == pytest.approx(1000)


def test_opted_out_work_is_never_preempted() -> None:
    """The same, but low opted out of preemption (its team's cap raised to 8 GPUs): high
    waits until low completes at 5000 s."""
    res = run([job("low", "a", 8, 0, 5000, prio=LOW, preemptible=False),
               job("high", "b", 8, 100, 1000, prio=HIGH)],
              sim=SimConfig(legacy_cap_factor=2.0))
    assert row(res, "high")["first_start"] == 5000
    assert res.summary["preemptions"]["total"] == 0


def test_equal_priority_does_not_preempt_and_is_fifo() -> None:
    """Three NORMAL jobs on a full host start in submission order as it frees up."""
    res = run([job("first", "a", 8, 0, 1000), job("second", "b", 8, 10, 1000),
               job("third", "a", 8, 20, 1000)])
    starts = [row(res, w)["first_start"] for w in ("first", "second", "third")]
    assert starts == [0, 1000, 2000]
    assert res.summary["preemptions"]["total"] == 0


def test_team_cap_on_opted_out_gpus_and_spill() -> None:
    """Team a/x may hold 4 opted-out GPUs (its share 1/2 x 8 x cap factor 1). np1 takes 4;
    np2 (also opted out) must wait for np1 although 4 GPUs are idle; a preemptible job of the
    same team spills onto them at once."""
    res = run([job("np1", "a", 4, 0, 1000, preemptible=False),
               job("np2", "a", 4, 10, 1000, preemptible=False),
               job("spill", "a", 4, 20, 500)])
    assert row(res, "np2")["first_start"] == 1000
    assert row(res, "spill")["first_start"] == 20


def test_drain_moves_preemptible_work_and_waits_for_a_human() -> None:
    """h0 is marked unhealthy at 100 s holding a preemptible and an opted-out job: the
    preemptible one moves off at once; the opted-out one stays until the human kill
    (human_kill_after = 2000 s, at 2100 s); then h0 goes to repair. One drain, not automated."""
    jobs = [job("pre", "a", 4, 0, 9000), job("np", "b", 4, 0, 9000, preemptible=False)]
    events = (HostEvent(100, "h0", HostEventKind.UNHEALTHY),)
    res = run(jobs, hours=3, hosts=2, events=events, sim=SimConfig(human_kill_after=2000))
    assert res.summary["preemptions"]["drain"] == 2
    assert row(res, "pre")["runs"] == 2
    assert row(res, "np")["runs"] == 2
    drains = res.summary["drains"]
    assert drains["finished"] == 1 and drains["human_kills"] == 1
    assert drains["p90_time_to_drain_s"] == pytest.approx(2000)
    assert drains["automated_fraction"] == 0.0


def test_priority_inflation_share() -> None:
    """Two of three workloads at HIGH or above: inflation share 2/3."""
    res = run([job("h1", "a", 1, 0, 10, prio=HIGH), job("h2", "b", 1, 0, 10,
               prio=LegacyPriority.URGENT), job("n", "a", 1, 0, 10)])
    assert res.summary["priority_inflation"]["high_or_urgent_share"] == pytest.approx(2 / 3)


def test_remembered_failed_victim_searches_decide_the_same() -> None:
    """The legacy pass skips a victim search that found nothing before on the same running
    work and hosts; on 4 days of the seed scenario (256 GPUs) it skips some, and the decision
    log is the one of a policy that runs every search."""
    from apportion.sim.scenarios import seed_scenario

    sc = seed_scenario(days=4, size=256)
    logs, skipped = [], []
    for remember in (True, False):
        policy = LegacyPolicy({j.spec.id: j for j in sc.jobs}, sc.tree,
                              sum(h.gpus for h in sc.hosts), remember=remember)
        result = Engine(sc, policy, PolicyConfig(), name="legacy", keep_log=True).run()
        logs.append(result.log)
        skipped.append(policy.searches_skipped)
    assert skipped[0] > 0 and skipped[1] == 0
    assert logs[0] and logs[0] == logs[1]
