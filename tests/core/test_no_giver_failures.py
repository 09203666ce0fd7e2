"""A failed rebalance with no side giving, and none a smaller charge would open, holds for
every request of the budget from the fewest GPUs that leave its side over its share at the
levels where a sibling could give to any request (``Pass.guarantee_refused_from``; the other
levels give nothing whatever the size), and for both shapes, one host and whole hosts (with
no side giving, no search runs for either): the fast pass skips those requests and decides
what the reference pass, which tries each, decides.

Four hosts of 8 GPUs, so that 16 GPUs is whole hosts. Budget ``a`` is one of two or three
siblings; its parent is the only child of the root, or has a sibling, or it has none.
``b``'s and ``c``'s runs, past their minimum runtime or inside it, fill the hosts first fit
(a 16-GPU run takes two free hosts). ``a`` holds a few GPUs and queues requests of 1 to 16
GPUs, short and long, queued an hour or past the victim size bound's lift.
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
# the trees: a's parent alone under the root (as a trace's synthesised budgets are), with a
# sibling, or no parent at all
TREES = {
    "alone": ("g/a", "g/b", "g/c"),
    "beside": ("g/a", "g/b", "c"),
    "flat": ("a", "b", "c"),
}

# runs of b and c: (budget, GPUs, past its minimum runtime?)
_RUNS = st.lists(st.tuples(st.sampled_from(["b", "c"]), st.sampled_from([1, 2, 4, 8, 8, 16]),
                           st.booleans()),
                 min_size=1, max_size=10)
# a's requests: (GPUs, minimum runtime, hours queued: 8 is past the size bound's lift)
_REQUESTS = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 16, 16]),
                               st.sampled_from([10 * MINUTE, HOUR, 6 * HOUR]),
                               st.sampled_from([1, 1, 8])),
                     min_size=2, max_size=8)


def _state(tree: str, weight_a: float, a_held: int, runs: list[tuple[str, int, bool]],
           requests: list[tuple[int, float, int]]) -> ClusterState:
    names = TREES[tree]
    leaf = {name.rsplit("/", 1)[-1]: name for name in names}
    state = ClusterState(make_tree((names[0], weight_a), *names[1:]), make_hosts(8, 8, 8, 8))
    free = dict.fromkeys(HOSTS, 8)

    def place(gpus: int) -> tuple[Slice, ...] | None:
        if gpus > 8:  # whole free hosts
            whole = [h for h in HOSTS if free[h] == 8][: gpus // 8]
            if len(whole) < gpus // 8:
                return None
            for host in whole:
                free[host] = 0
            return tuple(Slice(host, 8) for host in whole)
        for host in HOSTS:  # first fit on one host
            if free[host] >= gpus:
                free[host] -= gpus
                return (Slice(host, gpus),)
        return None

    started: list[tuple[float, str, tuple[Slice, ...]]] = []  # (start time, id, slices)
    if a_held:
        slices = place(a_held)
        assert slices is not None
        state.submit(make_spec("a-held", leaf["a"], a_held, HOUR), 0.0)
        started.append((0.0, "a-held", slices))  # a's own: never a victim of a's work
    for i, (budget, gpus, past) in enumerate(runs):
        slices = place(gpus)
        if slices is None:
            continue
        wid = f"{budget}{i}"
        state.submit(make_spec(wid, leaf[budget], gpus, HOUR, resumable=True), 0.0)
        started.append((0.0 if past else NOW - 30 * MINUTE, wid, slices))
    for at, wid, slices in sorted(started, key=lambda s: s[0]):  # in time order
        state.start(wid, slices, at)
    for i, (gpus, min_runtime, waited) in enumerate(requests):
        at = NOW - waited * HOUR
        state.submit(make_spec(f"r{i}", leaf["a"], gpus, min_runtime, at), NOW, queued_at=at)
    return state


# a (under g, alone under the root, with 7 GPUs since the start: a higher usage ratio than
# b's, so the fair-share rule gives it nothing) asks for 16 GPUs, then 8 and 4. b's 1-GPU
# run past its minimum runtime could go to a request of a of 3 GPUs or fewer, by the
# guarantee rule; so the 16-GPU request's failure covers a's requests from 4 GPUs, of both
# shapes, and dooms the other two (test_the_record_is_what_the_example_exercises)
_FIRES = ("alone", 1.0, 7, [("b", 7, False), ("b", 8, False), ("b", 1, True), ("b", 5, False)],
          [(16, HOUR, 1), (8, HOUR, 1), (4, HOUR, 1)])


@settings(CORE_SETTINGS, max_examples=500)
@given(st.sampled_from(sorted(TREES)), st.sampled_from([0.5, 1.0, 2.0]), st.integers(0, 8),
       _RUNS, _REQUESTS, st.sampled_from([0.0, 2.0]))
@example(*_FIRES, 2.0)
# the guarantee rule's overshoot lets a's 8-GPU request take c's 8-GPU run where its first
# term would not (RebalanceRules.guarantee_most must count it)
@example("alone", 2.0, 5, [("b", 16, False), ("c", 1, False), ("c", 8, True)],
         [(1, 10 * MINUTE, 1), (2, 10 * MINUTE, 1), (8, 10 * MINUTE, 1)], 0.0)
def test_the_pass_skips_requests_no_side_gives_to_as_the_reference_pass_decides(
    tree: str, weight_a: float, a_held: int, runs: list[tuple[str, int, bool]],
    requests: list[tuple[int, float, int]], factor: float,
) -> None:
    """With ``b``'s and ``c``'s runs past or inside their minimum runtime, ``a``'s requests
    of one host and of whole hosts, waited out or not, and each tree shape: the fast pass,
    which records a rebalance no side gave to for the sizes and both shapes it covers and
    skips them, makes the reference pass's starts and preemptions."""
    state = _state(tree, weight_a, a_held, runs, requests)
    cfg = PolicyConfig(victim_max_factor=factor)
    fast = decide(state, NOW, cfg)
    ref = decide(state, NOW, dataclasses.replace(cfg, shortcuts=False))
    assert (fast.starts, fast.preemptions) == (ref.starts, ref.preemptions)


def test_the_record_is_what_the_example_exercises() -> None:
    """In the property test's explicit example, ``a``'s 16-GPU request (whole hosts) fails
    to rebalance with no side giving. Its parent ``g`` has no sibling, so only the leaf
    level counts, where 4 more GPUs put ``a`` over its share (counting ``g``'s level too,
    the whole path, it would be 5: the cluster has 4 GPUs free). The record covers ``a``'s
    requests from 4 GPUs from any charge, for one host as well, and dooms the 4-GPU one.
    The reference pass, which tries both, decides the same."""
    tree, weight_a, a_held, runs, requests = _FIRES
    state = _state(tree, weight_a, a_held, runs, requests)
    pas = Pass(state, NOW, PolicyConfig())
    decisions = pas.run()
    assert decisions.starts == () and decisions.preemptions == ()
    assert pas.guarantee_refused_from("g/a", 16) == 4
    assert max(pas.rules.first_over(node) for node in state.tree.lineage("g/a")) == 5
    assert pas.rebalance_failed_whole == {"g/a": [(4, 0.0)]}, pas.rebalance_failed_whole
    assert pas.rebalance_failed_one == {"g/a": [(4, 0.0)]}, pas.rebalance_failed_one
    assert pas.doomed("g/a", 4, HOUR, exact=False)
    ref = decide(state, NOW, PolicyConfig(shortcuts=False))
    assert (decisions.starts, decisions.preemptions) == (ref.starts, ref.preemptions)
