"""Inside a budget, work behind a head that cannot start uses the budget's share meanwhile.

The case seen on a live server: one host of 8 GPUs, budget ``a`` with a 25% share (2 GPUs)
and ``b`` with 75%. ``b``'s work fills the host, past its minimum runtime. ``a``'s queue
holds an 8-GPU workload first (it can never get room: 8 GPUs are far more than ``a``'s
share, and ``b`` would end far under its own) and a 2-GPU workload behind it. The 2-GPU
workload must start, displacing ``b`` work if needed, even when the only victim at hand
holds more GPUs than are missing; each case lists the starts and preemptions expected once
the instant settles (victims exit at once and are requeued).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from apportion.core import ClusterState, PolicyConfig, Slice, decide

from .helpers import HOUR, check_pass, make_hosts, make_spec, make_tree

CFG = PolicyConfig()
NOW = 2 * HOUR  # b's work started at 0 with a 1 h minimum runtime: all of it may give way


@dataclass(frozen=True)
class Case:
    b_running: tuple[int, ...]  # GPUs of each of b's running workloads, on host h0
    starts: tuple[str, ...]  # a's workloads expected to start, in order
    preempted: tuple[str, ...]  # b's workloads expected to be preempted


CASES = {
    # free GPUs: the 2-GPU workload takes them at once, the head keeps waiting
    "two GPUs free": Case((4, 2), ("a2",), ()),
    "one 6-GPU job, two free": Case((6,), ("a2",), ()),
    # full host, victims of exactly the missing size
    "four 2-GPU jobs": Case((2, 2, 2, 2), ("a2",), ("b0",)),
    # full host, the only victims are larger than the 2 GPUs missing: one 4-GPU job gives
    # way (b keeps 4 of its 6, a gets its 2, 2 GPUs are free for b's smaller work)
    "two 4-GPU jobs": Case((4, 4), ("a2",), ("b0",)),
    # one 8-GPU job: preempting it would leave 6 GPUs idle for a 2-GPU request; a waits for
    # it to end (the documented fragmentation limit of the guarantee)
    "one 8-GPU job": Case((8,), (), ()),
}


def _settle(st: ClusterState, now: float) -> tuple[list[str], list[str]]:
    """Decide and apply at ``now`` until a pass changes nothing; victims exit at once."""
    starts: list[str] = []
    preempted: list[str] = []
    for _ in range(10):
        d = decide(st, now, CFG)
        check_pass(st, now, d)
        if d.empty():
            break
        for p in d.preemptions:
            preempted.append(p.workload)
            st.requeue(p.workload, now)
        for r in d.reservations:
            st.reserve(r.workload, r.hosts)
        for s in d.starts:
            starts.append(s.workload)
            st.start(s.workload, s.placement, now)
    return starts, preempted


@pytest.mark.parametrize("name", list(CASES))
def test_work_behind_a_blocked_head_gets_the_budgets_share(name: str) -> None:
    """The 2-GPU workload behind ``a``'s 8-GPU head starts on ``a``'s 2-GPU share (or, with
    one 8-GPU victim only, nothing moves); the head never starts."""
    case = CASES[name]
    st = ClusterState(make_tree(("a", 1.0), ("b", 3.0)), make_hosts(8))
    for i, gpus in enumerate(case.b_running):
        st.submit(make_spec(f"b{i}", "b", gpus, resumable=True), 0.0)
        st.start(f"b{i}", (Slice("h0", gpus),), 0.0)
    st.submit(make_spec("a8", "a", 8, submit_time=NOW), NOW)
    st.submit(make_spec("a2", "a", 2, submit_time=NOW + 1), NOW + 1)
    starts, preempted = _settle(st, NOW + 1)
    got_a = [w for w in starts if w.startswith("a")]
    assert (tuple(got_a), tuple(preempted)) == (case.starts, case.preempted)
    assert "a8" in st.pending
