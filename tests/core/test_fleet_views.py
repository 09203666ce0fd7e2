"""The views of a FleetState a driver reads (hosts, pending, running, stopping, used,
on_host, reservations, deadlines): the union of its pools', and with one pool that pool's
own; and the message of an unknown host, as validate_spec gives it."""

from __future__ import annotations

import pytest

from apportion.core import (
    BudgetNode,
    BudgetTree,
    CoreError,
    Host,
    PolicyConfig,
    Slice,
    WorkloadSpec,
)
from apportion.core.fleet import FleetState

TREE = BudgetTree.build([BudgetNode("a", 1.0)])
VIEWS = ("hosts", "pending", "running", "stopping", "used", "on_host", "reservations",
         "deadlines")


def spec(wid: str, kinds: tuple[str, ...] = ()) -> WorkloadSpec:
    return WorkloadSpec(wid, "a", 4, 600.0, 0.0, gpu_kinds=kinds, time_limit=3600.0)


def busy(fleet: FleetState) -> None:
    """One running (stopping, with a time limit) and one pending workload per pool."""
    for i, (pool, state) in enumerate(fleet.pools.items()):
        host = next(iter(state.hosts))
        kind = fleet.where(pool)[1]
        fleet.submit(spec(f"r{i}", (kind,)), 0.0)
        fleet.start(f"r{i}", (Slice(host, 4),), 0.0)
        fleet.mark_stopping(f"r{i}")
        fleet.submit(spec(f"p{i}", (kind,)), 0.0)
        fleet.reserve(f"p{i}", (host,))


def test_one_pool_views_are_the_pools_own() -> None:
    """With one pool every view is that pool's mapping itself (no copy per read)."""
    fleet = FleetState(TREE)
    fleet.add_host(Host("h0", 8), "c", "gpu", 0.0)
    busy(fleet)
    (state,) = fleet.pools.values()
    for view in VIEWS:
        assert getattr(fleet, view) is getattr(state, view), view


def test_views_of_several_pools_are_the_union_of_theirs() -> None:
    """With two pools each view holds exactly the entries of both pools' views."""
    fleet = FleetState(TREE)
    fleet.add_host(Host("h0", 8), "c", "H100", 0.0)
    fleet.add_host(Host("b0", 8), "c", "B200", 0.0)
    busy(fleet)
    for view in VIEWS:
        got = getattr(fleet, view)
        parts = [getattr(s, view) for s in fleet.pools.values()]
        if view == "stopping":
            assert set(got) == {"r0", "r1"} == set().union(*parts)
        else:
            assert dict(got) == {k: v for p in parts for k, v in p.items()}, view
            assert len(got) == sum(len(p) for p in parts) == 2, view


def test_an_unknown_host_is_refused_as_validate_spec_says_it() -> None:
    """A request naming a host no pool has: ``hosts: unknown host 'x'``."""
    fleet = FleetState(TREE)
    fleet.add_host(Host("h0", 8), "c", "gpu", 0.0)
    bad = WorkloadSpec("w", "a", 1, 60.0, 0.0, hosts=("x",))
    with pytest.raises(CoreError, match=r"^workload w: hosts: unknown host 'x'$"):
        fleet.validate(bad, PolicyConfig())
