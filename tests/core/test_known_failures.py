"""What a pass knows fails before it tries anything (``Pass.seed_failures``,
``Pass.judge_givers``), so that the walk passes over a budget's queue without trying one of
its requests to learn it.

* The smallest requests that cannot fit, and that unallocated victims cannot make room for,
  are set from the hosts' counts at the start of the pass: each is exactly the size a try
  finds failing (one GPU fewer succeeds), checked here against the searches themselves on
  random hosts with running, stopping and unallocated work.
* A budget that the fair-share rule lets no side give to at any charge gets its failed
  rebalance recorded when the walk first reaches it: its requests the guarantee rule gives
  nothing to are not tried, and the pass decides what the reference pass, which tries
  every one, decides.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.core import ClusterState, HostState, PolicyConfig, WorkloadSpec, decide
from apportion.core.placement import HostView, find_fit, find_victims
from apportion.core.policy import Pass

from .helpers import HOUR, make_hosts, make_spec, make_state, make_tree, run_on
from .strategies import CORE_SETTINGS

NOW = 10 * HOUR
SIZES = (8, 8, 8, 4)

# running work: (host index, GPUs, allocated?, stopping?), placed where it fits
_WORK = st.lists(
    st.tuples(st.integers(0, len(SIZES) - 1), st.sampled_from([1, 2, 3, 4, 8]), st.booleans(),
              st.booleans()),
    max_size=12,
)


def _hosts_with(work: list[tuple[int, int, bool, bool]], draining: int | None) -> ClusterState:
    """Hosts of 8, 8, 8 and 4 GPUs with ``work`` started on them (what does not fit where it
    asks is left out), some of it stopping, and host ``draining`` draining."""
    state = make_state(make_tree("a", "b"), make_hosts(*SIZES))
    free = list(SIZES)
    for i, (host, gpus, allocated, stopping) in enumerate(work):
        if free[host] < gpus:
            continue
        free[host] -= gpus
        spec = make_spec(f"w{i}", "ab"[i % 2], gpus, HOUR if allocated else 0.0)
        run_on(state, spec, 0.0, (f"h{host}", gpus))
        if stopping:
            state.mark_stopping(spec.id)
    if draining is not None:
        state.set_host_state(f"h{draining}", HostState.DRAINING, 0.0)
    return state


def _request(gpus: int) -> WorkloadSpec:
    return make_spec("ask", "a", gpus, HOUR, NOW)


@settings(CORE_SETTINGS, max_examples=300)
@given(_WORK, st.sampled_from([None, 0, 3]))
def test_the_seeded_sizes_are_where_the_searches_start_failing(
    work: list[tuple[int, int, bool, bool]], draining: int | None
) -> None:
    """For one host and for whole hosts: a request of the seeded size finds no room on free
    GPUs (``find_fit``), nor with unallocated victims (``find_victims`` with none other
    allowed), and a request of one GPU fewer, where there is such a request of that shape,
    finds it: the seed is exact, not only a bound."""
    state = _hosts_with(work, draining)
    pas = Pass(state, NOW, PolicyConfig())
    pas.seed_failures()
    pas.seed_whole_failures()
    largest = state.max_host_gpus
    for multi in (False, True):
        fit = pas.fit_fail_min.of(multi)
        unallocated = pas.unalloc_fail_min.of(multi)
        for gpus, fails in ((fit, True), (fit - 1, False)):
            if gpus >= 1 and (gpus > largest) == multi:
                got = find_fit(HostView(state), gpus)
                assert (got is None) == fails, (multi, gpus, got)
        for gpus, fails in ((unallocated, True), (unallocated - 1, False)):
            if gpus >= 1 and (gpus > largest) == multi:
                got = find_victims(HostView(state), _request(gpus), NOW, None)
                assert (got is None) == fails, (multi, gpus, got)


def _over_asked(requests: int) -> ClusterState:
    """One host of 8 GPUs, budgets ``a`` and ``b`` of equal weight. ``a`` used all 8 GPUs
    for the first 8 hours (a usage ratio far above ``b``'s) and now holds 6 past their
    minimum runtime; ``b`` holds 2, also past theirs, and queues nothing. ``a`` queues
    ``requests`` requests of 1 to 4 GPUs."""
    state = make_state(make_tree("a", "b"), make_hosts(8))
    run_on(state, make_spec("a-early", "a", 8, HOUR), 0.0, ("h0", 8))
    state.finish("a-early", 8 * HOUR)
    run_on(state, make_spec("a-now", "a", 6, HOUR), 8 * HOUR, ("h0", 6))
    run_on(state, make_spec("b-now", "b", 2, HOUR), 8 * HOUR, ("h0", 2))
    for i in range(requests):
        state.submit(make_spec(f"a{i:02d}", "a", 1 + i % 4, HOUR, 9 * HOUR + i), 9 * HOUR + i)
    return state


def test_a_budget_no_side_gives_to_is_passed_over_untried() -> None:
    """``a`` holds 6 of 8 GPUs on a share of 4 (over it, so the guarantee rule gives it
    nothing) and has the higher usage ratio (so the fair-share rule lets ``b`` give it
    nothing): every one of its 30 requests would fail, and the fast pass, knowing it from
    the two budgets' figures alone, tries none of them (a pass that need not say why work
    waits lists only what it tried in ``order``). The reference pass tries all 30 and
    decides the same: nothing."""
    state = _over_asked(30)
    cfg = PolicyConfig()
    fast = decide(state, NOW, cfg, reasons=False)
    ref = decide(state, NOW, dataclasses.replace(cfg, shortcuts=False), reasons=False)
    assert fast.order == ()
    assert len(ref.order) == 30
    assert (fast.starts, fast.preemptions) == (ref.starts, ref.preemptions) == ((), ())
    pas = Pass(state, NOW, cfg)
    pas.judge_givers("a")
    assert pas.rebalance_failed_one == {"a": [(1, 0.0)]}
    assert pas.rebalance_failed_whole == {"a": [(1, 0.0)]}


def test_a_budget_a_side_gives_to_is_tried_as_before() -> None:
    """The same host with the two budgets' histories swapped: now ``b`` used the host early
    and holds 6 GPUs in two runs, ``a`` holds 2 and asks for 2. The fair-share rule may let
    ``b`` give (and ``a`` is within its share, so the guarantee rule may too): nothing is
    recorded before a try, the fast pass tries ``a``'s first request and rebalances for it
    as the reference pass does."""
    state = make_state(make_tree("a", "b"), make_hosts(8))
    run_on(state, make_spec("b-early", "b", 8, HOUR), 0.0, ("h0", 8))
    state.finish("b-early", 8 * HOUR)
    run_on(state, make_spec("b-one", "b", 3, HOUR), 8 * HOUR, ("h0", 3))
    run_on(state, make_spec("b-two", "b", 3, HOUR), 8 * HOUR, ("h0", 3))
    run_on(state, make_spec("a-now", "a", 2, HOUR), 8 * HOUR, ("h0", 2))
    state.submit(make_spec("a00", "a", 2, HOUR, 9 * HOUR), 9 * HOUR)
    cfg = PolicyConfig()
    pas = Pass(state, NOW, cfg)
    pas.judge_givers("a")
    assert pas.rebalance_failed_one == {} and pas.rebalance_failed_whole == {}
    fast = decide(state, NOW, cfg)
    ref = decide(state, NOW, dataclasses.replace(cfg, shortcuts=False))
    assert [p.by for p in fast.preemptions] == ["a00"]
    assert (fast.starts, fast.preemptions) == (ref.starts, ref.preemptions)


def test_the_untried_requests_are_told_why_they_wait() -> None:
    """A pass that tells why work waits lists every request it passed over untried in
    ``order``, each waiting for capacity, as the reference pass does for those it tried."""
    state = _over_asked(5)
    cfg = PolicyConfig()
    fast = decide(state, NOW, cfg)
    ref = decide(state, NOW, dataclasses.replace(cfg, shortcuts=False))
    assert fast.order == ref.order
    assert fast.waiting == ref.waiting
    assert len(fast.waiting) == 5
