"""Whole hosts reserved for the large workload of an owed budget, and backfill around them.

One scenario, step by step, with the starts and preemptions expected at each instant once
it settles (victims exit at once). Four 8-GPU hosts; budget ``a`` has a 25% share (8
GPUs), ``b`` 75%. ``b``'s four 8-GPU workloads fill the cluster from time 0, protected for
1, 2, 3 and 5 hours. At 0.5 h ``a`` (used nothing: owed) asks for 16 GPUs, twice its share:
no rebalance rule lets one request take so much (``b`` would fall under its share), so
without a reservation it waits for two hosts to empty by chance. With one, the two hosts
ready first (h0 at 1 h, h1 at 2 h) are reserved; at 1.5 h ``b0`` ends and the GPUs of h0 go
only to work that cannot delay the reservation's start at 2 h: ``b``'s 4-GPU 8-hour workload is
kept off them, a 1-GPU workload of ``a`` with a 30-minute time limit and a 4-GPU
unallocated one may use them. At 2 h the time-limited one ends at its limit, the
unallocated one and ``b1`` (no longer protected) are preempted, and ``a16`` starts on h0 and
h1. ``b2`` and ``b3`` (protected until 3 h and 5 h) are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from apportion.core import ClusterState, PolicyConfig, Slice, WorkloadSpec, decide

from .helpers import HOUR, check_pass, make_hosts, make_spec, make_tree


@dataclass(frozen=True)
class Step:
    at: float
    submit: tuple[WorkloadSpec, ...] = ()
    finish: tuple[str, ...] = ()  # workloads that complete at ``at``, before the pass
    starts: tuple[str, ...] = ()  # expected once the instant settles, in order
    preempted: tuple[str, ...] = ()


A16 = make_spec("a16", "a", 16, HOUR, 0.5 * HOUR)
B4 = make_spec("b4", "b", 4, 8 * HOUR, 1.5 * HOUR)
A1 = WorkloadSpec("a1", "a", 1, 0.25 * HOUR, 1.5 * HOUR, time_limit=0.5 * HOUR)
U4 = make_spec("u4", "b", 4, 0.0, 1.5 * HOUR, resumable=True)

WITH = [
    Step(0.5 * HOUR, submit=(A16,)),
    Step(1.5 * HOUR, submit=(B4, A1, U4), finish=("b0",), starts=("a1", "u4")),
    Step(2 * HOUR, starts=("a16",), preempted=("u4", "b1")),
]
WITHOUT = [  # the same without reservations: b4 takes h0, a16 does not start by 2 h
    Step(0.5 * HOUR, submit=(A16,)),
    Step(1.5 * HOUR, submit=(B4, A1, U4), finish=("b0",), starts=("a1", "b4")),
    Step(2 * HOUR, starts=("u4",)),  # on the GPUs a1 leaves at its time limit
]


def _cluster() -> ClusterState:
    st = ClusterState(make_tree(("a", 1.0), ("b", 3.0)), make_hosts(8, 8, 8, 8))
    for i, hours in enumerate((1, 2, 3, 5)):
        st.submit(make_spec(f"b{i}", "b", 8, hours * HOUR, resumable=True), 0.0)
        st.start(f"b{i}", (Slice(f"h{i}", 8),), 0.0)
    return st


def _settle(st: ClusterState, now: float, cfg: PolicyConfig) -> tuple[list[str], list[str]]:
    """Decide and apply at ``now`` until a pass changes nothing; stops take effect at once."""
    starts: list[str] = []
    preempted: list[str] = []
    for _ in range(10):
        d = decide(st, now, cfg)
        check_pass(st, now, d, cfg)
        if d.empty():
            return starts, preempted
        for w in d.timeouts:
            st.mark_stopping(w)
            st.finish(w, now)
        for p in d.preemptions:
            preempted.append(p.workload)
            st.mark_stopping(p.workload)
            if p.requeue:
                st.requeue(p.workload, now)
            else:
                st.finish(p.workload, now)
        for r in d.reservations:
            st.reserve(r.workload, r.hosts)
        for s in d.starts:
            starts.append(s.workload)
            st.start(s.workload, s.placement, now)
    raise AssertionError(f"no quiet pass at {now}")


@pytest.mark.parametrize(("name", "reservations", "steps"),
                         [("with", 1, WITH), ("without", 0, WITHOUT)])
def test_large_head_of_owed_budget_gets_reserved_hosts_and_backfill(
    name: str, reservations: int, steps: list[Step]
) -> None:
    """Each step's starts and preemptions are exactly the expected ones; no protected work
    is preempted at any pass (check_pass); b2 and b3 keep running throughout."""
    cfg = PolicyConfig(reservations=reservations)
    st = _cluster()
    for step in steps:
        for w in step.finish:
            st.finish(w, step.at)
        for spec in step.submit:
            st.submit(spec, step.at)
        starts, preempted = _settle(st, step.at, cfg)
        assert (tuple(starts), tuple(preempted)) == (step.starts, step.preempted), step.at
    assert {"b2", "b3"} <= set(st.running)
    if name == "with":
        assert {s.host for s in st.running["a16"].placement} == {"h0", "h1"}
    else:
        assert "a16" in st.pending


def test_reserved_hosts_take_no_work_protected_past_the_reservation() -> None:
    """While a16's hosts are reserved (start at 2 h), pending allocated work of the more
    used budget whose protection would end after 2 h does not start on them, even with
    their GPUs free; unallocated work does, and nothing protected is ever preempted for
    the reservation: at 1.5 h the reservation holds h0 (free) and h1 (b1, protected)."""
    cfg = PolicyConfig(reservations=1)
    st = _cluster()
    st.submit(A16, 0.5 * HOUR)
    _settle(st, 0.5 * HOUR, cfg)
    st.finish("b0", 1.5 * HOUR)
    st.submit(make_spec("b5", "b", 2, 3 * HOUR, 1.5 * HOUR), 1.5 * HOUR)
    d = decide(st, 1.5 * HOUR, cfg)
    check_pass(st, 1.5 * HOUR, d, cfg)
    assert d.starts == () and d.preemptions == ()
    st.submit(make_spec("u2", "b", 2, 0.0, 1.5 * HOUR), 1.5 * HOUR)
    d = decide(st, 1.5 * HOUR, cfg)
    assert [(s.workload, s.placement) for s in d.starts] == [("u2", (Slice("h0", 2),))]


def test_any_other_budgets_work_released_by_the_start_backfills_and_is_taken_back() -> None:
    """Budget ``c`` (owed, used nothing, ratio as low as ``a``'s) asks at 1.5 h for 4 GPUs,
    resumable, protected 30 min and checkpointing every 15 min: its protection and a
    checkpoint both fall by the reservation's start at 2 h, so it backfills the free h0
    (the rest of the cluster is protected ``b`` work); at 2 h the reservation takes it back
    with ``b1`` and ``a16`` starts on h0 and h1. A 4-GPU run of ``c`` protected for 1 h
    would hold h0 past 2 h: it is kept off."""
    cfg = PolicyConfig(reservations=1)
    st = ClusterState(make_tree(("a", 1.0), ("b", 3.0), ("c", 1.0)), make_hosts(8, 8, 8, 8))
    for i, hours in enumerate((1, 2, 3, 5)):
        st.submit(make_spec(f"b{i}", "b", 8, hours * HOUR, resumable=True), 0.0)
        st.start(f"b{i}", (Slice(f"h{i}", 8),), 0.0)
    st.submit(A16, 0.5 * HOUR)
    _settle(st, 0.5 * HOUR, cfg)
    st.finish("b0", 1.5 * HOUR)
    st.submit(make_spec("c1h", "c", 4, HOUR, 1.5 * HOUR, resumable=True,
                        checkpoint_interval=0.25 * HOUR), 1.5 * HOUR)
    st.submit(make_spec("c4", "c", 4, 0.5 * HOUR, 1.5 * HOUR, resumable=True,
                        checkpoint_interval=0.25 * HOUR), 1.5 * HOUR)
    assert _settle(st, 1.5 * HOUR, cfg) == (["c4"], [])
    assert st.running["c4"].placement == (Slice("h0", 4),)
    starts, preempted = _settle(st, 2 * HOUR, cfg)
    assert sorted(preempted) == ["b1", "c4"] and "a16" in starts
    assert {s.host for s in st.running["a16"].placement} == {"h0", "h1"}
