"""The simulator engine on small hand-built cases whose answers are worked out by hand."""

from __future__ import annotations

import math

import pytest

from apportion.core import (
    BudgetTree,
    ClusterState,
    Decisions,
    Host,
    PolicyConfig,
    Slice,
    Start,
    WorkloadSpec,
    decide,
)
from apportion.sim.engine import Engine, RunResult, SimConfig
from apportion.sim.model import HostEvent, HostEventKind, Scenario, SimJob
from apportion.sim.run import run_policies
from apportion.sim.scenarios import small_scenario

HOUR = 3600.0
TREE = BudgetTree.build([("a/x/u", 1.0), ("b/y/v", 1.0)])  # two teams, 50/50


def job(wid: str, budget: str, gpus: int, submit: float, duration: float,
        min_runtime: float = 60.0, resumable: bool = False, checkpoint: float = 0.0) -> SimJob:
    leaf = {"a": "a/x/u", "b": "b/y/v"}[budget]
    spec = WorkloadSpec(wid, leaf, gpus, min_runtime, submit, resumable=resumable,
                        checkpoint_interval=checkpoint)
    return SimJob(spec, duration)


def scenario(jobs: list[SimJob], hours: float, hosts: int = 1,
             events: tuple[HostEvent, ...] = (), repair: float = 1000.0) -> Scenario:
    return Scenario("hand", TREE, tuple(Host(f"h{i}", 8) for i in range(hosts)), tuple(jobs),
                    events, days=hours / 24.0, repair_time=repair)


def fifo(state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
    """Stand-in policy: start pending work in submission order on the first host that fits,
    stopping at the first that does not (strict FIFO, no preemption)."""
    free = {n: h.gpus - state.used[n] for n, h in state.hosts.items() if h.schedulable}
    starts = []
    for p in sorted(state.pending.values(), key=lambda p: (p.spec.submit_time, p.spec.id)):
        host = next((n for n in sorted(free) if free[n] >= p.spec.gpus), None)
        if host is None:
            break
        free[host] -= p.spec.gpus
        starts.append(Start(p.spec.id, (Slice(host, p.spec.gpus),)))
    return Decisions(starts=tuple(starts))


def run(sc: Scenario, policy: object = decide, sim: SimConfig | None = None) -> RunResult:
    return Engine(sc, policy, PolicyConfig(), sim=sim or SimConfig()).run()  # type: ignore[arg-type]


def row(result: RunResult, wid: str) -> dict[str, object]:
    return next(r for r in result.workloads if r["id"] == wid)


FIFO_JOBS = [
    job("j1", "a", 8, 0, 1000),
    job("j2", "b", 4, 100, 500),
    job("j3", "a", 4, 200, 100),
]


def test_fifo_waits_are_exact() -> None:
    """j1 holds the host 0-1000 s; j2 (submitted at 100) and j3 (at 200) both start at 1000:
    waits 0, 900 and 800 s, so p50 = 800 s."""
    res = run(scenario(FIFO_JOBS, 1), fifo)
    assert [row(res, w)["first_start"] for w in ("j1", "j2", "j3")] == [0, 1000, 1000]
    assert [row(res, w)["end_time"] for w in ("j1", "j2", "j3")] == [1000, 1500, 1100]
    assert res.summary["wait_s"]["all"]["p50"] == 800
    assert res.summary["wait_s"]["all"]["n"] == 3


def test_occupancy_integrates_gpu_seconds() -> None:
    """Assigned GPU-seconds 8x1000 + 4x500 + 4x100 = 10,400 over 8 GPUs x 3,600 s healthy:
    occupancy 10,400 / 28,800; availability 1."""
    res = run(scenario(FIFO_JOBS, 1), fifo)
    assert res.summary["occupancy"] == pytest.approx(10400 / 28800)
    assert res.summary["availability"] == pytest.approx(1.0)
    assert res.summary["unallocated_fraction"] == 0


def test_attainment_by_hand() -> None:
    """Budget a (share 4 GPUs) asks 8-12 GPUs over 0-1000 s then 4 GPUs to 1100: owed
    4 x 1100 = 4,400 GPU-s, delivered 8,400 >= owed, attainment 1. Budget b asks 4 GPUs over
    100-1500 s: owed 5,600, delivered 4 x 500 = 2,000, attainment 2,000 / 5,600. Overall
    (4,400 + 2,000) / (4,400 + 5,600) = 0.64; the worst team is b/y."""
    res = run(scenario(FIFO_JOBS, 1), fifo)
    att = res.summary["attainment"]
    assert att["per_budget"]["a/x/u"] == pytest.approx(1.0)
    assert att["per_budget"]["a"] == pytest.approx(1.0)
    assert att["per_budget"]["b/y/v"] == pytest.approx(2000 / 5600)
    assert att["overall"] == pytest.approx(0.64)
    assert att["overall_teams"] == pytest.approx(0.64)  # one researcher per team here
    assert att["min"] == pytest.approx(2000 / 5600)
    assert att["min_budget"] == "b/y"
    hour0 = {r[2]: r for r in res.budget_hours if r[0] == 0}
    assert hour0["a/x/u"][8] == pytest.approx(4400 / 3600)  # owed, GPU-hours
    assert hour0["b/y/v"][9] == pytest.approx(2000 / 3600)  # delivered


def test_attainment_per_team_and_per_researcher_by_hand() -> None:
    """One 8-GPU host. Team a/x (half of it: 4 GPUs) has two researchers, u and w (2 GPUs
    of share each); b/y/v asks nothing. For the hour u runs 8 GPUs and w waits for 4 behind
    it. Per researcher: u is owed 2 and gets them, w is owed 2 and gets 0, overall
    2 / 4 = 0.5. Per team: a/x is owed min(4, 12) = 4 and gets 8, overall 1.0: the team got
    all it was owed, shared unevenly among its people."""
    tree = BudgetTree.build([("a/x/u", 1.0), ("a/x/w", 1.0), ("b/y/v", 1.0)])
    jobs = (SimJob(WorkloadSpec("big", "a/x/u", 8, 60.0, 0.0), 2 * HOUR),
            SimJob(WorkloadSpec("small", "a/x/w", 4, 60.0, 0.0), 600.0))
    sc = Scenario("team", tree, (Host("h0", 8),), jobs, (), days=1 / 24.0)
    att = run(sc, fifo).summary["attainment"]
    assert att["per_budget"]["a/x/u"] == pytest.approx(1.0)
    assert att["per_budget"]["a/x/w"] == pytest.approx(0.0)
    assert att["per_budget"]["a/x"] == pytest.approx(1.0)
    assert att["overall"] == pytest.approx(0.5)
    assert att["overall_teams"] == pytest.approx(1.0)


def test_attainment_per_team_is_the_lower_when_only_some_researchers_ask() -> None:
    """One 8-GPU host. b/y/v (share 4 GPUs) runs 8 GPUs for the hour; u of team a/x (4
    GPUs of share, 2 of them u's) waits for 4 behind it and w asks nothing. Per researcher:
    u is owed 2 and gets 0, v is owed 4 and gets 8, overall 4 / 6. Per team: a/x is owed
    min(4, 4) = 4, its whole share though only u asks, and gets 0; b/y is owed 4 and gets
    them: overall 4 / 8, below the per-researcher figure (docs/simulator.md: neither is
    always the lower)."""
    tree = BudgetTree.build([("a/x/u", 1.0), ("a/x/w", 1.0), ("b/y/v", 1.0)])
    jobs = (SimJob(WorkloadSpec("big", "b/y/v", 8, 60.0, 0.0), 2 * HOUR),
            SimJob(WorkloadSpec("waits", "a/x/u", 4, 60.0, 0.0), 600.0))
    sc = Scenario("team", tree, (Host("h0", 8),), jobs, (), days=1 / 24.0)
    att = run(sc, fifo).summary["attainment"]
    assert att["overall"] == pytest.approx(4 / 6)
    assert att["overall_teams"] == pytest.approx(4 / 8)


def test_hour_bins_split_exactly() -> None:
    """A 4-GPU job running 1800-5400 s puts exactly 2 GPU-hours in hour 0 and 2 in hour 1
    (the accounting boundary at 3600 s splits the integral): 2 GPUs on average in each."""
    res = run(scenario([job("j", "a", 4, 1800, 3600)], 2), fifo)
    delivered = {r[0]: r[9] for r in res.budget_hours if r[2] == "a/x/u"}
    assert delivered == {0: pytest.approx(2.0), 1: pytest.approx(2.0)}
    assert [r[4] for r in res.cluster_hours] == [pytest.approx(2.0), pytest.approx(2.0)]


def test_unallocated_work_is_displaced_with_checkpoint_loss() -> None:
    """u (unallocated, 8 GPUs, resumable, checkpoint every 600 s) runs from 0; allocated a1
    arrives at 1000 and displaces it at once. u keeps 600 s of its 1000 s of work (lost
    400 s x 8 GPUs), waits for a1 to finish at 1500, then needs 10,000 - 600 + 120 s
    restart overhead: it completes at 11,020."""
    jobs = [job("u", "b", 8, 0, 10000, min_runtime=0, resumable=True, checkpoint=600),
            job("a1", "a", 8, 1000, 500, min_runtime=600)]
    res = run(scenario(jobs, 4), decide)
    assert res.summary["preemptions"]["unallocated"] == 1
    assert row(res, "a1")["first_start"] == 1000
    assert row(res, "u")["status"] == "completed"
    assert row(res, "u")["end_time"] == pytest.approx(11020)
    assert row(res, "u")["lost_gpu_hours"] == pytest.approx(400 * 8 / 3600)
    assert res.summary["restart_overhead_gpu_hours"] == pytest.approx(120 * 8 / 3600)
    assert res.summary["protected_preemptions"] == 0


def test_min_runtime_protection_is_respected() -> None:
    """b1 and b2 (allocated, 4 GPUs each, min_runtime 1 h) fill the only host from 0. a1, of
    an idle budget, asks for its share (4 GPUs) at 100 s but may not take them before the
    protections end at 3600 s; at the end of the minimum runtimes it rebalances one of them
    away (b stays at its share) and starts at exactly 3600 s."""
    jobs = [job("b1", "b", 4, 0, 20000, min_runtime=HOUR, resumable=True),
            job("b2", "b", 4, 0, 20000, min_runtime=HOUR, resumable=True),
            job("a1", "a", 4, 100, 1000, min_runtime=600)]
    res = run(scenario(jobs, 3), decide)
    assert row(res, "a1")["first_start"] == HOUR
    assert res.summary["preemptions"]["rebalance"] == 1
    assert res.summary["protected_preemptions"] == 0


def test_protected_preemptions_are_counted_from_engine_records() -> None:
    """A policy that preempts work inside its minimum runtime is caught by the engine's own
    count, whatever reason it gives."""
    from apportion.core import Preempt, PreemptReason

    def rude(state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        if now == 100 and "b1" in state.running:
            return Decisions(preemptions=(Preempt("b1", PreemptReason.REBALANCE, False),))
        return fifo(state, now, config)

    jobs = [job("b1", "b", 8, 0, 5000, min_runtime=HOUR), job("a1", "a", 8, 100, 100)]
    res = run(scenario(jobs, 2), rude)
    assert res.summary["protected_preemptions"] == 1
    assert row(res, "b1")["status"] == "preempted"
    assert row(res, "b1")["lost_gpu_hours"] == pytest.approx(100 * 8 / 3600)


def test_host_failure_requeues_with_checkpoint_loss() -> None:
    """r (resumable, checkpoint 1000 s, 5000 s of work) dies with its host at 2500 s: it keeps
    2000 s, loses 500 s x 8 GPUs. The host is back after the 1000 s repair time, at 3500 s;
    r restarts then and finishes 3000 + 120 s later, at 6620 s. Healthy capacity was lost for
    1000 of 7200 s: availability 6200 / 7200."""
    jobs = [job("r", "a", 8, 0, 5000, min_runtime=600, resumable=True, checkpoint=1000)]
    events = (HostEvent(2500, "h0", HostEventKind.FAIL),)
    res = run(scenario(jobs, 2, events=events, repair=1000), decide)
    assert res.summary["preemptions"]["host_failure"] == 1
    assert res.summary["host_failures"] == 1
    assert row(res, "r")["first_start"] == 0
    assert row(res, "r")["end_time"] == pytest.approx(6620)
    assert row(res, "r")["wait_s"] == pytest.approx(1000)
    assert row(res, "r")["lost_gpu_hours"] == pytest.approx(500 * 8 / 3600)
    assert res.summary["availability"] == pytest.approx(6200 / 7200)


def test_host_failure_loses_non_resumable_work() -> None:
    """A non-resumable workload on a host that dies inside its minimum runtime ends as lost,
    all 300 s of its progress gone; a host failure is not a protected preemption."""
    jobs = [job("n", "a", 8, 0, 5000, min_runtime=HOUR)]
    events = (HostEvent(300, "h0", HostEventKind.FAIL),)
    res = run(scenario(jobs, 2, events=events), decide)
    assert row(res, "n")["status"] == "lost"
    assert res.summary["lost_gpu_hours"] == pytest.approx(300 * 8 / 3600)
    assert res.summary["protected_preemptions"] == 0


def test_drain_waits_for_protection_then_repairs() -> None:
    """h0 is marked unhealthy at 100 s while p (min_runtime 600 s) runs there; the policy
    moves p off at 600 s (to h1) and h0 goes to repair: one automated drain of 500 s."""
    jobs = [job("p", "a", 8, 0, 5000, min_runtime=600, resumable=True)]
    events = (HostEvent(100, "h0", HostEventKind.UNHEALTHY),)
    res = run(scenario(jobs, 2, hosts=2, events=events), decide)
    drains = res.summary["drains"]
    assert drains["count"] == 1 and drains["finished"] == 1
    assert drains["p90_time_to_drain_s"] == pytest.approx(500)
    assert drains["automated_fraction"] == 1.0
    assert res.summary["preemptions"]["drain"] == 1
    assert res.summary["protected_preemptions"] == 0


def test_human_kill_ends_a_stuck_drain() -> None:
    """With a policy that never drains, the engine's human kill empties the host
    ``human_kill_after`` (here 1000 s) after the drain began; the drain counts as manual."""
    jobs = [job("p", "a", 8, 0, 50000, min_runtime=600)]
    events = (HostEvent(100, "h0", HostEventKind.UNHEALTHY),)
    res = run(scenario(jobs, 2, events=events), fifo, SimConfig(human_kill_after=1000))
    drains = res.summary["drains"]
    assert drains["human_kills"] == 1
    assert row(res, "p")["end_time"] == 1100
    assert drains["finished"] == 0  # the stand-in policy never sends the host to repair


def test_squatting_counts_as_assigned_not_lost() -> None:
    """A squatting job holds 8 GPUs for 1800 s: 4 squat GPU-hours, occupancy 0.5 over the
    hour, and nothing counted as lost work."""
    spec = WorkloadSpec("s", "a/x/u", 8, 600, 0)
    res = run(scenario([SimJob(spec, 1800, squat=True)], 1), fifo)
    assert res.summary["squat_gpu_hours"] == pytest.approx(4.0)
    assert res.summary["occupancy"] == pytest.approx(0.5)
    assert res.summary["lost_gpu_hours"] == 0


def test_cluster_hours_count_preemptions_per_reason_in_the_hour_they_happen() -> None:
    """Sixteen 1-GPU workloads fill two hosts (j01-j08 on h0, j09-j16 on h1); a scripted
    policy preempts j01 and j02 for ``unallocated`` in hour 0, j03 for ``rebalance`` and j04
    for ``drain`` in hour 1, j05 for ``unallocated`` and j06 for ``drain`` in hour 3, and h1
    fails in hour 2, killing its eight workloads (``host_failure``). The hourly table's
    ``preemptions_<reason>`` columns count exactly these, hour by hour; each hour's counts sum
    to its ``preemptions`` column, and each reason's to the summary's count."""
    from apportion.core import Preempt, PreemptReason
    from apportion.sim.metrics import CLUSTER_HOUR_COLUMNS

    plan = [(600.0, "j01", PreemptReason.UNALLOCATED), (1200.0, "j02", PreemptReason.UNALLOCATED),
            (4000.0, "j03", PreemptReason.REBALANCE), (5000.0, "j04", PreemptReason.DRAIN),
            (12600.0, "j05", PreemptReason.UNALLOCATED), (13000.0, "j06", PreemptReason.DRAIN)]

    def scripted(state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        due = tuple(Preempt(w, reason, False) for t, w, reason in plan
                    if t <= now and w in state.running)
        later = [t for t, _, _ in plan if t > now]
        return Decisions(starts=fifo(state, now, config).starts, preemptions=due,
                         recheck_at=min(later) if later else None)

    jobs = [job(f"j{i:02d}", "a", 1, 0, 10 * HOUR) for i in range(1, 17)]
    events = (HostEvent(9000, "h1", HostEventKind.FAIL),)
    res = run(scenario(jobs, 5, hosts=2, events=events, repair=100 * HOUR), scripted)
    hours = [dict(zip(CLUSTER_HOUR_COLUMNS, r, strict=True)) for r in res.cluster_hours]
    reasons = [r.value for r in PreemptReason]
    assert [{k: h[f"preemptions_{k}"] for k in reasons if h[f"preemptions_{k}"]}
            for h in hours] == [
        {"unallocated": 2}, {"rebalance": 1, "drain": 1}, {"host_failure": 8},
        {"unallocated": 1, "drain": 1}, {}]
    assert [sum(h[f"preemptions_{k}"] for k in reasons) for h in hours] == [
        h["preemptions"] for h in hours]
    assert {k: sum(h[f"preemptions_{k}"] for h in hours) for k in reasons} == {
        k: res.summary["preemptions"][k] for k in reasons}


def test_rejected_specs_are_counted() -> None:
    """Without clamping, a min_runtime over the cap is refused by validate_spec."""
    res = run(scenario([job("big", "a", 8, 0, 100, min_runtime=9 * HOUR)], 1), decide,
              SimConfig(clamp_min_runtime=False))
    assert res.summary["rejected"] == 1
    assert row(res, "big")["status"] == "rejected"


def test_min_runtime_over_the_cap_is_lowered_to_it() -> None:
    """By default a 9 h min_runtime is lowered to the 8 h cap and the workload runs."""
    res = run(scenario([job("big", "a", 8, 0, 100, min_runtime=9 * HOUR)], 1), decide)
    assert res.summary["rejected"] == 0 and res.summary["clamped_min_runtime"] == 1
    assert row(res, "big")["min_runtime"] == 8 * HOUR
    assert row(res, "big")["status"] == "completed"


def test_decide_loop_cap_is_counted() -> None:
    """A policy that never quiets down hits the round cap at each moment, which is counted."""
    def restless(state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        from apportion.core import HostChange, HostState

        return Decisions(host_changes=(HostChange("h0", HostState.HEALTHY, "again"),))

    res = run(scenario([job("j", "a", 1, 10, 10)], 1), restless, SimConfig(decide_rounds=3))
    assert res.summary["decide"]["rounds_capped"] == res.summary["decide"]["moments"] > 0


def test_same_input_same_output() -> None:
    """Two runs of the small scenario give identical summaries (except the cost of the run)
    and identical tables, for both policies."""
    sc = small_scenario(seed=1)
    first = run_policies(sc, progress=False)
    second = run_policies(sc, progress=False)
    volatile = {"wall_s", "cpu_s", "events_per_s", "peak_memory_mb"}
    for a, b in zip(first, second, strict=True):
        assert {k: v for k, v in a.summary.items() if k not in volatile} == {
            k: v for k, v in b.summary.items() if k not in volatile
        }
        assert a.workloads == b.workloads
        assert a.budget_hours == b.budget_hours
        assert a.cluster_hours == b.cluster_hours


def test_fairshare_never_preempts_protected_work_on_small_scenario() -> None:
    """On the small scenario (drains, a failure, a full cluster) fair share issues no
    preemption inside a minimum runtime, and the hourly owed GPU-hours never exceed the
    healthy capacity."""
    res = run_policies(small_scenario(), policies=["fairshare"], progress=False)[0]
    assert res.summary["protected_preemptions"] == 0
    for r in res.budget_hours:
        owed, share, healthy, span = (float(r[i]) for i in (8, 5, 6, 1))  # type: ignore[arg-type]
        assert owed <= share * healthy * span + 1e-9
    assert not math.isnan(res.summary["occupancy"])


def patient(wid: str, budget: str, gpus: int, submit: float, duration: float,
            patience: float | None, **kw: object) -> SimJob:
    base = job(wid, budget, gpus, submit, duration, **kw)  # type: ignore[arg-type]
    return SimJob(base.spec, duration, patience=patience)


def test_work_that_never_starts_is_abandoned_when_patience_runs_out() -> None:
    """j1 holds the only host 0-5400 s; j2 (budget b, 8 GPUs, patience 1800 s) is withdrawn
    at 1800 s: status abandoned, no wait sample, counted with the GPU-hours it asked for (and
    as debug: 8 GPUs, min_runtime 60 s), and b stops asking then: b asked 8 GPUs for half of
    hour 0 (4 on average) and is owed min(share 4, 8) x 1800 s = 2 GPU-hours."""
    jobs = [job("j1", "a", 8, 0, 5400), patient("j2", "b", 8, 0, 1000, patience=1800)]
    res = run(scenario(jobs, 2), fifo)
    r = row(res, "j2")
    assert r["status"] == "abandoned" and r["end_time"] == 1800 and r["first_start"] is None
    assert res.summary["abandoned"] == {
        "count": 1, "gpu_hours_requested": pytest.approx(8 * 1000 / 3600), "debug": 1,
        "by_size": {"1": 0, "2-8": 1, "9-64": 0, "65+": 0},
        "per_budget": {"b/y": 1, "b/y/v": 1},
    }
    assert res.summary["wait_s"]["all"]["n"] == 1  # only j1 started
    assert res.summary["unfinished"]["pending"] == 0
    hour0 = {r[2]: r for r in res.budget_hours if r[0] == 0}
    assert hour0["b/y/v"][7] == pytest.approx(4.0)  # asked, time-averaged GPUs
    assert hour0["b/y/v"][8] == pytest.approx(2.0)  # owed, GPU-hours
    assert [r[13] for r in res.cluster_hours] == [1, 0]  # abandoned, per hour
    # passes at 0 (submissions), 60 (j1's minimum runtime ends), 3600 (hour) and 5400 (j1
    # ends): withdrawing j2 at 1800 freed nothing, so no pass ran then
    assert res.summary["decide"]["moments"] == 4


def test_work_that_starts_in_time_is_not_abandoned() -> None:
    """j2 (patience 2 h) starts when j1 ends at 1000 s and completes; its later abandon event
    does nothing."""
    jobs = [job("j1", "a", 8, 0, 1000), patient("j2", "b", 8, 0, 1000, patience=2 * HOUR)]
    res = run(scenario(jobs, 3), fifo)
    assert row(res, "j2")["status"] == "completed"
    assert res.summary["abandoned"]["count"] == 0


def test_requeued_work_keeps_waiting_past_its_patience() -> None:
    """u (unallocated, resumable, patience 1000 s) starts at 0 and is displaced at 500 s by
    a1, which holds the host to 3500 s. u waits in the queue past submit + patience (it has
    run once, so its owner keeps it) and completes after a1."""
    jobs = [patient("u", "b", 8, 0, 2000, patience=1000, min_runtime=0, resumable=True,
                    checkpoint=100),
            job("a1", "a", 8, 500, 3000, min_runtime=600)]
    res = run(scenario(jobs, 3), decide)
    assert row(res, "u")["status"] == "completed"
    assert row(res, "u")["runs"] == 2
    assert res.summary["abandoned"]["count"] == 0


def test_outstanding_ratio_is_asked_gpus_over_healthy_hour_by_hour() -> None:
    """j1 (8 GPUs) runs 0-5400 s; j2 asks 8 more until abandoned at 1800 s. Outstanding GPUs
    average (8 x 3600 + 8 x 1800) / 3600 = 12 in hour 0 and 8 x 1800 / 3600 = 4 in hour 1,
    over 8 healthy GPUs: 1.5 and 0.5, mean 1.0, p10 0.6, p90 1.4."""
    jobs = [job("j1", "a", 8, 0, 5400), patient("j2", "b", 8, 0, 1000, patience=1800)]
    res = run(scenario(jobs, 2), fifo)
    assert [r[12] for r in res.cluster_hours] == [pytest.approx(12.0), pytest.approx(4.0)]
    assert res.summary["outstanding_ratio"] == {
        "mean": pytest.approx(1.0), "p10": pytest.approx(0.6), "p50": pytest.approx(1.0),
        "p90": pytest.approx(1.4),
    }


def test_legacy_forgets_abandoned_work() -> None:
    """Under the legacy policy an abandoned workload leaves its queue index: j3, behind it,
    starts when j1 ends at 5400 s."""
    from apportion.sim.run import make_policy

    jobs = [job("j1", "a", 8, 0, 5400), patient("j2", "b", 8, 50, 1000, patience=1800),
            job("j3", "a", 8, 100, 600)]
    sc = scenario(jobs, 3)
    res = run(sc, make_policy("legacy", sc, SimConfig()))
    assert row(res, "j2")["status"] == "abandoned"
    assert row(res, "j3")["first_start"] == 5400


def test_patience_must_be_positive() -> None:
    """A patience of 0 or less is refused, naming the workload and the field."""
    spec = WorkloadSpec("w", "a/x/u", 1, 60, 0)
    with pytest.raises(ValueError, match="w: patience"):
        SimJob(spec, 10, patience=0)


def test_checkpoint_on_term_keeps_progress_and_losses_are_split_by_reason() -> None:
    """Two resumable 8-GPU unallocated runs with a 1 h checkpoint interval are displaced at
    1800 s by allocated work: the one that checkpoints on SIGTERM loses nothing, the other
    its 1800 s x 8 GPUs = 4 GPU-hours, all counted as lost to ``unallocated`` displacement;
    waits are reported by size class."""
    term = SimJob(WorkloadSpec("t", "b/y/v", 8, 0.0, 0.0, resumable=True,
                               checkpoint_interval=3600.0, checkpoint_on_term=True), 20000.0)
    plain = SimJob(WorkloadSpec("p", "b/y/v", 8, 0.0, 0.0, resumable=True,
                                checkpoint_interval=3600.0), 20000.0)
    jobs = [term, plain, job("x", "a", 16, 1800, 600)]
    res = run(scenario(jobs, 2, hosts=2), decide)
    assert (row(res, "t")["lost_gpu_hours"], row(res, "p")["lost_gpu_hours"]) == (
        0.0, pytest.approx(4.0))
    assert res.summary["lost_gpu_hours_by_reason"] == {
        "unallocated": pytest.approx(4.0), "rebalance": 0.0, "drain": 0.0, "host_failure": 0.0}
    by_size = res.summary["wait_s"]["by_size"]
    assert by_size["9-64"]["n"] == 1 and by_size["2-8"]["n"] >= 2


def test_statuses_are_core_statuses_moved_along_its_transition_table() -> None:
    """Every workload's status in the engine is a core ``Status`` (``None`` only for a
    refused submission), the outputs' names come from it (``rejected`` and ``abandoned``
    are the names of a refused and of a cancelled-by-patience workload), and a move that
    core's transition table does not allow raises a ``CoreError`` naming the workload."""
    from apportion.core import CoreError, Status

    jobs = [
        job("done", "a", 8, 0, 1000),  # completes
        job("wait", "b", 8, 100, 5000),  # waits for the host, still running at the end
        job("big", "a", 16, 0, 100),  # refused: the cluster has 8 GPUs
        SimJob(WorkloadSpec("gone", "b/y/v", 8, 60.0, 200), 100, patience=500),  # abandoned
    ]
    engine = Engine(scenario(jobs, 1), decide, PolicyConfig())
    res = engine.run()
    statuses = {wid: j.status for wid, j in engine.jobs.items()}
    assert statuses == {"done": Status.COMPLETED, "wait": Status.RUNNING, "big": None,
                        "gone": Status.CANCELLED}
    assert [row(res, w)["status"] for w in ("done", "wait", "big", "gone")] == [
        "completed", "running", "rejected", "abandoned"]
    with pytest.raises(CoreError, match="workload done: state: cannot go from completed to "
                                        "running"):
        engine.jobs["done"].move(Status.RUNNING)
    with pytest.raises(CoreError, match="workload big: state: not submitted"):
        engine.jobs["big"].move(Status.RUNNING)


def test_streamed_outputs_match_kept_tables_and_report_the_whole_peak(tmp_path) -> None:
    """``run_policies(out=..., keep_tables=False)`` writes the same tables as a run that keeps
    them, drops them from its results, and summary.json's ``peak_memory_mb`` is the
    process's peak resident memory after every output was written (``ru_maxrss``, to within
    the 1 MiB the kernel's per-thread counters may lag), the same in every entry."""
    import json

    from apportion.sim.engine import peak_memory_mb

    sc = small_scenario(seed=1)
    kept = run_policies(sc, progress=False, out=tmp_path / "kept")
    dropped = run_policies(sc, progress=False, out=tmp_path / "dropped", keep_tables=False)
    after = peak_memory_mb()
    assert all(r.workloads and r.budget_hours and r.cluster_hours for r in kept)
    assert all(not (r.workloads or r.budget_hours or r.cluster_hours) for r in dropped)
    for r in kept:
        for stem in ("workloads", "budget_hours", "cluster_hours"):
            name = f"{stem}-{r.policy}.csv"
            assert (tmp_path / "kept" / name).read_bytes() == (
                tmp_path / "dropped" / name).read_bytes()
    peaks = {s["peak_memory_mb"] for s in json.loads(
        (tmp_path / "dropped" / "summary.json").read_text())}
    assert len(peaks) == 1
    assert after - 1.0 <= peaks.pop() <= after
