"""Hand-computed cases of the policy: Fair Tree order, admission charges, who may displace
whom, and the rebalance rules."""

from __future__ import annotations

from apportion.core import (
    ClusterState,
    PolicyConfig,
    Preempt,
    PreemptReason,
    Slice,
    WaitReason,
    decide,
    decision_log,
)

from .helpers import HOUR, Driver, make_hosts, make_spec, make_state, make_tree, run_on

CFG = PolicyConfig()
T = 1000.0


def fair_tree_state() -> ClusterState:
    """Tree p (p/a, p/b) and q (q/c), equal weights: shares p 0.5, p/a 0.25, p/b 0.25,
    q/c 0.5. Two 8-GPU hosts (16 GPUs). On [0, T): p/b ran 6 GPUs, q/c ran 4.

    Ratios at T (capacity 16 T): p = 6T / 8T = 0.75, q = q/c = 4T / 8T = 0.5,
    p/a = 0, p/b = 6T / 4T = 1.5. A flat sort of leaves would give p/a, q/c, p/b; Fair Tree
    compares siblings at each level: q before p, then inside p, p/a before p/b.
    At T the cluster is filled with fresh protected work (no usage yet in the window), so
    nothing can start or be displaced and the order is the pure ranking."""
    st = make_state(make_tree("p/a", "p/b", "q/c"), make_hosts(8, 8))
    run_on(st, make_spec("hist_b", "p/b", 6, HOUR), 0.0, ("h0", 6))
    run_on(st, make_spec("hist_c", "q/c", 4, HOUR), 0.0, ("h1", 4))
    st.finish("hist_b", T)
    st.finish("hist_c", T)
    run_on(st, make_spec("fill0", "p/b", 8, 8 * HOUR, T), T, ("h0", 8))
    run_on(st, make_spec("fill1", "p/b", 8, 8 * HOUR, T), T, ("h1", 8))
    return st


def test_fair_tree_order_is_hierarchical() -> None:
    """At each level the sibling with the lower usage ratio goes first, depth-first; inside
    a budget higher priority first, then earlier submission."""
    st = fair_tree_state()
    for spec in [
        make_spec("b1", "p/b", 1, HOUR, 1.0),
        make_spec("a1", "p/a", 1, HOUR, 1.0),
        make_spec("a2", "p/a", 1, HOUR, 2.0, priority=1),
        make_spec("a3", "p/a", 1, HOUR, 0.5),
        make_spec("c1", "q/c", 1, HOUR, 5.0),
        make_spec("c2", "q/c", 1, HOUR, 3.0),
    ]:
        st.submit(spec, T)
    d = decide(st, T, CFG)
    assert d.order == ("c2", "c1", "a2", "a3", "a1", "b1")
    assert d.starts == () and d.preemptions == ()
    assert set(d.waiting.values()) == {WaitReason.NO_CAPACITY}


def test_unallocated_work_is_considered_after_all_allocated_work() -> None:
    """Even from the least used budget, unallocated work comes after every allocated one."""
    st = fair_tree_state()
    st.submit(make_spec("ua", "p/a", 1, 0.0, 0.0), T)
    st.submit(make_spec("b1", "p/b", 16, HOUR, 9.0), T)
    d = decide(st, T, CFG)
    assert d.order == ("b1", "ua")


def two_budgets(hosts: int = 4) -> ClusterState:
    return make_state(make_tree("x", "y"), make_hosts(*([8] * hosts)))


def test_admission_charge_makes_budgets_alternate() -> None:
    """With equal ratios, each admission charges its budget gpus x min_runtime and re-ranks,
    so two budgets alternate instead of the first one taking the whole cluster."""
    st = two_budgets()
    for i in range(4):
        st.submit(make_spec(f"x{i}", "x", 8, HOUR, float(i)), 10.0)
        st.submit(make_spec(f"y{i}", "y", 8, HOUR, float(i)), 10.0)
    d = decide(st, 10.0, CFG)
    assert [s.workload for s in d.starts] == ["x0", "y0", "x1", "y1"]
    assert d.order[:4] == ("x0", "y0", "x1", "y1")


def test_without_admission_charge_one_budget_takes_everything() -> None:
    """The contrast: with no admission charge the ratios never move within the pass and the
    first budget in the ranking takes all four hosts."""
    st = two_budgets()
    for i in range(4):
        st.submit(make_spec(f"x{i}", "x", 8, HOUR, float(i)), 10.0)
        st.submit(make_spec(f"y{i}", "y", 8, HOUR, float(i)), 10.0)
    d = decide(st, 10.0, PolicyConfig(admission_charge=0.0))
    assert [s.workload for s in d.starts] == ["x0", "x1", "x2", "x3"]


def test_unallocated_work_never_preempts() -> None:
    """Pending unallocated work waits, even behind unallocated work of an over-used budget."""
    st = two_budgets(1)
    run_on(st, make_spec("u", "y", 8, 0.0), 0.0, ("h0", 8))
    st.submit(make_spec("free", "x", 8, 0.0, 5.0), 5.0)
    d = decide(st, 5.0, CFG)
    assert d.preemptions == () and d.starts == ()
    assert d.waiting == {"free": WaitReason.NO_CAPACITY}


def test_protected_work_is_never_displaced() -> None:
    """A budget that used nothing cannot displace work inside its minimum runtime, however
    over-used its owner is; at the end of the protection it can."""
    st = two_budgets(1)
    run_on(st, make_spec("hog0", "y", 4, 4 * HOUR), 0.0, ("h0", 4))
    run_on(st, make_spec("hog1", "y", 4, 4 * HOUR), 1.0, ("h0", 4))
    st.submit(make_spec("p", "x", 4, HOUR, HOUR), HOUR)
    assert decide(st, HOUR, CFG).preemptions == ()
    assert decide(st, 4 * HOUR - 1, CFG).preemptions == ()
    d = decide(st, 4 * HOUR + 1, CFG)
    assert d.preemptions == (Preempt("hog1", PreemptReason.REBALANCE, False, by="p"),)


def test_priority_never_preempts_within_a_budget() -> None:
    """A high-priority workload does not displace its own budget's work past its minimum
    runtime (priority orders one budget's queue, nothing more)."""
    st = two_budgets(1)
    run_on(st, make_spec("low", "x", 8, 60.0), 0.0, ("h0", 8))
    st.submit(make_spec("high", "x", 8, HOUR, HOUR, priority=9), HOUR)
    assert decide(st, HOUR, CFG).preemptions == ()


def test_guarantee_rule_takes_from_the_side_over_its_share() -> None:
    """y holds all 16 GPUs (share 8) past their minimum runtime; x asks 4 (within its share):
    one of y's 4-GPU jobs is displaced even though y's window usage is recent."""
    st = two_budgets(2)
    for i, h in enumerate(("h0", "h0", "h1", "h1")):
        run_on(st, make_spec(f"y{i}", "y", 4, 60.0, resumable=True), 0.0, (h, 4))
    st.submit(make_spec("p", "x", 4, HOUR, 120.0), 120.0)
    d = decide(st, 120.0, CFG)
    assert d.preemptions == (Preempt("y0", PreemptReason.REBALANCE, True, by="p"),)


def test_no_rebalance_without_the_knob() -> None:
    """With rebalancing off, only unallocated work is ever displaced."""
    st = two_budgets(2)
    for i, h in enumerate(("h0", "h0", "h1", "h1")):
        run_on(st, make_spec(f"y{i}", "y", 4, 60.0, resumable=True), 0.0, (h, 4))
    st.submit(make_spec("p", "x", 4, HOUR, 120.0), 120.0)
    assert decide(st, 120.0, PolicyConfig(rebalance=False)).preemptions == ()


def test_no_ping_pong_between_two_budgets() -> None:
    """After x took its share from y, y's requeued work cannot take it back: the instant
    settles within three rounds (preempt, start, and one more: GPUs freed for x's second
    workload are not reserved across passes, so y's requeued victim may restart in them and
    x1 displaces another of y's jobs), x holds its share, and nothing moves later either."""
    st = two_budgets(2)
    for i, h in enumerate(("h0", "h0", "h1", "h1")):
        run_on(st, make_spec(f"y{i}", "y", 4, 60.0, resumable=True), 0.0, (h, 4))
    for i in range(2):
        st.submit(make_spec(f"x{i}", "x", 4, HOUR, 120.0), 120.0)
    drv = Driver(st)
    assert drv.settle(120.0) <= 3
    assert {w for w in st.running if w.startswith("x")} == {"x0", "x1"}
    assert len(st.running) == 4 and len(st.pending) == 2
    assert drv.settle(2 * HOUR) == 0  # x past its minimum runtime: still nothing moves


def test_burst_above_share_when_nobody_else_asks() -> None:
    """A budget alone in the queue takes the whole cluster (work-conserving), and is
    protected there."""
    st = two_budgets(2)
    for i in range(4):
        st.submit(make_spec(f"x{i}", "x", 4, HOUR, float(i)), 0.0)
    d = decide(st, 0.0, CFG)
    assert len(d.starts) == 4


def test_decision_log_lines() -> None:
    """The log has one line per decision: host changes, preemptions, then starts."""
    st = two_budgets(1)
    run_on(st, make_spec("u", "y", 4, 0.0), 0.0, ("h0", 4))
    st.submit(make_spec("p", "x", 8, HOUR, 1.0), 1.0)
    st.submit(make_spec("q", "x", 0 + 4, 0.0, 2.0), 2.0)
    d = decide(st, 2.0, CFG)
    assert decision_log(2.0, d) == ["2.000 preempt u unallocated requeue=False by=p"]
    st.mark_stopping("u")
    st.finish("u", 3.0)
    assert decision_log(3.0, decide(st, 3.0, CFG)) == ["3.000 start p on h0:8"]
    assert Slice("h0", 8).gpus == 8


def test_a_budget_asking_exactly_its_share_gets_it_from_a_recent_burst() -> None:
    """Regression: x used the whole cluster for five days, y was idle, then y burst onto
    both hosts. x asks for exactly its share (one of two hosts): y, at twice its share and
    past its minimum runtime, gives one host up although its window usage is lower than
    x's (the guarantee rule allows a tie: both sides end exactly at their share)."""
    day = 86400.0
    st = two_budgets(2)
    run_on(st, make_spec("hist", "x", 16, HOUR), 0.0, ("h0", 8), ("h1", 8))
    st.finish("hist", 5 * day)
    t0 = 5 * day
    run_on(st, make_spec("y0", "y", 8, 60.0, t0), t0, ("h0", 8))
    run_on(st, make_spec("y1", "y", 8, 60.0, t0), t0, ("h1", 8))
    st.submit(make_spec("x0", "x", 8, HOUR, t0 + 10), t0 + 10)
    d = decide(st, t0 + 120, CFG)
    assert d.preemptions == (Preempt("y0", PreemptReason.REBALANCE, False, by="x0"),)
