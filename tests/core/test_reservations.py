"""Reservations: GPUs freed by a preemption go to the workload they were freed for."""

from __future__ import annotations

from apportion.core import (
    ClusterState,
    HostState,
    PolicyConfig,
    Reservation,
    Slice,
    WaitReason,
    decide,
)

from .helpers import make_hosts, make_spec, make_tree

CFG = PolicyConfig()


def _state_with_history() -> ClusterState:
    """Two 8-GPU hosts; budget ``busy`` used h1 for an hour, so ``idle`` ranks first."""
    st = ClusterState(make_tree("idle", "busy"), make_hosts(8, 8))
    st.submit(make_spec("old", "busy", 8), 0.0)
    st.start("old", (Slice("h1", 8),), 0.0)
    st.finish("old", 3600.0)
    return st


def test_preemption_emits_a_reservation_on_the_victims_host() -> None:
    """An allocated workload that displaces unallocated work reserves the host it freed."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8))
    st.submit(make_spec("u", "b", 8, min_runtime=0.0), 0.0)
    st.start("u", (Slice("h0", 8),), 0.0)
    st.submit(make_spec("x", "a", 8), 10.0)
    d = decide(st, 10.0, CFG)
    assert [p.workload for p in d.preemptions] == ["u"]
    assert d.reservations == (Reservation("x", ("h0",)),)


def test_reserved_gpus_go_to_their_workload_not_to_a_better_ranked_one() -> None:
    """GPUs freed for ``x`` start ``x``, although ``h`` (whose budget ranks first) would fit
    there too: without the reservation ``x`` would have to preempt again."""
    st = _state_with_history()
    st.submit(make_spec("x", "busy", 8, submit_time=3600.0), 3600.0)
    st.submit(make_spec("h", "idle", 8, submit_time=3600.0), 3600.0)
    st.submit(make_spec("filler", "busy", 8, submit_time=3600.0), 3600.0)
    st.start("filler", (Slice("h1", 8),), 3600.0)
    st.reserve("x", ("h0",))
    d = decide(st, 3600.0, CFG)
    assert [(s.workload, s.placement) for s in d.starts] == [("x", (Slice("h0", 8),))]
    assert "h" not in {s.workload for s in d.starts}


def test_reservation_waits_for_its_stopping_victims_without_new_preemptions() -> None:
    """While the victim is still stopping, the reserved workload waits and nobody else is
    preempted for it."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8))
    st.submit(make_spec("u", "b", 8, min_runtime=0.0), 0.0)
    st.start("u", (Slice("h0", 8),), 0.0)
    st.submit(make_spec("x", "a", 8), 10.0)
    st.mark_stopping("u")
    st.reserve("x", ("h0",))
    d = decide(st, 11.0, CFG)
    assert d.preemptions == () and d.starts == ()
    assert d.waiting["x"] is WaitReason.WAITING_FOR_PREEMPTION


def test_reservation_on_a_host_that_went_away_lapses() -> None:
    """A reservation whose host is draining lapses: the workload is placed elsewhere."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8, 8))
    st.submit(make_spec("x", "a", 8), 0.0)
    st.reserve("x", ("h0",))
    st.set_host_state("h0", HostState.DRAINING, 0.0)
    d = decide(st, 1.0, CFG)
    assert [(s.workload, s.placement) for s in d.starts] == [("x", (Slice("h1", 8),))]


def test_start_and_cancel_drop_the_reservation() -> None:
    """The state forgets a reservation once its workload leaves the queue."""
    st = ClusterState(make_tree("a"), make_hosts(8, 8))
    st.submit(make_spec("x", "a", 8), 0.0)
    st.submit(make_spec("y", "a", 8), 0.0)
    st.reserve("x", ("h0",))
    st.reserve("y", ("h1",))
    st.start("x", (Slice("h0", 8),), 1.0)
    st.unqueue("y")
    assert st.reservations == {}

