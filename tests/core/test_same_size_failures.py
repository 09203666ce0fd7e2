"""A failed rebalance holds for later requests of the same budget and size with no less
admission charge (``Pass.size_failed``), whatever their own victim size bound: the fast pass
skips them, and decides what the reference pass, which searches for each, decides.

Four hosts of 8 GPUs; budgets ``a`` and ``b`` with 8 GPUs of share each, ``c`` with 16.
``b``'s runs of 1-8 GPUs fill h0-h2 first fit, each past its minimum runtime, inside it, or
restarted a short while ago (``restart_protection``); ``c`` fills h3 and may hold more of
h2. ``a`` holds a few GPUs and queues requests of several sizes, lengths (10 min with 8
GPUs or fewer: debug work) and waits (7 h or more: the size bound lifted).
"""

from __future__ import annotations

import dataclasses

from hypothesis import example, given, settings
from hypothesis import strategies as st

from apportion.core import ClusterState, PolicyConfig, Slice, decide
from apportion.core.policy import Pass

from .helpers import HOUR, make_hosts, make_spec, make_tree
from .strategies import CORE_SETTINGS

MINUTE = 60.0
NOW = 10 * HOUR
HOSTS = ("h0", "h1", "h2", "h3")

# b's runs: (GPUs, state): "past" its minimum runtime, "protected" inside it, "restarted"
# 30 min ago (past its 10 min minimum runtime, inside the 1 h restart protection)
_RUNS = st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 6, 8]),
                           st.sampled_from(["past", "past", "protected", "restarted"])),
                 min_size=1, max_size=10)
# a's requests: (GPUs, minimum runtime, hours queued before NOW, priority)
_REQUESTS = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 3, 4, 8, 16]),
              st.sampled_from([10 * MINUTE, HOUR, 4 * HOUR, 6 * HOUR]),
              st.sampled_from([0, 1, 7, 8]), st.sampled_from([0, 1])),
    min_size=2, max_size=10,
)


def _state(runs: list[tuple[int, str]], a_held: int, c_on_h2: int,
           requests: list[tuple[int, float, int, int]]) -> ClusterState:
    state = ClusterState(make_tree(("a", 1.0), ("b", 1.0), ("c", 2.0)), make_hosts(8, 8, 8, 8))
    free = dict.fromkeys(HOSTS, 8)

    def place(gpus: int, hosts: tuple[str, ...]) -> tuple[Slice, ...] | None:
        for host in hosts:  # first fit on one host
            if free[host] >= gpus:
                free[host] -= gpus
                return (Slice(host, gpus),)
        return None

    fixed = [("c-h3", "c", 8, ("h3",)), ("c-h2", "c", c_on_h2, ("h2",)),
             ("a-held", "a", a_held, ("h2", "h1", "h0"))]
    for wid, budget, gpus, hosts in fixed:
        slices = place(gpus, hosts) if gpus else None
        if slices:
            state.submit(make_spec(wid, budget, gpus, HOUR), 0.0)
            state.start(wid, slices, 0.0)
    later: list[tuple[str, tuple[Slice, ...], str]] = []
    for i, (gpus, how) in enumerate(runs):
        slices = place(gpus, ("h0", "h1", "h2"))
        if slices is None:
            continue
        wid = f"b{i}"
        state.submit(make_spec(wid, "b", gpus, 10 * MINUTE if how == "restarted" else HOUR,
                               resumable=True), 0.0)
        if how == "past":
            state.start(wid, slices, 0.0)
        else:
            later.append((wid, slices, how))
    for wid, slices, how in later:  # started after the others, in time order
        if how == "restarted":
            state.start(wid, slices, 0.0)
    for wid, slices, how in later:
        if how == "restarted":
            state.requeue(wid, NOW - 30 * MINUTE)
            state.start(wid, slices, NOW - 30 * MINUTE)
        else:
            state.start(wid, slices, NOW - 30 * MINUTE)
    for i, (gpus, min_runtime, waited, priority) in enumerate(requests):
        at = NOW - waited * HOUR
        state.submit(make_spec(f"r{i}", "a", gpus, min_runtime, at, priority=priority), NOW,
                     queued_at=at)
    return state


# a's 1-GPU request of 1 h (r1) fails to rebalance, and the record it leaves dooms a's 1-GPU
# debug request (r2) without a search (test_the_failed_size_memo_is_what_the_example_exercises)
_FIRES = ([(2, "restarted"), (3, "restarted"), (2, "protected"), (2, "past"), (8, "restarted"),
           (6, "past"), (1, "protected"), (6, "past")],
          0, 0, [(2, 6 * HOUR, 8, 1), (1, HOUR, 1, 1), (1, 10 * MINUTE, 0, 0),
                 (8, 10 * MINUTE, 1, 0), (4, 4 * HOUR, 8, 1)],
          1.0)


@settings(CORE_SETTINGS, max_examples=500)
@given(_RUNS, st.integers(0, 6), st.sampled_from([0, 4, 8]), _REQUESTS,
       st.sampled_from([0.0, 0.5, 1.0, 2.0]))
@example(*_FIRES)
def test_the_pass_skips_a_failed_size_exactly_as_the_reference_pass_decides(
    runs: list[tuple[int, str]], a_held: int, c_on_h2: int,
    requests: list[tuple[int, float, int, int]], factor: float,
) -> None:
    """With ``b``'s runs past, inside their minimum runtime or restart-protected, and
    ``a``'s requests of mixed sizes, charges, debug status and waits, under each victim
    size bound: the fast pass, which skips a request whose size failed to rebalance from a
    charge no higher than its own, makes the reference pass's starts and preemptions."""
    state = _state(runs, a_held, c_on_h2, requests)
    cfg = PolicyConfig(victim_max_factor=factor)
    fast = decide(state, NOW, cfg)
    ref = decide(state, NOW, dataclasses.replace(cfg, shortcuts=False))
    assert (fast.starts, fast.preemptions) == (ref.starts, ref.preemptions)


def test_the_failed_size_memo_is_what_the_example_exercises() -> None:
    """In the property test's explicit example, ``a``'s 1-GPU request of 1 h (``r1``) fails
    to rebalance before its 1-GPU debug request (``r2``: a smaller charge, a looser size
    bound) is reached, the failure is kept for ``a``'s 1-GPU requests from any charge, and
    it alone dooms ``r2``'s shape (without it, nothing does); the reference pass, which
    searches ``r2``, decides the same."""
    runs, a_held, c_on_h2, requests, factor = _FIRES
    state = _state(runs, a_held, c_on_h2, requests)
    cfg = PolicyConfig(victim_max_factor=factor)
    pas = Pass(state, NOW, cfg)
    decisions = pas.run()
    assert pas.size_failed == {("a", 1): 0.0}, pas.size_failed
    assert pas.order.index("r1") < pas.order.index("r2"), pas.order
    assert pas.doomed("a", 1, 10 * MINUTE) and not pas.doomed("a", 1, 10 * MINUTE, exact=False)
    ref = decide(state, NOW, dataclasses.replace(cfg, shortcuts=False))
    assert (decisions.starts, decisions.preemptions) == (ref.starts, ref.preemptions)
