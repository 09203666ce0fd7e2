"""Lifecycles (transition tables), drains, and input validation naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from apportion.core import (
    FINAL,
    HOST_TRANSITIONS,
    WORKLOAD_TRANSITIONS,
    ClusterState,
    CoreError,
    Host,
    HostChange,
    HostState,
    PolicyConfig,
    Preempt,
    PreemptReason,
    Slice,
    Status,
    WorkloadSpec,
    check_transition,
    decide,
    is_debug,
    validate_spec,
)

from .helpers import HOUR, make_hosts, make_spec, make_state, make_tree, run_on

CFG = PolicyConfig()


# ---- transition tables ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new"),
    [
        (Status.PENDING, Status.STOPPING),
        (Status.PENDING, Status.COMPLETED),
        (Status.RUNNING, Status.PREEMPTED),
        (Status.COMPLETED, Status.RUNNING),
        (Status.CANCELLED, Status.PENDING),
        (Status.PREEMPTED, Status.PENDING),
        (Status.LOST, Status.RUNNING),
        (Status.STOPPING, Status.RUNNING),
    ],
)
def test_illegal_workload_moves_raise(old: Status, new: Status) -> None:
    """A move missing from the workload table is refused, naming the workload and states."""
    with pytest.raises(CoreError) as err:
        check_transition(WORKLOAD_TRANSITIONS, "workload", "w1", old, new)
    assert str(err.value) == f"workload w1: state: cannot go from {old.value} to {new.value}"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (HostState.HEALTHY, HostState.REPAIR),
        (HostState.REPAIR, HostState.DRAINING),
        (HostState.DOWN, HostState.DRAINING),
    ],
)
def test_illegal_host_moves_raise(old: HostState, new: HostState) -> None:
    """Hosts follow their table too, and the state refuses an illegal move."""
    with pytest.raises(CoreError, match=f"host h0: state: cannot go from {old.value}"):
        check_transition(HOST_TRANSITIONS, "host", "h0", old, new)
    st = make_state(make_tree("x"), [Host("h0", 8, old)])
    with pytest.raises(CoreError, match="host h0: state: cannot go from"):
        st.set_host_state("h0", new, 1.0)


def test_every_legal_move_has_a_reason() -> None:
    """Every edge of both tables is accepted and explained; staying put is 'unchanged'."""
    for table, kind in ((WORKLOAD_TRANSITIONS, "workload"), (HOST_TRANSITIONS, "host")):
        for old, edges in table.items():
            assert check_transition(table, kind, "n", old, old) == "unchanged"
            for new, why in edges.items():
                assert check_transition(table, kind, "n", old, new) == why and why


def test_tables_cover_every_state_and_final_states_are_dead_ends() -> None:
    """All states appear; final ones are exactly those with no way out."""
    assert set(WORKLOAD_TRANSITIONS) == set(Status)
    assert set(HOST_TRANSITIONS) == set(HostState)
    assert {
        Status.COMPLETED, Status.FAILED, Status.PREEMPTED, Status.CANCELLED, Status.LOST,
        Status.TIMEOUT,
    } == FINAL


# ---- drains -----------------------------------------------------------------------------------
def draining_cluster() -> ClusterState:
    st = make_state(make_tree("x", "y"), make_hosts(8, 8))
    run_on(st, make_spec("unalloc", "y", 2, 0.0, resumable=True), 0.0, ("h0", 2))
    run_on(st, make_spec("prot", "y", 4, 2 * HOUR), 0.0, ("h0", 4))
    run_on(st, make_spec("res", "x", 2, HOUR, resumable=True), 0.0, ("h0", 2))
    st.set_host_state("h0", HostState.DRAINING, 1800.0)
    return st


def test_drain_moves_off_what_is_not_protected() -> None:
    """On a draining host, unallocated work goes at once; protected work stays."""
    st = draining_cluster()
    d = decide(st, 1800.0, CFG)
    assert d.preemptions == (Preempt("unalloc", PreemptReason.DRAIN, True),)
    assert d.host_changes == ()


def test_drain_waits_for_each_protection_to_end() -> None:
    """Each workload leaves as soon as its own minimum runtime has passed."""
    st = draining_cluster()
    d = decide(st, HOUR, CFG)
    assert {p.workload for p in d.preemptions} == {"unalloc", "res"}
    d = decide(st, 2 * HOUR, CFG)
    assert {p.workload for p in d.preemptions} == {"unalloc", "res", "prot"}
    assert all(p.reason is PreemptReason.DRAIN and p.by is None for p in d.preemptions)
    assert {p.workload: p.requeue for p in d.preemptions} == {
        "unalloc": True, "res": True, "prot": False
    }


def test_empty_draining_host_goes_to_repair() -> None:
    """Once empty, a draining host is sent to repair with no human."""
    st = draining_cluster()
    for wid in ("unalloc", "prot", "res"):
        st.finish(wid, 2 * HOUR)
    d = decide(st, 2 * HOUR, CFG)
    assert d.host_changes == (HostChange("h0", HostState.REPAIR, "drained: empty"),)


def test_stopping_work_on_a_draining_host_is_not_preempted_again() -> None:
    """A drain preemption already issued is not issued twice while the workload exits."""
    st = draining_cluster()
    st.mark_stopping("unalloc")
    d = decide(st, 1800.0, CFG)
    assert d.preemptions == ()


def test_multi_host_workload_on_draining_hosts_is_preempted_once() -> None:
    """Regression: a workload on two draining hosts, or on a draining and a healthy host,
    gets exactly one preemption per pass (not one per host, nor a drain plus a victim)."""
    st = make_state(make_tree("x", "y"), make_hosts(8, 8, 8))
    run_on(st, make_spec("u", "y", 8, 0.0), 0.0, ("h2", 8))
    run_on(st, make_spec("v", "y", 16, 0.0), 9.0, ("h0", 8), ("h1", 8))
    st.set_host_state("h0", HostState.DRAINING, 9.0)
    st.submit(make_spec("p", "x", 8, HOUR, 10.0), 10.0)
    d = decide(st, 10.0, CFG)
    assert [p.workload for p in d.preemptions].count("v") == 1
    st.set_host_state("h1", HostState.DRAINING, 10.0)
    d = decide(st, 10.0, CFG)
    assert [p.workload for p in d.preemptions] == ["v", "u"]


# ---- validation -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": "nope"}, "budget 'nope': unknown budget"),
        ({"budget": "team"}, "budget 'team': not a leaf"),
        ({"min_runtime": 9 * HOUR}, "workload w: min_runtime: 9 h is over the cap"),
        ({"gpus": 40}, "workload w: gpus: 40 is more than the cluster's 32"),
    ],
)
def test_validate_spec_names_the_field(kwargs: dict[str, Any], message: str) -> None:
    """The policy refuses work it could never run, naming the field."""
    st = make_state(make_tree("team/a", "b"), make_hosts(8, 8, 8, 8))
    args: dict[str, Any] = {"budget": "b", "gpus": 8, "min_runtime": HOUR} | kwargs
    spec = make_spec("w", **args)
    with pytest.raises(CoreError) as err:
        validate_spec(spec, st, CFG)
    assert message in str(err.value)


def test_validate_spec_accepts_the_largest_and_refuses_an_empty_cluster() -> None:
    """Exactly the whole cluster and exactly the cap are fine; no hosts at all is not."""
    st = make_state(make_tree("b"), make_hosts(8, 8))
    validate_spec(make_spec("w", "b", 16, 8 * HOUR), st, CFG)
    validate_spec(make_spec("u", "b", 1, 0.0), st, CFG)
    with pytest.raises(CoreError, match="workload w: gpus: the cluster has no hosts"):
        validate_spec(make_spec("w", "b", 1), make_state(make_tree("b"), []), CFG)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": ""}, "workload: id: must not be empty"),
        ({"gpus": 0}, "workload w: gpus: must be > 0"),
        ({"min_runtime": -1.0}, "workload w: min_runtime: must be >= 0"),
        ({"checkpoint_interval": -5.0}, "workload w: checkpoint_interval: must be >= 0"),
    ],
)
def test_workload_spec_rejects_bad_fields(kwargs: dict[str, Any], message: str) -> None:
    """A malformed spec cannot even be built, and the error names the field."""
    args: dict[str, Any] = {
        "id": "w", "budget": "b", "gpus": 1, "min_runtime": 1.0, "submit_time": 0.0
    } | kwargs
    with pytest.raises(CoreError) as err:
        WorkloadSpec(**args)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lookback": 0.0}, "policy: lookback: must be > 0"),
        ({"max_min_runtime": 0.0}, "policy: max_min_runtime: must be > 0"),
        ({"rebalance_margin": -0.1}, "policy: rebalance_margin: must be a number >= 0"),
        (
            {"debug_max_min_runtime": float("nan")},
            "policy: debug_max_min_runtime: must be a number >= 0",
        ),
    ],
)
def test_policy_config_rejects_bad_knobs(kwargs: dict[str, Any], message: str) -> None:
    """Each bad knob is named."""
    with pytest.raises(CoreError, match=message):
        PolicyConfig(**kwargs)


def test_state_refuses_bad_moves_by_name() -> None:
    """The state refuses over-commit, unhealthy hosts, duplicates and unknown ids."""
    st = make_state(make_tree("b"), make_hosts(8, 8))
    run_on(st, make_spec("a", "b", 6), 0.0, ("h0", 6))
    st.submit(make_spec("c", "b", 4), 0.0)
    with pytest.raises(CoreError, match="host h0: over-commit by workload c"):
        st.start("c", (Slice("h0", 4),), 1.0)
    st.set_host_state("h1", HostState.DRAINING, 1.0)
    with pytest.raises(CoreError, match="host h1: is draining, takes no new work"):
        st.start("c", (Slice("h1", 4),), 1.0)
    with pytest.raises(CoreError, match="workload c: id: already queued or running"):
        st.submit(make_spec("c", "b", 1), 1.0)
    with pytest.raises(CoreError, match="workload zz: not running"):
        st.finish("zz", 1.0)
    with pytest.raises(CoreError, match="host h0: name: duplicate"):
        st.add_host(Host("h0", 8), 1.0)
    with pytest.raises(CoreError, match="state: time went backwards"):
        st.finish("a", 0.5)


@pytest.mark.parametrize(
    ("gpus", "min_runtime", "debug"),
    [(8, 900.0, True), (1, 60.0, True), (9, 900.0, False), (8, 901.0, False), (1, 0.0, False)],
)
def test_is_debug(gpus: int, min_runtime: float, debug: bool) -> None:
    """Debug: allocated, at most 8 GPUs, minimum runtime at most 15 minutes."""
    assert is_debug(make_spec("d", "b", gpus, min_runtime), CFG) is debug
