"""explain(): hand-built situations (one or two 8-GPU hosts, two budgets) with known answers."""

from __future__ import annotations

import pytest

from apportion.core import (
    BudgetTree,
    ClusterState,
    CoreError,
    Host,
    HostState,
    PolicyConfig,
    Slice,
    WaitReason,
    WorkloadSpec,
    decide,
    explain,
)
from apportion.core.explain import Advice

CFG = PolicyConfig()


def cluster(hosts: int = 1) -> ClusterState:
    """Budgets ``p/a`` and ``q/b`` (equal weights: share 0.5 each), 8-GPU hosts from t=0."""
    tree = BudgetTree.build([("p/a", 1.0), ("q/b", 1.0)])
    return ClusterState(tree, [Host(f"h{i}", 8) for i in range(1, hosts + 1)], start=0.0)


def run(st: ClusterState, wid: str, budget: str, gpus: int, min_runtime: float, at: float,
        host: str = "h1", resumable: bool = False) -> None:
    st.submit(WorkloadSpec(wid, budget, gpus, min_runtime, at, resumable=resumable), at)
    st.start(wid, (Slice(host, gpus),), at)


def queue(st: ClusterState, wid: str, budget: str, gpus: int, min_runtime: float,
          at: float) -> None:
    st.submit(WorkloadSpec(wid, budget, gpus, min_runtime, at), at)


def busy_b() -> ClusterState:
    """h1 full with b's work: b1 (4 GPUs, t=1000, protected until 4600) and b2 (4 GPUs,
    t=1500, protected until 3000). At t=2000 b's ratio is 6000 / (0.5 x 16000) = 0.75."""
    st = cluster()
    run(st, "b1", "q/b", 4, 3600, 1000)
    run(st, "b2", "q/b", 4, 1500, 1500)
    return st


def test_pending_blocked_by_protection_has_exact_earliest_start() -> None:
    """A workload blocked by protected work: first in order, no capacity, its cheapest victim
    (least progress lost) is b2, protected until 3000, which is also its earliest start."""
    st = busy_b()
    queue(st, "a1", "p/a", 4, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert (e.status, e.position, e.considered) == ("pending", 1, 1)
    assert e.wait_reason is WaitReason.NO_CAPACITY
    assert e.ratio == 0.0
    assert [(v.id, v.protected, v.protected_until) for v in e.victims] == [("b2", True, 3000.0)]
    assert e.plan_hosts == ("h1",)
    assert e.earliest_start == 3000.0
    assert not e.lower_bound


def test_victim_rules_are_reported() -> None:
    """b is over-used (ratio 0.75 against a's 0 plus its admission charge 0.3), and keeps
    its share after losing b2: the fair-share rule lets a1 take b2 once unprotected."""
    st = busy_b()
    queue(st, "a1", "p/a", 4, 600, 1900)
    (v,) = explain(st, 2000.0, CFG, "a1").victims
    assert v.rules_allow


def test_victim_the_rules_would_not_give_up() -> None:
    """Taking b's only 8-GPU workload would leave b below its share: the rules refuse, and
    the explanation says so."""
    st = cluster()
    run(st, "b1", "q/b", 8, 3600, 1000)
    # 2 GPUs: taking 8 would leave 6 idle (only a request that brings a to its share may
    # leave as many idle as it gets, see policy.md "Head of line")
    queue(st, "a1", "p/a", 2, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert [(v.id, v.rules_allow, v.protected_until) for v in e.victims] == [
        ("b1", False, 4600.0)
    ]
    assert e.earliest_start == 4600.0
    assert any("rebalance rules" in c for c in e.caveats)


def test_a_victim_the_rules_refuse_is_said_what_they_refuse_with_the_figures() -> None:
    """A victim of another budget the rebalance rules keep is said why, with the figures the
    rules read, not only 'rules do not allow it now': b1 (8 GPUs) is more than the 6 the
    rules let a1 (2 GPUs) take from q, which holds 8 against its share of 4; and where no
    rule takes a GPU from the side for it (p at its share and more used than q), that the
    guarantee and fair-share rules move none, with both sides' figures."""
    st = cluster()
    run(st, "b1", "q/b", 8, 600, 1000)
    queue(st, "a1", "p/a", 2, 600, 1900)
    e = explain(st, 5000.0, CFG, "a1")
    assert [(v.id, v.rules_allow) for v in e.victims] == [("b1", False)]
    assert ("would displace b1 (q/b, 8 GPUs): not protected, rules do not allow it now: the "
            "rules let it take at most 6 GPUs from q now (q holds 8 GPUs against its share "
            "of 4), and b1 holds 8") in e.lines()
    st = cluster()
    run(st, "a1", "p/a", 4, 600, 1000)
    run(st, "b1", "q/b", 4, 600, 1500)
    queue(st, "a2", "p/a", 2, 600, 1900)
    (v,) = explain(st, 5000.0, CFG, "a2").victims
    assert (v.id, v.rules_allow) == ("b1", False)
    assert v.why_not == (
        "q holds 4 GPUs against its share of 4, p 4 against its share of 4, usage ratios "
        "0.700 and 0.800: neither the guarantee rule (a side over its share gives way to one "
        "within it) nor the fair-share rule (a side more used, by the margin, gives way while "
        "it keeps its share; this request's admission charge counted) moves GPUs from q to p "
        "for it now")


def test_unprotected_blocker_the_rules_keep_gives_no_future_time() -> None:
    """b1 is past its minimum runtime but the rules keep it (b would drop below its share):
    the earliest start by protection is now, and the text says the rules are the reason."""
    st = cluster()
    run(st, "b1", "q/b", 8, 600, 1000)
    queue(st, "a1", "p/a", 2, 600, 1900)  # 2 GPUs: taking 8 would leave 6 idle
    e = explain(st, 2000.0, CFG, "a1")
    assert e.wait_reason is WaitReason.NO_CAPACITY
    assert [(v.id, v.protected, v.rules_allow) for v in e.victims] == [("b1", False, False)]
    assert (e.earliest_start, e.lower_bound) == (2000.0, False)
    assert any("waits for the rebalance rules" in line for line in e.lines())


def test_a_blocker_of_its_own_budget_is_said_never_to_be_displaced_for_it() -> None:
    """a1 (8 GPUs, protected until 4600) fills h1 and a2 of the same budget waits for room:
    the victim search names a1, whose line says its own budget's work is never displaced
    for it and it waits for it to end (not 'rules do not allow it now', as if a ratio moving
    could change that), and no caveat says it waits for the ratios to move; no earliest
    start is told (a1's protection ending at 4600 frees nothing for a2: it was told 'could
    start in 43 min 20 s at the earliest'), and a caveat says why."""
    st = cluster()
    run(st, "a1", "p/a", 8, 3600, 1000)
    queue(st, "a2", "p/a", 4, 600, 1900)
    e = explain(st, 2000.0, CFG, "a2")
    assert [(v.id, v.protected, v.rules_allow) for v in e.victims] == [("a1", True, False)]
    lines = e.lines()
    assert ("would displace a1 (p/a, 8 GPUs): protected for another 43 min 20 s, its own "
            "budget's work: never displaced for it, it waits for it to end") in lines
    assert not any("ratios to move" in line for line in lines), lines
    # its protection ending frees nothing for a2: no earliest start is told, and why not
    assert e.earliest_start is None
    assert not any("at the earliest" in line for line in lines), lines
    assert ("on every host it could use, the room it needs is held by work of its own "
            "budget, which is never displaced for it: no earliest start can be told, it "
            "starts once enough of that work ends") in lines
    # another budget's blocker the rules keep is still said so
    st = cluster()
    run(st, "b1", "q/b", 8, 3600, 1000)
    queue(st, "a1", "p/a", 2, 600, 1900)
    assert any(", rules do not allow it now: " in line
               for line in explain(st, 2000.0, CFG, "a1").lines())


def test_rival_budget_ahead_is_listed_and_no_start_is_told_behind_its_own_budgets_work(
) -> None:
    """b3 comes after a1 because a's side ``p`` (ratio 0) is below b's side ``q`` (0.75) at
    the root, where the paths diverge; a1 still waits, so what it is told is a lower bound.
    h1 is full of b's own work, never displaced for b3: no earliest start is told (it was
    3000, when b2's protection ends, which frees nothing for b3)."""
    st = busy_b()
    queue(st, "b3", "q/b", 4, 600, 1800)
    queue(st, "a1", "p/a", 4, 600, 1900)
    e = explain(st, 2000.0, CFG, "b3")
    assert (e.position, e.considered) == (2, 2)
    assert [(r.path, r.ratio, r.mine, r.mine_ratio, r.workloads) for r in e.rivals] == [
        ("p", 0.0, "q", 0.75, 1)
    ]
    assert e.earliest_start is None
    assert e.lower_bound
    assert e.caveats[0].startswith("lower bound: 1 workload considered before it is still")
    assert any(c.startswith("on every host it could use, the room it needs is held by work "
                            "of its own budget") for c in e.caveats), e.caveats


def test_same_budget_work_ahead_is_counted() -> None:
    """Inside one budget, earlier submissions come first and are no rivals."""
    st = busy_b()
    queue(st, "b3", "q/b", 4, 600, 1800)
    queue(st, "b4", "q/b", 4, 600, 1850)
    e = explain(st, 2000.0, CFG, "b4")
    assert (e.position, e.same_budget_ahead, e.rivals) == (2, 1, ())


def test_unallocated_work_behind_allocated_work_of_a_higher_ratio_is_told_it_comes_first(
) -> None:
    """b's ratio (0.75) is above a's (0): a's unallocated a1 still waits behind b's
    allocated b3 and b4, because all allocated work is considered before unallocated work;
    the explanation counts them as allocated work ahead and names no rival budget (it said
    "2 workloads of q (ratio 0.750) come first: compared with p (ratio 0.000)")."""
    st = busy_b()
    queue(st, "b3", "q/b", 4, 600, 1800)
    queue(st, "b4", "q/b", 4, 600, 1850)
    queue(st, "a1", "p/a", 4, 0, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert (e.position, e.allocated_ahead, e.same_budget_ahead, e.rivals) == (3, 2, 0, ())
    assert e.lines()[1:3] == [
        "position 3 of 3 in the order considered",
        "2 allocated workloads come first (all allocated work is considered before "
        "unallocated work)"]


def test_position_is_the_order_of_decide() -> None:
    """The position is the one in ``decide(...).order`` at the same instant."""
    st = busy_b()
    for i, (b, t) in enumerate([("q/b", 1700), ("p/a", 1800), ("q/b", 1900), ("p/a", 1950)]):
        queue(st, f"w{i}", b, 2, 600, t)
    order = decide(st, 2000.0, CFG).order
    assert [explain(st, 2000.0, CFG, w).position for w in order] == [1, 2, 3, 4]


def test_work_started_by_the_same_pass_blocks_with_its_protection() -> None:
    """On an empty host a1 (8 GPUs, 600 s) starts at 2000, so b3 behind it could start at
    2600 at the earliest: the pass's own starts count as protected from now."""
    st = cluster()
    queue(st, "a1", "p/a", 8, 600, 1900)
    queue(st, "b3", "q/b", 8, 900, 1950)
    a = explain(st, 2000.0, CFG, "a1")
    assert a.starts_now and a.placement == (Slice("h1", 8),) and a.earliest_start == 2000.0
    b = explain(st, 2000.0, CFG, "b3")
    assert b.earliest_start == 2600.0
    assert not b.lower_bound  # the work ahead of it has started: nothing else is queued


def test_whole_host_workload_waits_for_the_later_host() -> None:
    """16 GPUs need both hosts empty: h1's work is protected until 3000, h2's until 5000."""
    st = cluster(hosts=2)
    run(st, "b1", "q/b", 8, 2000, 1000, host="h1")
    run(st, "b2", "q/b", 8, 4000, 1000, host="h2")
    queue(st, "a1", "p/a", 16, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert e.earliest_start == 5000.0
    assert sorted(v.id for v in e.victims) == ["b1", "b2"]
    assert e.plan_hosts == ("h1", "h2")


def test_unallocated_victim_is_preempted_at_once() -> None:
    """Unallocated work is displaced by the pass itself: the workload waits for it to exit."""
    st = cluster()
    run(st, "u1", "q/b", 8, 0, 1000)
    queue(st, "a1", "p/a", 4, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert e.wait_reason is WaitReason.WAITING_FOR_PREEMPTION
    assert e.preempting == ("u1",)
    assert e.earliest_start == 2000.0


def test_work_still_stopping_from_an_earlier_pass_is_named_with_its_grace_end() -> None:
    """Once the pass that preempted u1 for a1 is applied (u1 stopping, h1 reserved for a1),
    a later pass still has a1 waiting for u1 to exit: ``freeing`` names u1 and ``freed_by``
    its grace end (given by the driver), the text says so, and it does not claim a1 waits
    for the rebalance rules to let it displace anything."""
    st = cluster()
    run(st, "u1", "q/b", 8, 0, 1000)
    queue(st, "a1", "p/a", 4, 600, 1900)
    d = decide(st, 2000.0, CFG)
    assert [(p.workload, p.by) for p in d.preemptions] == [("u1", "a1")]
    st.mark_stopping("u1")
    for r in d.reservations:
        st.reserve(r.workload, r.hosts)
    e = explain(st, 2030.0, CFG, "a1", grace_ends={"u1": 2120.0})
    assert e.wait_reason is WaitReason.WAITING_FOR_PREEMPTION
    assert (e.preempting, e.freeing, e.freed_by) == ((), ("u1",), 2120.0)
    text = e.lines()
    assert "u1 is stopping on the hosts being freed for it (its grace ends in 1 min 30 s)" in text
    assert not [line for line in text if "rebalance rules" in line]
    assert "u1 is stopping on the hosts being freed for it" in explain(st, 2030.0, CFG,
                                                                       "a1").lines()


def test_too_large_has_no_estimate() -> None:
    """With one of two hosts draining, 16 GPUs cannot fit: no start estimate, and the
    caveat counts the healthy GPUs and names the host that is not healthy, in its state."""
    st = cluster(hosts=2)
    st.set_host_state("h2", HostState.DRAINING, 100)
    queue(st, "a1", "p/a", 16, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert e.wait_reason is WaitReason.TOO_LARGE
    assert e.earliest_start is None
    assert e.caveats == ("asks for more GPUs than all healthy hosts together (8 of 16 GPUs "
                         "are healthy; not healthy: h2 draining): it starts only once enough "
                         "hosts are healthy again",)


def test_running_workload_reports_its_protection_end() -> None:
    """A running allocated workload is protected until start + minimum runtime."""
    st = busy_b()
    e = explain(st, 2000.0, CFG, "b1")
    assert (e.status, e.started_at, e.protected_until) == ("running", 1000.0, 4600.0)
    assert e.placement == (Slice("h1", 4),)
    assert "protected for another 43 min 20 s" in e.lines()


def test_running_work_answers_the_minimum_runtime_it_asked_for() -> None:
    """A running workload's explanation carries the minimum runtime it was submitted with
    (b1: 3600 s), in the dataclass and in as_dict, not the field's default of 0."""
    st = busy_b()
    e = explain(st, 2000.0, CFG, "b1")
    assert e.status == "running"
    assert e.min_runtime == 3600.0
    assert e.as_dict()["min_runtime"] == 3600.0


def test_running_work_is_told_what_a_preemption_now_would_cost_it() -> None:
    """The progress a preemption now would throw away, as victim choice counts it
    (Running.at_risk): the whole run of work that is not resumable; for resumable work
    with no checkpoint reported, the time since the last whole interval (30 min, the
    default) from its start; after a reported checkpoint, from that report; nothing for
    work that checkpoints when told to stop."""
    st = cluster(hosts=2)
    run(st, "b1", "q/b", 4, 600, 1000)  # not resumable
    run(st, "b3", "q/b", 4, 600, 1000, resumable=True)
    st.submit(WorkloadSpec("b4", "q/b", 4, 600, 1000, resumable=True, checkpoint_on_term=True),
              1000)
    st.start("b4", (Slice("h2", 4),), 1000)
    now = 1000.0 + 2 * 1800 + 300  # 1 h 5 min into each run
    b1 = explain(st, now, CFG, "b1")
    assert (b1.at_risk, b1.lines()[3]) == (3900.0, "if preempted now it would lose 1 h 5 min "
                                           "of progress: not resumable, its whole run so far")
    b3 = explain(st, now, CFG, "b3")
    assert (b3.at_risk, b3.lines()[3]) == (300.0, "if preempted now it would lose 5 min of "
                                           "progress: no checkpoint reported in this run, one "
                                           "assumed every 30 min")
    st.checkpoint("b3", now - 120)
    b3 = explain(st, now, CFG, "b3")
    assert (b3.at_risk, b3.checkpointed_at, b3.lines()[3]) == (
        120.0, now - 120, "if preempted now it would lose 2 min of progress: its last "
        "checkpoint reported 2 min ago, then one assumed every 30 min")
    b4 = explain(st, now, CFG, "b4")
    assert (b4.at_risk, b4.lines()[3]) == (
        0.0, "if preempted now it would lose nothing: it checkpoints when told to stop")


def test_running_work_on_a_draining_host_is_told_when_it_is_stopped_and_its_fate() -> None:
    """h1 is being drained: b1 (protected until 4600, not resumable) is told it is stopped
    when its minimum runtime ends and ends preempted; resumable b3 on h1 as well, that it is
    requeued; past its protection, "on the next pass", as the drain phase of the next
    decide preempts it. b4 on the healthy h2 is told nothing of a drain."""
    st = cluster(hosts=2)
    run(st, "b1", "q/b", 4, 3600, 1000)
    run(st, "b3", "q/b", 4, 600, 1000, resumable=True)
    run(st, "b4", "q/b", 4, 3600, 1000, host="h2")
    st.set_host_state("h1", HostState.DRAINING, 1500)
    b1 = explain(st, 2000.0, CFG, "b1")
    assert (b1.draining, b1.resumable) == (("h1",), False)
    assert b1.lines()[-1] == ("h1 is being drained: it is stopped in 43 min 20 s, when its "
                              "minimum runtime ends, and not requeued (not resumable): it ends "
                              "preempted")
    b3 = explain(st, 2000.0, CFG, "b3")
    assert b3.lines()[-1] == ("h1 is being drained: it is stopped on the next pass, and "
                              "requeued (resumable: it keeps its place in its budget's queue)")
    assert [p.workload for p in decide(st, 2000.0, CFG).preemptions] == ["b3"]
    b4 = explain(st, 2000.0, CFG, "b4")
    assert b4.draining == () and not any("drained" in line for line in b4.lines())


def test_running_work_with_a_time_limit_is_told_when_the_limit_stops_it() -> None:
    """b1 (time limit 2 h, started at 1000) is told at 2000 that its limit stops it in
    1 h 43 min, at 8200, the deadline the policy's time-limit phase stops it at (the
    clock's time too when given), ending as timeout; past the deadline, on the next pass,
    as decide then times it out. ``time_limit`` and ``time_limit_at`` are in as_dict. b2,
    without a limit, is told nothing of one."""
    st = cluster()
    st.submit(WorkloadSpec("b1", "q/b", 4, 600, 1000, time_limit=7200), 1000)
    st.start("b1", (Slice("h1", 4),), 1000)
    run(st, "b2", "q/b", 4, 600, 1000)
    e = explain(st, 2000.0, CFG, "b1")
    assert (e.time_limit, e.time_limit_at) == (7200.0, 8200.0)
    assert e.as_dict()["time_limit"] == 7200.0 and e.as_dict()["time_limit_at"] == 8200.0
    assert e.lines()[-1] == ("its time limit of 2 h stops it in 1 h 43 min: it ends as "
                             "timeout, not requeued")
    assert e.lines(lambda t: f"t={t:g}")[-1] == (
        "its time limit of 2 h stops it at t=8200 (in 1 h 43 min): it ends as timeout, not "
        "requeued")
    late = explain(st, 8300.0, CFG, "b1")
    assert late.lines()[-1] == ("its time limit of 2 h stops it on the next pass (reached): "
                                "it ends as timeout, not requeued")
    assert decide(st, 8300.0, CFG).timeouts == ("b1",)
    b2 = explain(st, 2000.0, CFG, "b2")
    assert (b2.time_limit, b2.time_limit_at) == (0.0, None)
    assert not any("time limit" in line for line in b2.lines())


# R (a, 2 of h1's 4 GPUs, resumable) runs from 0, is preempted at 14 s and resumed at 30 s
# (or never preempted); L (a, 2 GPUs, 5 min) holds the rest; b asks for 2 GPUs at 45 s.
# restart_protection 60 s: R is no rebalance victim before the later of its minimum
# runtime's end and 30 + 60 = 90 (docs/policy.md, "Restart protection").
RESTART_CFG = PolicyConfig(max_min_runtime=300, restart_protection=60, checkpoint_wait=0,
                           debug_lane=False)


def resumed_cluster(min_runtime: float, resumed: bool) -> ClusterState:
    st = ClusterState(BudgetTree.build([("a", 1), ("b", 1)]), [Host("h1", 4)])
    st.submit(WorkloadSpec("R", "a", 2, min_runtime, 0.0, resumable=True), 0.0)
    st.start("R", (Slice("h1", 2),), 0.0)
    st.submit(WorkloadSpec("L", "a", 2, 300, 0.0), 0.0)
    st.start("L", (Slice("h1", 2),), 0.0)
    if resumed:
        st.mark_stopping("R")
        st.requeue("R", 14.0)
        st.start("R", (Slice("h1", 2),), 30.0)
    st.submit(WorkloadSpec("B", "b", 2, 10, 45.0), 45.0)
    return st


@pytest.mark.parametrize(("min_runtime", "resumed", "protected_until", "preempted_at"), [
    (10, True, 90.0, 90.0),  # the restart protection ends last
    (100, True, 130.0, 130.0),  # the minimum runtime of the resumed run ends last
    (10, False, 10.0, 45.0),  # never requeued: past its minimum runtime, preempted at once
])
def test_explain_projects_the_start_decide_gives_past_the_restart_protection(
    min_runtime: float, resumed: bool, protected_until: float, preempted_at: float
) -> None:
    """At 45 s, explain's protection end of R (R's own ``protected_until``, and as B's
    victim) is when the rules let a rebalance take it, and the first moment decide preempts
    R for B is B's projected start (or R is preempted for B now): explain counts a resumed
    run's restart protection as the rules apply it."""
    st = resumed_cluster(min_runtime, resumed)
    first = next(t for t in range(45, 301)
                 if any((p.workload, p.by) == ("R", "B")
                        for p in decide(st, t, RESTART_CFG).preemptions))
    assert first == preempted_at
    assert explain(st, 45.0, RESTART_CFG, "R").protected_until == protected_until
    b = explain(st, 45.0, RESTART_CFG, "B")
    if preempted_at == 45.0:
        assert (b.preempting, b.earliest_start) == (("R",), 45.0)
        return
    assert [(v.id, v.protected, v.protected_until, v.rules_allow) for v in b.victims] == [
        ("R", True, protected_until, True)]
    assert (b.earliest_start, b.projected_start) == (preempted_at, preempted_at)


def test_a_resumed_run_is_told_its_restart_protection_and_a_drain_its_minimum_runtime(
) -> None:
    """R, resumed at 30 s (minimum runtime 10 s, restart_protection 60 s), at 45 s: protected
    for another 45 s by its restart protection (said so); on a draining host it is told it
    is stopped on the next pass, since a drain waits for the minimum runtime only (and the
    drain phase of decide does preempt it)."""
    st = resumed_cluster(10, resumed=True)
    r = explain(st, 45.0, RESTART_CFG, "R")
    assert (r.restarted, r.min_runtime_ends, r.protected_until) == (True, 40.0, 90.0)
    assert r.lines()[2] == ("protected for another 45 s (restart protection: a run resumed "
                            "after a requeue is no rebalance victim for its first 1 min)")
    st.set_host_state("h1", HostState.DRAINING, 45.0)
    assert explain(st, 45.0, RESTART_CFG, "R").lines()[-1] == (
        "h1 is being drained: it is stopped on the next pass, and requeued (resumable: it "
        "keeps its place in its budget's queue)")
    assert [p.workload for p in decide(st, 45.0, RESTART_CFG).preemptions] == ["R"]
    assert explain(st, 95.0, RESTART_CFG, "L").lines()[2] == "protected for another 3 min 25 s"
    st.set_host_state("h1", HostState.HEALTHY, 95.0)
    assert explain(st, 95.0, RESTART_CFG, "R").lines()[2] == (
        "not protected: it may be preempted (past its minimum runtime and its restart "
        "protection)")


def test_unknown_workload_is_an_error_naming_it() -> None:
    """An id the state does not hold raises CoreError naming the id."""
    with pytest.raises(CoreError, match="workload nope: not pending or running"):
        explain(busy_b(), 2000.0, CFG, "nope")


def test_explain_leaves_the_state_unchanged() -> None:
    """explain is pure: the state's fingerprint is equal before and after."""
    st = busy_b()
    queue(st, "a1", "p/a", 4, 600, 1900)
    before = st.fingerprint()
    explain(st, 2000.0, CFG, "a1")
    assert st.fingerprint() == before


def test_as_dict_is_plain_json() -> None:
    """The JSON form carries enums as values and the text lines."""
    import json

    st = busy_b()
    queue(st, "a1", "p/a", 4, 600, 1900)
    d = json.loads(json.dumps(explain(st, 2000.0, CFG, "a1").as_dict()))
    assert d["wait_reason"] == "no_capacity" and d["earliest_start"] == 3000.0
    assert d["victims"][0]["id"] == "b2"
    assert "could start in 16 min 40 s at the earliest" in d["text"]


# ---- advice: the policy run on changed requests ------------------------------------------
def three_budgets(b_started: float, b_min_runtime: float) -> ClusterState:
    """Budgets a, b, c (share 1/3 each: 8 GPUs of three 8-GPU hosts). a holds its share on
    h1 (a0, 8 GPUs, 8 h, since 9000, protected until 37800); b holds twice its share as
    sixteen 1-GPU workloads on h2 and h3 since ``b_started``. a1 (1 GPU, 8 h) is queued.

    At 10000 with b since 8000: capacity 24 x 10000, so a share's denominator is 80000 and
    a's ratio is 8 x 1000 / 80000 = 0.1, b's 16 x 2000 / 80000 = 0.4. a is at its share, so
    only the fair-share rule can let a1 in: b's ratio must exceed a's plus the admission
    charge by 10%: 0.1 + 28800/80000 = 0.46 (8 h) fails, 0.1 + 21600/80000 = 0.37 (6 h)
    fails (0.407 > 0.4), 0.1 + 14400/80000 = 0.28 (4 h) passes."""
    tree = BudgetTree.build([("a", 1.0), ("b", 1.0), ("c", 1.0)])
    st = ClusterState(tree, [Host(f"h{i}", 8) for i in (1, 2, 3)], start=0.0)
    st.submit(WorkloadSpec("a0", "a", 8, 8 * 3600.0, 9000.0), 0.0)
    jobs = [WorkloadSpec(f"b{i:02d}", "b", 1, b_min_runtime, b_started) for i in range(16)]
    for spec in jobs:
        st.submit(spec, 0.0)
    for i, spec in enumerate(jobs):
        st.start(spec.id, (Slice("h2" if i < 8 else "h3", 1),), b_started)
    st.start("a0", (Slice("h1", 8),), 9000.0)
    st.submit(WorkloadSpec("a1", "a", 1, 8 * 3600.0, 9500.0), 9500.0)
    return st


def test_shorter_min_runtime_that_starts_it_now_is_advised() -> None:
    """b past its minimum runtime: a1 (8 h) waits, and the advice is the longest minimum
    runtime of the ladder the fair-share rule accepts (4 h: see three_budgets), starting now
    on h2 in place of b's cheapest workload (b00); 6 h is tried first and refused."""
    st = three_budgets(b_started=8000.0, b_min_runtime=600.0)
    e = explain(st, 10000.0, CFG, "a1")
    assert e.wait_reason is WaitReason.NO_CAPACITY and not e.starts_now
    assert e.advice == (Advice("min_runtime", 4 * 3600.0, 1, 10000.0, ("h2",), ("b00",)),)
    assert ("with a minimum runtime of at most 4 h (instead of 8 h) it could start now on "
            "h2, displacing b00") in e.lines()


def test_projected_start_is_when_the_rules_let_the_request_as_made_in() -> None:
    """As asked (8 h), the first moment the policy would start a1 if nothing else changed
    is when a0's protection ends (37800): then a's ratio is 8 x 28800 / 302400 and b's
    16 x 29800 / 302400, far enough apart for the fair-share rule."""
    st = three_budgets(b_started=8000.0, b_min_runtime=600.0)
    e = explain(st, 10000.0, CFG, "a1")
    assert (e.projected_start, e.projection_end) == (37800.0, 37800.0)
    assert any(line.endswith("the policy starts it within 7 h 43 min") for line in e.lines())


def test_shorter_min_runtime_that_starts_it_later_today_is_advised_with_the_time() -> None:
    """b's workloads are protected until 10600. Then (capacity 24 x 10600, a share's
    denominator 84800) a's ratio is 8 x 1600 / 84800, b's 16 x 2600 / 84800 = 0.49: 6 h
    passes the fair-share rule (0.151 + 0.255 = 0.406, x 1.1 = 0.447 < 0.49), 8 h does not.
    The advice: 6 h, at 10600, on h2; nothing shorter starts sooner (b is protected before),
    and dropping the minimum runtime (unallocated) is not advised: unallocated work never displaces
    allocated work, and free GPUs go to allocated work first, so it would not start sooner."""
    st = three_budgets(b_started=8000.0, b_min_runtime=2600.0)
    e = explain(st, 10000.0, CFG, "a1")
    assert e.advice == (Advice("min_runtime", 6 * 3600.0, 1, 10600.0, ("h2",), ("b00",)),)
    lines = e.lines(clock=lambda t: f"T+{t - 10000:g}")
    assert ("with a minimum runtime of at most 6 h (instead of 8 h) it could start at T+600 "
            "(in 10 min) on h2, displacing b00") in lines


def test_fewer_gpus_that_fit_now_are_advised() -> None:
    """h1 has 3 free GPUs beside b1 (5 GPUs, protected until 4600). a1 asks for 4, within
    a's share: as asked it starts at 4600 by the share guarantee (b1 is the one larger
    victim it may take), no shorter minimum runtime helps, and with 3 GPUs it starts now."""
    st = cluster()
    run(st, "b1", "q/b", 5, 3600, 1000)
    queue(st, "a1", "p/a", 4, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert (e.projected_start, e.projection_end) == (4600.0, 4600.0)
    assert e.advice == (Advice("gpus", 600.0, 3, 2000.0, ("h1",)),)
    assert "with 3 GPUs instead of 4 it could start now on h1" in e.lines()


def test_unallocated_work_is_told_that_a_minimum_runtime_would_start_it_now() -> None:
    """Unallocated a1 waits behind unallocated u0 (8 GPUs): as allocated work it may
    displace u0 at once; the longest minimum runtime allowed (the 8 h cap) already does."""
    st = cluster()
    run(st, "u0", "q/b", 8, 0, 1000)
    queue(st, "a1", "p/a", 2, 0, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert e.advice == (Advice("min_runtime", 8 * 3600.0, 2, 2000.0, ("h1",), ("u0",)),)
    assert ("as allocated work with a minimum runtime of 8 h (charged to its budget, "
            "protected that long) it could start now on h1, displacing u0") in e.lines()


def test_too_large_is_told_how_many_gpus_fit() -> None:
    """16 GPUs with one of two hosts draining: one host's 8 GPUs start now on h1."""
    st = cluster(hosts=2)
    st.set_host_state("h2", HostState.DRAINING, 100)
    queue(st, "a1", "p/a", 16, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert [(a.change, a.gpus, a.start, a.hosts) for a in e.advice] == [
        ("gpus", 8, 2000.0, ("h1",))]


def test_no_advice_when_nothing_changed_would_start_it_sooner() -> None:
    """b1 holds all of h1 protected until 4600 and the rules keep it afterwards (b would
    drop below its share): no smaller request, no shorter minimum runtime starts a1 (8 GPUs)
    sooner, and dropping the minimum runtime never does (unallocated work never preempts)."""
    st = cluster()
    run(st, "b1", "q/b", 8, 3600, 1000)
    queue(st, "a1", "p/a", 8, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert (e.projected_start, e.advice) == (None, ())


def test_advice_leaves_state_and_decisions_unchanged() -> None:
    """Trying changed requests swaps them into the state and out again: the fingerprint
    and the pass's decisions are the same before and after, for allocated and unallocated
    work alike (swapping an unallocated request for an allocated one adds index keys)."""
    st = three_budgets(b_started=8000.0, b_min_runtime=2600.0)
    queue(st, "u1", "c", 2, 0, 9600)
    before, decided = st.fingerprint(), decide(st, 10000.0, CFG)
    assert explain(st, 10000.0, CFG, "a1").advice
    assert explain(st, 10000.0, CFG, "u1").advice
    assert st.fingerprint() == before
    assert decide(st, 10000.0, CFG) == decided


def test_waiting_debug_work_is_told_why_the_debug_lane_did_not_start_it() -> None:
    """``p/a`` runs 8 GPUs of debug work (started a minute ago, still protected) on h1, and
    ``q/b`` fills h2: a's next 1-GPU debug job waits, and is told that the lane is closed
    to its budget while that work holds 8 GPUs; b's own debug job, with no debug work of
    b running, is told that no room is left for it."""
    st = cluster(2)
    run(st, "a-dbg", "p/a", 8, 600.0, 3_540.0)
    run(st, "b-run", "q/b", 8, 4 * 3600.0, 3_540.0, host="h2")
    queue(st, "a-next", "p/a", 1, 600.0, 3_550.0)
    queue(st, "b-dbg", "q/b", 1, 600.0, 3_560.0)
    now = 3_600.0
    assert not decide(st, now, CFG).starts
    a = explain(st, now, CFG, "a-next")
    assert any("only while its budget's running debug work holds at most 8 GPUs with it: "
               "p/a's holds 8 GPUs" in c for c in a.caveats), a.caveats
    b = explain(st, now, CFG, "b-dbg")
    assert any("the debug lane" in c and "no room is left for it now" in c
               for c in b.caveats), b.caveats
    assert not any("the debug lane" in c for c in explain(
        st, now, PolicyConfig(debug_lane=False), "b-dbg").caveats)
