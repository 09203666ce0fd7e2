"""Invariants of reservations and restarts over random contended replays.

Every driven pass is checked by :func:`.helpers.check_pass` as well (no protected victim,
no over-commit, a restarted workload is no rebalance victim within its restart protection);
the index oracle runs after every event. Here, on top: what a reservation waits for and
what it lets onto its hosts, and the restart window over whole histories.
"""

from __future__ import annotations

from hypothesis import given

from apportion.core import ClusterState, Decisions, PolicyConfig, PreemptReason
from apportion.core.policy import Pass

from .helpers import EPS, Driver, make_state
from .strategies import DRIVEN_SETTINGS, Scenario, contended_scenarios

CFG = PolicyConfig(reservations=2)


def _check_fences(state: ClusterState, now: float, d: Decisions) -> None:
    """Each reservation starts no earlier than the protection of any allocated work on its
    hosts that it waits for ends (time-limited work aside: it ends at its limit), and every
    start on its hosts is work that cannot delay it."""
    p = Pass(state, now, CFG)
    p.run()
    for fence in p.fences:
        assert fence.ready > now
        hosts = set(fence.hosts)
        for host in hosts:
            for wid in state.on_host[host]:
                r = state.running[wid]
                if not r.spec.allocated or wid in state.stopping:
                    continue
                ends = r.protected_until()
                if r.spec.time_limit > 0:
                    ends = min(ends, r.started_at + r.spec.time_limit)
                assert fence.ready >= ends - EPS, (
                    f"reservation of {fence.spec.id} at {fence.ready} before {wid}'s "
                    f"protection ends at {ends}"
                )
        for s in d.starts:
            if not hosts & {sl.host for sl in s.placement}:
                continue
            spec = state.pending[s.workload].spec
            done_by_limit = spec.time_limit > 0 and now + spec.time_limit <= fence.ready
            released_by = spec.resumable and now + spec.min_runtime <= fence.ready
            assert not spec.allocated or done_by_limit or released_by, (
                f"{s.workload} started on reserved {sorted(hosts)} and would hold them past "
                f"{fence.ready}"
            )


@DRIVEN_SETTINGS
@given(contended_scenarios())
def test_reservations_wait_for_protections_and_admit_only_work_that_cannot_delay_them(
    sc: Scenario,
) -> None:
    """On every pass of a contended replay with reservations: a reservation's start is no
    earlier than the end of the protection of what it waits for, and nothing starts on
    reserved hosts that would still hold them, protected, when the reservation starts."""
    drv = Driver(make_state(sc.tree, sc.hosts), config=CFG, on_pass=_check_fences)
    drv.add_jobs(sc.jobs)
    drv.run(until=14 * 3600.0, start=0.0)


@DRIVEN_SETTINGS
@given(contended_scenarios())
def test_no_workload_is_rebalanced_twice_within_the_restart_window(sc: Scenario) -> None:
    """Over a whole contended replay with reservations, two rebalance preemptions of the
    same workload are at least ``restart_protection`` apart (its restart lies between)."""
    drv = Driver(make_state(sc.tree, sc.hosts), config=CFG)
    drv.add_jobs(sc.jobs)
    drv.run(until=14 * 3600.0, start=0.0)
    last: dict[str, float] = {}
    for now, p in drv.preempted:
        if p.reason is PreemptReason.REBALANCE:
            if p.workload in last:
                assert now - last[p.workload] >= CFG.restart_protection - EPS, (
                    f"{p.workload} rebalanced at {last[p.workload]} and again at {now}"
                )
            last[p.workload] = now
