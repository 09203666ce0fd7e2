"""Regressions of the pass: each case once made it emit an impossible decision."""

from __future__ import annotations

from apportion.core import ClusterState, HostState, PolicyConfig, Slice, decide

from .helpers import make_hosts, make_spec, make_tree

CFG = PolicyConfig()


def test_drained_multi_host_work_is_not_also_a_whole_host_victim() -> None:
    """A 16-GPU workload on a draining host and a healthy one is preempted once (by the
    drain), not a second time as a victim of a whole-host request in the same pass."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8, 8, 8))
    st.submit(make_spec("u", "b", 16, min_runtime=0.0), 0.0)
    st.start("u", (Slice("h0", 8), Slice("h1", 8)), 0.0)
    st.submit(make_spec("w", "b", 8, min_runtime=0.0), 0.0)
    st.start("w", (Slice("h2", 8),), 0.0)
    st.set_host_state("h0", HostState.DRAINING, 1.0)
    st.submit(make_spec("x", "a", 16), 2.0)
    d = decide(st, 2.0, CFG)
    ids = [p.workload for p in d.preemptions]
    assert len(ids) == len(set(ids)), ids
    assert "u" in ids
