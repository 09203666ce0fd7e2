"""Debug work first: the debug lane (``PolicyConfig.debug_lane``, docs/policy.md "Debug work").

Two budgets on two 8-GPU hosts: ``owed`` (weight 3, nothing used yet: the lowest usage
ratio, first in Fair Tree order) and ``busy`` (weight 1, its work has run for two hours).
Each case lists the work running at ``NOW``, the work pending (oldest first), and what the
pass decides with the lane and without it. Debug work asks for at most 8 GPUs and a
minimum runtime of at most 15 min.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from apportion.core import ClusterState, PolicyConfig, Slice, decide

from .helpers import HOUR, check_pass, make_hosts, make_spec, make_tree

LANE = PolicyConfig()
NO_LANE = dataclasses.replace(LANE, debug_lane=False)
NOW = 2 * HOUR
DEBUG = 600.0  # a debug workload's minimum runtime
PROTECTED = 4 * HOUR  # running work still inside its minimum runtime at NOW


@dataclass(frozen=True)
class Run:
    id: str
    budget: str
    gpus: int
    host: str
    min_runtime: float = PROTECTED  # 0: unallocated work
    started: float = 0.0


@dataclass(frozen=True)
class Ask:
    id: str
    budget: str
    gpus: int
    min_runtime: float
    priority: int = 0


@dataclass(frozen=True)
class Case:
    running: tuple[Run, ...]
    pending: tuple[Ask, ...]  # submitted in this order, a minute apart
    # (starts, preempted) of the pass at NOW, with the lane and without it
    lane: tuple[tuple[str, ...], tuple[str, ...]]
    no_lane: tuple[tuple[str, ...], tuple[str, ...]]


FULL_H0 = Run("busy-h0", "busy", 8, "h0")
CASES = {
    # 4 GPUs free on h1: Fair Tree gives them to owed's older 4-GPU request; the lane gives
    # one to busy's debug job first, and the 4-GPU request no longer fits (nothing of busy's
    # may give way: all of it is protected)
    "free GPUs go to debug work first": Case(
        (FULL_H0, Run("busy-h1", "busy", 4, "h1")),
        (Ask("owed-4", "owed", 4, HOUR), Ask("busy-dbg", "busy", 1, DEBUG)),
        lane=(("busy-dbg",), ()),
        no_lane=(("owed-4",), ()),
    ),
    # one GPU free: the older debug job gets it, whatever its budget's ratio
    "the oldest debug job first, across budgets": Case(
        (FULL_H0, Run("busy-h1", "busy", 7, "h1")),
        (Ask("busy-dbg", "busy", 1, DEBUG), Ask("owed-dbg", "owed", 1, DEBUG)),
        lane=(("busy-dbg",), ()),
        no_lane=(("owed-dbg",), ()),
    ),
    # h1 holds four 2-GPU unallocated jobs: owed's 8-GPU request would displace all of
    # them; the lane lets busy's 2-GPU debug job displace one first, and the 8-GPU request
    # then cannot have h1 (the debug job is protected)
    "the lane displaces unallocated work": Case(
        (FULL_H0, *(Run(f"free-{i}", "busy", 2, "h1", 0.0) for i in range(4))),
        (Ask("owed-8", "owed", 8, HOUR), Ask("busy-dbg", "busy", 2, DEBUG)),
        lane=((), ("free-0",)),
        no_lane=((), ("free-0", "free-1", "free-2", "free-3")),
    ),
    # inside a budget the lane keeps its queue order: the later, higher-priority debug job
    # gets the one free GPU
    "inside a budget, debug work in queue order": Case(
        (FULL_H0, Run("busy-h1", "busy", 7, "h1")),
        (Ask("busy-dbg", "busy", 1, DEBUG), Ask("busy-urgent", "busy", 1, DEBUG, priority=1)),
        lane=(("busy-urgent",), ()),
        no_lane=(("busy-urgent",), ()),
    ),
    # the cluster full of owed's work past its minimum runtime, under owed's share: the
    # lane never takes allocated work, and busy (over its share) may not either
    "the lane takes no allocated work": Case(
        (Run("owed-h0", "owed", 8, "h0", 600.0), Run("owed-h1", "owed", 4, "h1", 600.0),
         Run("busy-h1", "busy", 4, "h1")),
        (Ask("busy-dbg", "busy", 1, DEBUG),),
        lane=((), ()),
        no_lane=((), ()),
    ),
    # the same for debug work of a budget that is owed GPUs: it rebalances in its
    # budget's turn in the walk, under the guarantee rule, as without the lane
    "owed debug work rebalances in the walk as before": Case(
        (Run("busy-h0", "busy", 8, "h0", 600.0), Run("busy-h1", "busy", 8, "h1", 600.0)),
        (Ask("owed-dbg", "owed", 2, DEBUG),),
        lane=((), ("busy-h0",)),
        no_lane=((), ("busy-h0",)),
    ),
    # busy already runs 8 GPUs of debug work (started 5 min ago): the lane is closed to
    # it, and the one free GPU goes in Fair Tree order, to owed's 1-GPU request
    "a budget running 8 GPUs of debug work gets nothing from the lane": Case(
        (Run("busy-dbg-a", "busy", 6, "h0", DEBUG, started=NOW - 300.0),
         Run("busy-dbg-b", "busy", 2, "h0", DEBUG, started=NOW - 300.0),
         Run("busy-h1", "busy", 7, "h1")),
        (Ask("owed-1", "owed", 1, HOUR), Ask("busy-dbg", "busy", 1, DEBUG)),
        lane=(("owed-1",), ()),
        no_lane=(("owed-1",), ()),
    ),
    # 7 GPUs of it: one more keeps it within the cap, and the lane gives it the free GPU
    "up to 8 GPUs of a budget's debug work in the lane": Case(
        (Run("busy-dbg-a", "busy", 6, "h0", DEBUG, started=NOW - 300.0),
         Run("busy-dbg-b", "busy", 1, "h0", DEBUG, started=NOW - 300.0),
         Run("busy-h1", "busy", 8, "h1")),
        (Ask("owed-1", "owed", 1, HOUR), Ask("busy-dbg", "busy", 1, DEBUG)),
        lane=(("busy-dbg",), ()),
        no_lane=(("owed-1",), ()),
    ),
}


def _state(case: Case) -> ClusterState:
    st = ClusterState(make_tree(("owed", 3.0), ("busy", 1.0)), make_hosts(8, 8))
    events: list[tuple[float, Run | Ask]] = [(r.started, r) for r in case.running]
    events += [(NOW - HOUR + 60.0 * i, a) for i, a in enumerate(case.pending)]
    for t, e in sorted(events, key=lambda te: te[0]):  # the state's clock only advances
        priority = e.priority if isinstance(e, Ask) else 0
        st.submit(make_spec(e.id, e.budget, e.gpus, e.min_runtime, t, priority=priority), t)
        if isinstance(e, Run):
            st.start(e.id, (Slice(e.host, e.gpus),), t)
    return st


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("lane", [True, False], ids=["lane", "no lane"])
def test_debug_lane_case(name: str, lane: bool) -> None:
    """The pass at NOW starts and preempts exactly what the case lists, with the lane on
    and off (the fast pass and the reference pass alike), and keeps every invariant."""
    case = CASES[name]
    want = case.lane if lane else case.no_lane
    for shortcuts in (True, False):
        st = _state(case)
        cfg = dataclasses.replace(LANE if lane else NO_LANE, shortcuts=shortcuts)
        d = decide(st, NOW, cfg)
        check_pass(st, NOW, d)
        got = (tuple(s.workload for s in d.starts),
               tuple(sorted(p.workload for p in d.preemptions)))
        assert got == want, (shortcuts, d)


def test_the_lane_goes_oldest_first_by_submit_time() -> None:
    """Three debug jobs of three researchers, one GPU free each time a pass runs: they start
    in the order they were submitted, not in Fair Tree order (the youngest budget's ratio is
    the lowest)."""
    tree = make_tree(("p/a", 1.0), ("p/b", 1.0), ("p/c", 1.0))
    st = ClusterState(tree, make_hosts(8))
    st.submit(make_spec("a-run", "p/a", 5, PROTECTED), 0.0)
    st.start("a-run", (Slice("h0", 5),), 0.0)
    st.submit(make_spec("b-run", "p/b", 2, PROTECTED), 0.0)
    st.start("b-run", (Slice("h0", 2),), 0.0)
    for i, budget in enumerate(("p/a", "p/b", "p/c")):
        st.submit(make_spec(f"{budget[-1]}-dbg", budget, 1, DEBUG, 100.0 + i), 100.0 + i)
    order = []
    for k in range(3):
        now = NOW + k
        d = decide(st, now, LANE)
        check_pass(st, now, d)
        assert len(d.starts) == 1, d
        order.append(d.starts[0].workload)
        st.start(d.starts[0].workload, d.starts[0].placement, now)
        st.finish(d.starts[0].workload, now + 0.5)  # frees the GPU for the next pass
    assert order == ["a-dbg", "b-dbg", "c-dbg"]
