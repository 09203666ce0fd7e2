"""The state's index of work rebalancing may take (allocated, past its minimum runtime, not
stopping), by hand: it follows protections ending, stops, exits and restarts."""

from __future__ import annotations

from apportion.core import ClusterState, Slice

from .helpers import make_hosts, make_spec, make_tree


def started(budget_gpus: list[tuple[str, str, int, float]]) -> ClusterState:
    """Work started at t=0 on hosts h0.., one workload a host: (id, budget, GPUs, min_runtime)."""
    st = ClusterState(make_tree("a/x", "a/y", "b"), make_hosts(*(8 for _ in budget_gpus)))
    for i, (wid, budget, gpus, min_runtime) in enumerate(budget_gpus):
        st.submit(make_spec(wid, budget, gpus, min_runtime=min_runtime), 0.0)
        st.start(wid, (Slice(f"h{i}", gpus),), 0.0)
    return st


def test_work_is_released_when_its_protection_ends() -> None:
    """w1 (a/x, 4 GPUs) is protected to 600 s, w2 (a/y, 2) to 1200 s, w3 (b, 8) to 60 s. At
    100 s only w3; at 700 s also w1 (a holds 4, smallest 4, on h0); at 1200 s all three,
    a's smallest is w2's 2 GPUs."""
    st = started([("w1", "a/x", 4, 600.0), ("w2", "a/y", 2, 1200.0), ("w3", "b", 8, 60.0)])
    at = st.released(100.0)
    assert at.ids == {"w3"} and at.gpus.get("a", 0) == 0 and at.gpus["b"] == 8
    at = st.released(700.0)
    assert at.ids == {"w1", "w3"}
    assert (at.gpus["a"], at.smallest("a"), set(at.hosts["a"])) == (4, 4, {"h0"})
    at = st.released(1200.0)
    assert (at.gpus["a"], at.smallest("a"), set(at.hosts["a"])) == (6, 2, {"h0", "h1"})
    assert at.gpus["a/y"] == 2 and at.smallest("a/x") == 4


def test_stopping_or_ended_work_is_no_longer_released() -> None:
    """Past every protection, w1 is told to stop and w3 exits: only w2 is left; asking for
    an earlier time (before w2's protection ended) rebuilds the index: nothing then."""
    st = started([("w1", "a/x", 4, 600.0), ("w2", "a/y", 2, 1200.0), ("w3", "b", 8, 60.0)])
    assert st.released(2000.0).ids == {"w1", "w2", "w3"}
    st.mark_stopping("w1")
    st.finish("w3", 2000.0)
    at = st.released(2000.0)
    assert at.ids == {"w2"} and at.gpus["a"] == 2 and at.gpus.get("b", 0) == 0
    assert at.smallest("b") == 1 << 30 and not at.hosts.get("b")
    assert st.released(1000.0).ids == set()
    assert st.released(2000.0).ids == {"w2"}


def test_work_restarted_at_the_same_instant_is_counted_once() -> None:
    """w1 (1 s minimum runtime) is requeued and started again at the instant it started:
    both protection entries name the same run, and it is counted once when they end."""
    st = started([("w1", "a/x", 4, 1.0)])
    st.requeue("w1", 0.0)
    st.start("w1", (Slice("h0", 4),), 0.0)
    at = st.released(1.0)
    assert at.ids == {"w1"} and at.gpus["a"] == 4 and at.by_size["a"] == {4: 1}
