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


def test_rival_budget_ahead_is_listed_and_estimate_is_a_lower_bound() -> None:
    """b3 comes after a1 because a's side ``p`` (ratio 0) is below b's side ``q`` (0.75) at
    the root, where the paths diverge; a1 still waits, so b3's estimate is a lower bound."""
    st = busy_b()
    queue(st, "b3", "q/b", 4, 600, 1800)
    queue(st, "a1", "p/a", 4, 600, 1900)
    e = explain(st, 2000.0, CFG, "b3")
    assert (e.position, e.considered) == (2, 2)
    assert [(r.path, r.ratio, r.mine, r.mine_ratio, r.workloads) for r in e.rivals] == [
        ("p", 0.0, "q", 0.75, 1)
    ]
    assert e.earliest_start == 3000.0
    assert e.lower_bound
    assert e.caveats[0].startswith("lower bound: 1 workload(s)")


def test_same_budget_work_ahead_is_counted() -> None:
    """Inside one budget, earlier submissions come first and are no rivals."""
    st = busy_b()
    queue(st, "b3", "q/b", 4, 600, 1800)
    queue(st, "b4", "q/b", 4, 600, 1850)
    e = explain(st, 2000.0, CFG, "b4")
    assert (e.position, e.same_budget_ahead, e.rivals) == (2, 1, ())


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


def test_too_large_has_no_estimate() -> None:
    """With one of two hosts draining, 16 GPUs cannot fit: no start estimate."""
    st = cluster(hosts=2)
    st.set_host_state("h2", HostState.DRAINING, 100)
    queue(st, "a1", "p/a", 16, 600, 1900)
    e = explain(st, 2000.0, CFG, "a1")
    assert e.wait_reason is WaitReason.TOO_LARGE
    assert e.earliest_start is None


def test_running_workload_reports_its_protection_end() -> None:
    """A running allocated workload is protected until start + minimum runtime."""
    st = busy_b()
    e = explain(st, 2000.0, CFG, "b1")
    assert (e.status, e.started_at, e.protected_until) == ("running", 1000.0, 4600.0)
    assert e.placement == (Slice("h1", 4),)
    assert "protected for another 43m" in e.lines()


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
    assert "could start in 16m at the earliest" in d["text"]
