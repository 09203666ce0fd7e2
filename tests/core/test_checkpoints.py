"""What a preemption would lose, restart protection, and victim choice by progress at risk."""

from __future__ import annotations

import pytest

from apportion.core import ClusterState, CoreError, PolicyConfig, Slice, WorkloadSpec, decide

from .helpers import HOUR, make_hosts, make_spec, make_tree

MIN = 60.0
CFG = PolicyConfig()


def _running(st: ClusterState, wid: str, budget: str, gpus: int, host: str, t: float,
             **kw: object) -> None:
    st.submit(make_spec(wid, budget, gpus, **kw), t)  # type: ignore[arg-type]
    st.start(wid, (Slice(host, gpus),), t)


def test_at_risk_follows_term_checkpoint_report_and_interval() -> None:
    """At risk: nothing for a resumable workload that checkpoints on SIGTERM; since the last
    checkpoint of its declared interval from its start, or from its last reported one (a
    report at 65 min leaves 5 min; one at 40 min, an interval before 70 min, leaves none:
    the interval goes on from it); the whole run for non-resumable work."""
    st = ClusterState(make_tree("a"), make_hosts(8))
    st.submit(WorkloadSpec("term", "a", 1, HOUR, 0.0, resumable=True, checkpoint_on_term=True),
              0.0)
    for w in ("ivl", "rep", "stale"):
        st.submit(make_spec(w, "a", 1, resumable=True, checkpoint_interval=30 * MIN), 0.0)
    st.submit(make_spec("once", "a", 1), 0.0)
    for w in ("term", "ivl", "rep", "stale", "once"):
        st.start(w, (Slice("h0", 1),), 0.0)
    st.checkpoint("rep", 65 * MIN)
    st.checkpoint("stale", 40 * MIN)
    now = 70 * MIN
    assert st.running["term"].at_risk(now, 1800.0) == 0.0
    assert st.running["ivl"].at_risk(now, 1800.0) == pytest.approx(10 * MIN)
    assert st.running["rep"].at_risk(now, 1800.0) == pytest.approx(5 * MIN)
    assert st.running["stale"].at_risk(now, 1800.0) == pytest.approx(0.0)
    assert st.running["once"].at_risk(now, 1800.0) == pytest.approx(70 * MIN)


def test_a_stale_report_does_not_shield_a_run_from_victim_choice() -> None:
    """Two equal resumable runs checkpointing every 30 min; one reported a checkpoint once,
    a second after its start, and never again (a job gaming the cost of stopping it). At
    70 min the interval, going on from that report, leaves it 1 s less at risk than the
    other: the rebalance takes it. (Counting from the report alone, it would have had 70 min
    at risk and been spared.)"""
    st = ClusterState(make_tree("a", "b"), make_hosts(8))
    for w in ("a1", "a2"):
        _running(st, w, "a", 4, "h0", 0.0, resumable=True, checkpoint_interval=30 * MIN,
                 min_runtime=10 * MIN)
    st.checkpoint("a1", 1.0)
    now = 70 * MIN
    st.submit(make_spec("b1", "b", 4, min_runtime=10 * MIN), now)
    d = decide(st, now, PolicyConfig())
    assert [(p.workload, p.reason.value) for p in d.preemptions] == [("a1", "rebalance")]


def test_checkpoint_before_the_run_began_is_refused() -> None:
    """A checkpoint reported for a time before the current run started is an error naming
    the workload."""
    st = ClusterState(make_tree("a"), make_hosts(8))
    _running(st, "w", "a", 1, "h0", 100.0, resumable=True)
    with pytest.raises(CoreError, match="workload w: checkpoint"):
        st.checkpoint("w", 50.0)


def test_restarted_work_is_no_rebalance_victim_within_restart_protection() -> None:
    """``b``'s workload was preempted and restarted at 2 h; ``a`` (under its share) cannot
    take it back until ``restart_protection`` after that restart, then can."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8))
    _running(st, "b1", "b", 8, "h0", 0.0, min_runtime=HOUR / 2, resumable=True)
    st.requeue("b1", 2 * HOUR)
    st.start("b1", (Slice("h0", 8),), 2 * HOUR)
    assert st.running["b1"].restarted
    st.submit(make_spec("a1", "a", 4, submit_time=2 * HOUR), 2 * HOUR)
    early = decide(st, 2 * HOUR + CFG.restart_protection - 1, CFG)
    assert early.preemptions == ()
    late = decide(st, 2 * HOUR + CFG.restart_protection, CFG)
    assert [p.workload for p in late.preemptions] == ["b1"]


def test_victim_choice_prefers_the_least_progress_at_risk() -> None:
    """Two hosts could make room; the one whose victim checkpointed most recently (least
    progress at risk) is chosen, whatever the names."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8, 8))
    _running(st, "b0", "b", 8, "h0", 0.0, resumable=True, checkpoint_interval=2 * HOUR)
    _running(st, "b1", "b", 8, "h1", 0.0, resumable=True, checkpoint_interval=2 * HOUR)
    st.checkpoint("b1", 3 * HOUR - 60)  # b0's last checkpoint was at 2 h: 1 h at risk
    st.submit(make_spec("a1", "a", 8, submit_time=3 * HOUR), 3 * HOUR)
    d = decide(st, 3 * HOUR, CFG)
    assert [p.workload for p in d.preemptions] == ["b1"]


def test_restart_protection_over_the_cap_is_refused() -> None:
    """``restart_protection`` longer than ``max_min_runtime`` would break the share
    guarantee's bound: refused, naming the field."""
    with pytest.raises(CoreError, match="restart_protection"):
        PolicyConfig(restart_protection=9 * HOUR)
