"""A rebalance takes no victim much larger than its preemptor until the preemptor has waited
``max_min_runtime - 1 h`` (``PolicyConfig.victim_max_factor``).

Four hosts of 8 GPUs; budgets ``a`` and ``b`` with 4 GPUs of share each, ``c`` with 24.
``b``'s work fills h0 and h1 (16 GPUs, four times its share, past its minimum runtime);
``c``'s fills h2 and h3 (within its share, so no rule lets it give). ``a`` asks for GPUs
within its share at ``QUEUED``: the guarantee rule lets it take them from ``b``. Each case
lists what is preempted at once and, if nothing is, what is once the bound lifts, an hour
before the share guarantee's deadline ``QUEUED + max_min_runtime``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from apportion.core import ClusterState, CoreError, PolicyConfig, Slice, decide, explain
from apportion.core.policy import Pass

from .helpers import HOUR, check_pass, make_hosts, make_spec, make_tree
from .strategies import CORE_SETTINGS

MINUTE = 60.0
QUEUED = 10 * HOUR  # b's and c's work started at 0 with a 1 h minimum runtime


@dataclass(frozen=True)
class Case:
    b_running: tuple[int, ...]  # GPUs of each of b's runs, packed onto h0 then h1
    a_gpus: int
    a_min_runtime: float  # 15 min or less with 8 GPUs or fewer: debug work
    factor: float  # victim_max_factor
    at_once: tuple[str, ...]  # b's runs preempted at QUEUED
    lifted: tuple[str, ...]  # b's runs preempted once the bound lifts, if none at once


CASES = {
    # a 16-GPU run is four times the request: a waits, and takes it once the bound lifts
    "one 16-GPU run, 4 asked": Case((16,), 4, HOUR, 2.0, (), ("b0",)),
    # an 8-GPU run is within twice the request: taken at once
    "two 8-GPU runs, 4 asked": Case((8, 8), 4, HOUR, 2.0, ("b0",), ()),
    "four 4-GPU runs, 4 asked": Case((4, 4, 4, 4), 4, HOUR, 2.0, ("b0",), ()),
    # no bound: the 16-GPU run is taken at once
    "one 16-GPU run, 4 asked, no bound": Case((16,), 4, HOUR, 0.0, ("b0",), ()),
    # debug work (2 GPUs, 10 min) may take up to debug_max_gpus (8) at once, not more
    "two 8-GPU runs, 2 debug asked": Case((8, 8), 2, 10 * MINUTE, 2.0, ("b0",), ()),
    "one 16-GPU run, 4 debug asked": Case((16,), 4, 10 * MINUTE, 2.0, (), ("b0",)),
    # the same 2 GPUs as ordinary work may take at most 4 at once
    "two 8-GPU runs, 2 asked": Case((8, 8), 2, HOUR, 2.0, (), ("b0",)),
}


def _state(case: Case) -> ClusterState:
    st = ClusterState(make_tree(("a", 1.0), ("b", 1.0), ("c", 6.0)), make_hosts(8, 8, 8, 8))
    free = {"h0": 8, "h1": 8}
    for i, gpus in enumerate(case.b_running):
        slices = []
        for host in ("h0", "h1"):
            take = min(free[host], gpus - sum(s.gpus for s in slices))
            if take:
                slices.append(Slice(host, take))
                free[host] -= take
        st.submit(make_spec(f"b{i}", "b", gpus, resumable=True), 0.0)
        st.start(f"b{i}", tuple(slices), 0.0)
    for i, host in enumerate(("h2", "h3")):
        st.submit(make_spec(f"c{i}", "c", 8), 0.0)
        st.start(f"c{i}", (Slice(host, 8),), 0.0)
    st.submit(make_spec("ask", "a", case.a_gpus, case.a_min_runtime, QUEUED), QUEUED)
    return st


def _preempted(st: ClusterState, now: float, cfg: PolicyConfig) -> tuple[str, ...]:
    d = decide(st, now, cfg)
    check_pass(st, now, d)
    assert all(p.by == "ask" for p in d.preemptions), d.preemptions
    return tuple(p.workload for p in d.preemptions)


@pytest.mark.parametrize("name", list(CASES))
def test_a_rebalance_takes_a_larger_victim_only_once_the_bound_lifts(name: str) -> None:
    """At ``QUEUED`` the pass preempts exactly ``at_once``; when it preempts nothing, it
    still preempts nothing a second before the bound lifts, an hour before the share
    guarantee's deadline (``QUEUED + max_min_runtime - 1 h``: drivers pass at least
    hourly), and preempts exactly ``lifted`` then."""
    case = CASES[name]
    cfg = PolicyConfig(victim_max_factor=case.factor)
    st = _state(case)
    assert _preempted(st, QUEUED, cfg) == case.at_once
    if case.at_once:
        return
    lifts = QUEUED + cfg.max_min_runtime - HOUR
    assert _preempted(st, lifts - 1.0, cfg) == ()
    assert _preempted(st, lifts, cfg) == case.lifted


def test_explain_says_when_the_victim_size_bound_lifts() -> None:
    """``apportion why`` for the request refused a 16-GPU victim names the bound, the
    largest victim it allows now (8 GPUs), how long until it lifts (7 h from its queueing,
    asked 2 h after it) and what it may displace then, and projects its start at that
    moment; for the request that may take an 8-GPU run now, and with the bound off, it
    says nothing of it."""
    bound = ("for another 5 h a rebalance takes no run of more than 8 GPUs for it "
             "(victim_max_factor); then it may displace b0 (b, 16 GPUs)")
    st = _state(CASES["one 16-GPU run, 4 asked"])
    e = explain(st, QUEUED + 2 * HOUR, PolicyConfig(), "ask")
    assert bound in e.caveats
    assert e.projected_start == QUEUED + 7 * HOUR  # "if nothing else changes": when it lifts
    off = explain(st, QUEUED + 2 * HOUR, PolicyConfig(victim_max_factor=0), "ask").caveats
    assert not any("victim_max_factor" in c for c in off), off
    st = _state(CASES["two 8-GPU runs, 4 asked"])
    now = explain(st, QUEUED, PolicyConfig(), "ask").caveats
    assert not any("victim_max_factor" in c for c in now), now


def test_the_bound_is_validated() -> None:
    """A negative ``victim_max_factor`` is refused with the knob's name."""
    with pytest.raises(CoreError, match="victim_max_factor"):
        PolicyConfig(victim_max_factor=-1.0)


# a's requests: (GPUs, minimum runtime, hours queued before QUEUED, priority); 10 min with 8
# GPUs or fewer is debug work, 7 h or more queued has waited the bound out, and a higher
# priority goes first in a's queue
_REQUESTS = st.lists(
    st.tuples(st.sampled_from([2, 4, 4, 8]), st.sampled_from([10 * MINUTE, HOUR, 4 * HOUR]),
              st.sampled_from([0, 1, 7, 8]), st.sampled_from([0, 1])),
    min_size=2, max_size=8,
)


@settings(CORE_SETTINGS, max_examples=400)
@given(st.sampled_from([(16,), (8, 8), (16, 8, 8), (8, 4, 4)]), _REQUESTS)
# the first request is refused the 16-GPU run, the next two of its shape are skipped, the
# last one (waited out, behind them by priority) is not, and preempts the run
@example((16,), [(4, HOUR, 0, 1), (4, HOUR, 0, 1), (4, 4 * HOUR, 0, 1), (4, HOUR, 8, 0)])
def test_the_pass_skips_a_refused_size_exactly_as_the_reference_pass_decides(
    b_running: tuple[int, ...], requests: list[tuple[int, float, int, int]]
) -> None:
    """``a`` queues requests of a few shapes, some waited out, against ``b``'s runs of 4-16
    GPUs: the pass, which skips a request of a shape the size bound refused (same budget,
    GPUs and debug status, not waited out, no smaller admission charge), makes the
    decisions of the reference pass, which searches every request; and the shapes it
    recorded as refused are of ``a``'s requests not waited out."""
    st_ = _state(Case(b_running, 1, HOUR, 2.0, (), ()))
    st_.unqueue("ask")
    for i, (gpus, mrt, waited, priority) in enumerate(requests):
        at = QUEUED - waited * HOUR
        spec = make_spec(f"r{i}", "a", gpus, mrt, at, priority=priority)
        st_.submit(spec, QUEUED, queued_at=at)
    cfg = PolicyConfig()
    pas = Pass(st_, QUEUED, cfg, reasons=True)
    fast = pas.run()
    ref = decide(st_, QUEUED, dataclasses.replace(cfg, shortcuts=False))
    assert (fast.starts, fast.preemptions) == (ref.starts, ref.preemptions)
    lifts = QUEUED - cfg.max_min_runtime + HOUR  # queued at or before: waited out
    for budget, gpus, _debug in pas.size_refused:
        assert budget == "a" and any(
            g == gpus and QUEUED - w * HOUR > lifts for g, _, w, _ in requests
        ), pas.size_refused
