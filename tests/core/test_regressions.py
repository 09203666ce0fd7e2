"""Regressions of the pass: each case once made it emit an impossible decision."""

from __future__ import annotations

import dataclasses

import pytest

from apportion.core import ClusterState, HostState, PolicyConfig, Slice, decide
from apportion.core.placement import find_victims
from apportion.core.policy import Pass, _charge_threshold

from .helpers import HOUR, make_hosts, make_spec, make_tree, run_on

CFG = PolicyConfig()


def test_drained_multi_host_work_is_not_also_a_whole_host_victim() -> None:
    """A 16-GPU workload on a draining host and a healthy one is preempted once (by the
    drain), not a second time as a victim of a whole-host request in the same pass."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8, 8, 8))
    st.submit(make_spec("u", "b", 16, min_runtime=0.0), 0.0)
    st.start("u", (Slice("h0", 8), Slice("h1", 8)), 0.0)
    st.submit(make_spec("w", "b", 8, min_runtime=0.0), 0.0)
    st.start("w", (Slice("h2", 8),), 0.0)
    st.set_host_state("h0", HostState.DRAINING, 1.0)
    st.submit(make_spec("x", "a", 16), 2.0)
    d = decide(st, 2.0, CFG)
    ids = [p.workload for p in d.preemptions]
    assert len(ids) == len(set(ids)), ids
    assert "u" in ids


def test_a_shorter_request_is_tried_after_a_longer_one_of_the_same_size_failed() -> None:
    """Budgets p, v and w share three 8-GPU hosts (8 GPUs each). v holds all 24 since t=0,
    past its minimum runtime; at t=10,000 s its usage ratio is 3. p asks twice for 16 GPUs,
    more than its share, so only the fair-share rule can help. The first request (8 h)
    carries an admission charge putting p's ratio at 5.76: no rebalance. The second (15 min)
    puts it at 0.18: it may take two of v's hosts (v keeps its share). A failed request says
    nothing about one as large but shorter, so the second is tried and preempts."""
    st = ClusterState(make_tree("p", "v", "w"), make_hosts(8, 8, 8))
    for i in range(3):
        st.submit(make_spec(f"v{i}", "v", 8, min_runtime=600.0), 0.0)
        st.start(f"v{i}", (Slice(f"h{i}", 8),), 0.0)
    st.submit(make_spec("long", "p", 16, min_runtime=8 * 3600.0, submit_time=100.0), 100.0)
    st.submit(make_spec("short", "p", 16, min_runtime=900.0, submit_time=200.0), 200.0)
    d = decide(st, 10_000.0, CFG)
    assert not [p for p in d.preemptions if p.by == "long"]
    assert len([p for p in d.preemptions if p.by == "short"]) == 2


def test_a_failed_rebalance_skips_only_requests_it_proves_hopeless() -> None:
    """The charge from which later requests of a budget are skipped after a failure: the
    bound fell 4 GPUs short of 10; one side opens below a charge of 100 (2 GPUs more),
    another below 50 (3 more). Only a charge under 50 could reach 10 GPUs, so from 50 on
    (a hair above, for rounding) requests fail. Sides that never reach it, or none: any
    charge fails. After a failed search (the bound was enough), below the first opening."""
    assert _charge_threshold(10, 6.0, [(100.0, 2.0), (50.0, 3.0)]) == pytest.approx(50.0)
    assert _charge_threshold(10, 6.0, [(100.0, 2.0), (50.0, 3.0)]) > 50.0
    assert _charge_threshold(10, 6.0, [(100.0, 1.0), (50.0, 1.0)]) == 0.0
    assert _charge_threshold(10, 6.0, []) == 0.0
    assert _charge_threshold(10, None, [(50.0, 3.0), (100.0, 1.0)]) == pytest.approx(100.0)


def test_a_whole_host_rebalance_searches_the_hosts_of_the_sides_giving_way() -> None:
    """Five 8-GPU hosts: b runs three 8-GPU jobs (h0-h2, past their minimum runtime, well
    over b's third of the cluster), unallocated work holds 4 GPUs of h3 and c 4 of h4 (c is
    under its share). a asks for two whole hosts. The search looks only at b's hosts and
    the host without allocated work (not h4, which c's work, protected by no rule, keeps),
    and finds what the search over every host finds: h3 and one of b's hosts."""
    st = ClusterState(make_tree("a", "b", "c"), make_hosts(8, 8, 8, 8, 8))
    for i in range(3):
        st.submit(make_spec(f"b{i}", "b", 8, min_runtime=600.0), 0.0)
        st.start(f"b{i}", (Slice(f"h{i}", 8),), 0.0)
    st.submit(make_spec("free", "c", 4, min_runtime=0.0), 0.0)
    st.start("free", (Slice("h3", 4),), 0.0)
    st.submit(make_spec("c0", "c", 4, min_runtime=600.0), 0.0)
    st.start("c0", (Slice("h4", 4),), 0.0)
    spec = make_spec("x", "a", 16, min_runtime=900.0, submit_time=9_000.0)
    st.submit(spec, 9_000.0)
    now = 10_000.0
    probe = Pass(st, now, CFG)
    assert find_victims(probe.hosts, spec, now, None) is None  # unallocated alone: too few
    _, giving, _, _ = probe.rebalance_bound(spec)
    assert giving == {"b": "a"}
    assert probe.reach(giving, whole_hosts=True) == {"h0", "h1", "h2", "h3"}
    rooms = []
    for only in (None, probe.reach(giving, whole_hosts=True)):
        view = Pass(st, now, CFG)
        plan = find_victims(
            view.hosts, spec, now,
            lambda c, taken, view=view: view.rules.may_preempt(spec, c, taken, giving),
            only=only,
        )
        assert plan is not None
        rooms.append((plan.hosts, [v.id for v in plan.victims]))
    assert rooms[0] == rooms[1] == ((("h0", 8), ("h3", 8)), ["free", "b0"])
    d = decide(st, now, CFG)
    assert {(p.workload, p.by) for p in d.preemptions} == {("free", "x"), ("b0", "x")}


def test_a_larger_request_of_a_budget_is_tried_after_a_smaller_one_failed_to_rebalance() -> None:
    """The guarantee rule's overshoot grows with the request: x holds one 8-GPU run on a
    4-GPU share (of 12 healthy GPUs: h0 8, h1 4), y runs 4 GPUs on h1 and asks for 1 GPU,
    then for 4 (both fit within its 8-GPU share). For 1 GPU x may lose at most 5.5 GPUs,
    less than its run; for 4 GPUs up to 8 (x may end 4 GPUs below its share), so the run
    is preempted for the 4-GPU request. The failure of the 1-GPU request must not be
    recorded for the 4-GPU one (it was, and the fast pass decided nothing where the
    reference pass preempts)."""
    st = ClusterState(make_tree(("x", 0.5), "y"), make_hosts(8, 4))
    run_on(st, make_spec("x0", "x", 8, min_runtime=60.0), 0.0, ("h0", 8))
    run_on(st, make_spec("y0", "y", 4, min_runtime=60.0), 0.0, ("h1", 4))
    st.submit(make_spec("small", "y", 1, min_runtime=60.0, submit_time=100.0), 100.0)
    st.submit(make_spec("large", "y", 4, min_runtime=60.0, submit_time=200.0), 200.0)
    now = 3_600.0
    probe = Pass(st, now, CFG)
    small, large = st.pending["small"].spec, st.pending["large"].spec
    y, x = probe.rules.figures("y"), probe.rules.figures("x")
    assert probe.rules.limit(small, y, x) == pytest.approx(5.5)
    assert probe.rules.limit(large, y, x) == pytest.approx(8.0)
    assert probe.rules.overshoot_room(small, y, x, 5.5, 8, 8) == 4  # y's room in its share
    assert probe.rules.overshoot_room(small, y, x, 8.0, 8, 8) == 0  # x gives all already
    for config in (CFG, dataclasses.replace(CFG, shortcuts=False)):
        d = decide(st, now, config)
        assert d.order == ("small", "large")
        assert [(p.workload, p.by) for p in d.preemptions] == [("x0", "large")], config


def seven_of_b_and_two_of_a() -> ClusterState:
    """Nine 8-GPU hosts: a's protected work on h7 and h8, b's on the others: a 34-GPU run v
    over h0-h4 that loses nothing when stopped, beside it a run of 1-2 GPUs on each of
    those hosts, and two 8-GPU runs that cannot resume on h5 and h6. b is 35 GPUs over its
    share and a would end over its own with 16 more, so only the fair-share rule lets a
    take from b: 35 GPUs. a's 16-GPU request r1 has waited 8 h (past the victim size
    bound), r2, as large, 30 min."""
    st = ClusterState(make_tree(("a", 18.0), ("b", 21.0), ("c", 33.0)), make_hosts(*[8] * 9))
    free = {"resumable": True, "checkpoint_on_term": True}
    st.submit(dataclasses.replace(make_spec("v", "b", 34), **free), 0.0)
    st.start("v", tuple(Slice(f"h{i}", g) for i, g in enumerate((7, 7, 7, 7, 6))), 0.0)
    for i, g in enumerate((1, 1, 1, 1, 2)):
        run_on(st, dataclasses.replace(make_spec(f"x{i}", "b", g), **free), 0.0, (f"h{i}", g))
    run_on(st, make_spec("y5", "b", 8), 0.0, ("h5", 8))
    run_on(st, make_spec("y6", "b", 8), 0.0, ("h6", 8))
    st.submit(make_spec("r1", "a", 16, 600.0, 0.0), 0.0)
    for host in ("h7", "h8"):
        run_on(st, make_spec(f"p{host}", "a", 8, 8 * HOUR, 7 * HOUR), 7 * HOUR, (host, 8))
    st.submit(make_spec("r2", "a", 16, 600.0, 7.5 * HOUR), 7.5 * HOUR)
    return st


def test_a_whole_host_rebalance_whose_cheapest_host_uses_up_its_limit_takes_others() -> None:
    """On :func:`seven_of_b_and_two_of_a` at 8 h, r1's search by cost takes h0 first (v and
    its neighbour lose nothing, but hold 35 GPUs: b's whole limit), then fits no other
    host under the limit. Taken instead by the fewest GPUs of victims first, h5 and h6
    fit: r1 preempts y5 and y6. (The first order alone left r1 waiting, and the fast pass
    then also skipped r2, which the victim size bound keeps from v, where the reference
    pass gave r2 the room.) The fast pass decides as the reference pass does."""
    st = seven_of_b_and_two_of_a()
    fast = decide(st, 8 * HOUR, CFG)
    ref = decide(st, 8 * HOUR, dataclasses.replace(CFG, shortcuts=False))
    assert [(p.workload, p.by) for p in fast.preemptions] == [("y5", "r1"), ("y6", "r1")]
    assert (fast.preemptions, fast.starts) == (ref.preemptions, ref.starts)


def test_a_within_share_request_gets_room_the_cheapest_hosts_would_use_up() -> None:
    """Budget b holds all twelve 8-GPU hosts, 25 GPUs over its share; a holds none and has
    room for 20 within its share. a's 16-GPU request r1 may take 41 GPUs from b by the
    guarantee rule (its overshoot). By cost the search takes h0 first (a 36-GPU run v
    spread over h0-h8 and a 4-GPU neighbour: 40 GPUs of the limit for 8 of room), and then
    no host fits; by the fewest GPUs of victims first it takes h10 and h11, whose runs hold
    8 each: r1, owed its share, gets it. (Without the victim size bound, which would keep
    r1 from v.) The fast pass decides as the reference pass does."""
    cfg = PolicyConfig(victim_max_factor=0)
    st = ClusterState(make_tree(("a", 20.0), ("b", 71.0), ("c", 5.0)), make_hosts(*[8] * 12))
    free = {"resumable": True, "checkpoint_on_term": True}
    st.submit(dataclasses.replace(make_spec("v", "b", 36), **free), 0.0)
    st.start("v", tuple(Slice(f"h{i}", 4) for i in range(9)), 0.0)
    for i in range(9):
        run_on(st, dataclasses.replace(make_spec(f"z{i}", "b", 4), **free), 0.0, (f"h{i}", 4))
    for i in (9, 10, 11):
        run_on(st, make_spec(f"y{i}", "b", 8), 0.0, (f"h{i}", 8))
    st.submit(make_spec("r1", "a", 16, 600.0, 1.0), 1.0)
    st.submit(make_spec("r2", "a", 24, 600.0, 2.0), 2.0)
    fast = decide(st, 2 * HOUR, cfg)
    ref = decide(st, 2 * HOUR, dataclasses.replace(cfg, shortcuts=False))
    assert sorted((p.workload, p.by) for p in fast.preemptions) == [("y10", "r1"), ("y11", "r1")]
    assert (fast.preemptions, fast.starts) == (ref.preemptions, ref.starts)
