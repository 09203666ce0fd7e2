"""Invariants of the policy, checked over random trees, clusters and workload streams,
driven through time by the small simulator loop in :mod:`.helpers`.

Every driven pass is also checked by :func:`.helpers.check_pass` (no protected victim, no
over-commit, starts only on healthy hosts in the right shape, no unallocated preemptor,
allocated before unallocated, each workload preempted at most once).
"""

from __future__ import annotations

import math

from hypothesis import assume, given
from hypothesis import strategies as st

from apportion.core import (
    ROOT,
    BudgetTree,
    ClusterState,
    Decisions,
    Host,
    PolicyConfig,
    Slice,
    WorkloadSpec,
    ancestors,
    decide,
    is_debug,
)
from apportion.core.placement import find_victims
from apportion.core.policy import Pass
from apportion.core.preemption import RebalanceRules
from apportion.core.state import queue_key

from .helpers import EPS, HOUR, Driver, Job, RunRecord, held_by, make_state
from .oracle import check_indexes
from .strategies import (
    CORE_SETTINGS,
    DRIVEN_SETTINGS,
    MIN_RUNTIMES,
    Scenario,
    budget_trees,
    contended_scenarios,
    scenarios,
)

CFG = PolicyConfig()


def drive(sc: Scenario, until: float = 14 * HOUR, **kw: object) -> Driver:
    drv = Driver(make_state(sc.tree, sc.hosts), **kw)  # type: ignore[arg-type]
    drv.add_jobs(sc.jobs)
    drv.add_host_events(sc.host_events)
    drv.run(until=until, start=0.0)
    return drv


@DRIVEN_SETTINGS
@given(scenarios())
def test_allocated_work_is_never_preempted_before_its_minimum_runtime(sc: Scenario) -> None:
    """No allocated workload is preempted by ``decide`` before its minimum runtime has
    elapsed (only a host failure, issued by the driver, may end it earlier)."""
    early: list[str] = []

    def watch(state: ClusterState, now: float, d: Decisions) -> None:
        for p in d.preemptions:
            r = state.running[p.workload]
            if r.spec.allocated and now < r.started_at + r.spec.min_runtime - EPS:
                early.append(p.workload)

    drv = drive(sc, on_pass=watch)
    assert early == []
    assert all(p.reason.value != "host_failure" for _, p in drv.preempted)


@DRIVEN_SETTINGS
@given(scenarios())
def test_no_host_is_ever_over_committed(sc: Scenario) -> None:
    """After every event of a replay, GPUs used per host never exceed its GPUs and hosts in
    repair or down hold nothing (with every other index, by the oracle the driver runs after
    each event); starts land on healthy hosts in the single-host / whole-hosts shape and only
    on GPUs free before the pass's preemptions (checked per pass)."""
    drv = drive(sc)
    check_indexes(drv.state, "the replay")


def released_by_hand(state: ClusterState, now: float) -> dict[str, tuple[int, int, set[str]]]:
    """Per budget node: GPUs, smallest workload and hosts of allocated work past its minimum
    runtime at ``now`` and not stopping, worked out from the running work alone."""
    out: dict[str, tuple[int, int, set[str]]] = {}
    for wid, r in state.running.items():
        if r.spec.allocated and wid not in state.stopping and now >= r.protected_until():
            for node in ancestors(r.spec.budget)[:-1]:
                gpus, least, hosts = out.get(node, (0, 1 << 30, set()))
                out[node] = (gpus + r.gpus_held, min(least, r.gpus_held),
                             hosts | {s.host for s in r.placement})
    return out


@DRIVEN_SETTINGS
@given(scenarios(), st.lists(st.floats(0.0, 4 * HOUR), max_size=3))
def test_released_work_is_what_the_running_work_says(
    sc: Scenario, look_back: list[float]
) -> None:
    """Before every pass, the state's index of work rebalancing may take equals the one
    worked out from the running work, also when asked about an earlier time (it is then
    rebuilt) and about the pass's time again."""
    checked = [0]

    def compare(state: ClusterState, now: float) -> None:
        index = state.released(now)
        got = {
            node: (gpus, index.smallest(node), set(index.hosts.get(node, {})))
            for node, gpus in index.gpus.items()
            if gpus
        }
        assert got == released_by_hand(state, now)

    def check(state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        for back in look_back:
            compare(state, max(now - back, 0.0))
        compare(state, now)
        checked[0] += 1
        return decide(state, now, config)

    drive(sc, policy=check)
    assert checked[0] > 0


@DRIVEN_SETTINGS
@given(scenarios())
def test_unallocated_work_never_preempts_and_comes_last(sc: Scenario) -> None:
    """No preemption is made for an unallocated workload, and in every pass all pending
    allocated work is considered before any unallocated work."""

    def watch(state: ClusterState, now: float, d: Decisions) -> None:
        for p in d.preemptions:
            assert p.by is None or state.pending[p.by].spec.allocated
        seen_unallocated = False
        for wid in d.order:
            allocated = state.pending[wid].spec.allocated
            assert not (allocated and seen_unallocated), f"{wid} considered after unallocated"
            seen_unallocated |= not allocated

    drive(sc, on_pass=watch)


def check_budget_order(
    state: ClusterState, d: Decisions, config: PolicyConfig = CFG
) -> None:
    """Inside each budget, work is considered in queue order: priority, then submit time;
    only debug work the debug lane takes goes first (in queue order too, each of it
    started or promised its GPUs in the pass). Work holding a reservation is settled first:
    it was ranked and admitted by the pass that preempted for it, so it is not ranked again."""
    taken = {s.workload for s in d.starts} | {r.workload for r in d.reservations}
    per: dict[tuple[str, bool], list[WorkloadSpec]] = {}
    for wid in d.order:
        if wid in state.reservations:
            continue
        spec = state.pending[wid].spec
        per.setdefault((spec.budget, spec.allocated), []).append(spec)
    for specs in per.values():
        assert any(_lane_then_queue(state, specs[:k], specs[k:], taken, config)
                   for k in range(len(specs) + 1)), [s.id for s in specs]


def _lane_then_queue(
    state: ClusterState, lane: list[WorkloadSpec], rest: list[WorkloadSpec], taken: set[str],
    config: PolicyConfig,
) -> bool:
    """Is ``lane`` debug work the lane may have taken and ``rest`` other work, each in queue
    order?"""
    if lane and not config.debug_lane:
        return False
    if not all(is_debug(s, config) and s.id in taken for s in lane):
        return False
    lane_keys = [queue_key(s) for s in lane]
    keys = [queue_key(s) for s in rest]
    return lane_keys == sorted(lane_keys) and keys == sorted(keys)


@DRIVEN_SETTINGS
@given(scenarios())
def test_within_a_budget_higher_priority_goes_first(sc: Scenario) -> None:
    """In every pass, each budget's work is considered by priority (then submit time)."""
    drive(sc, on_pass=lambda state, now, d: check_budget_order(state, d))


@CORE_SETTINGS
@given(
    scenarios(events=False),
    st.integers(0, 10),
    st.lists(st.integers(-3, 3), min_size=1, max_size=6),
    st.integers(0, 2),
    st.data(),
)
def test_priority_never_reorders_across_budgets(
    sc: Scenario, at_hours: int, priorities: list[int], shape: int, data: st.DataObject
) -> None:
    """Changing the priorities of budget A's pending work changes nothing for any other
    budget: the order, starts and preemptions of their work are the same.

    A's pending workloads share one shape (GPUs and minimum runtime) here: then *which* of
    them is admitted first does not change what capacity and admission charges are left
    for others. (With differently sized work, A's priorities legitimately decide which of
    A's jobs gets in, and a bigger one leaves less room for everyone else; that is a
    capacity effect inside A's own turn, not a reordering across budgets.)"""
    drv = drive(sc, until=at_hours * HOUR)
    now = drv.state.time
    leaves = sc.tree.leaves
    a = data.draw(st.sampled_from(leaves))
    gpus = min((1, 4, 8)[shape], max(h.gpus for h in sc.hosts))
    mrt = data.draw(st.sampled_from([600.0, HOUR]))
    rest = [leaf for leaf in leaves if leaf != a]
    others = data.draw(st.lists(st.sampled_from(rest), max_size=6)) if rest else []

    def with_priorities(prios: list[int]) -> Decisions:
        state = drive(sc, until=at_hours * HOUR).state  # the same history, replayed afresh
        for i, p in enumerate(prios):
            state.submit(WorkloadSpec(f"A{i}", a, gpus, mrt, now - i, priority=p), now)
        for i, leaf in enumerate(others):
            state.submit(WorkloadSpec(f"O{i}", leaf, 1 + i % 4, HOUR, now - i), now)
        d = decide(state, now, CFG)
        check_budget_order(state, d)
        return d

    def project(d: Decisions) -> tuple[object, ...]:
        def mine(w: str) -> bool:
            return w.startswith("A")

        return (
            [w for w in d.order if not mine(w)],
            [s for s in d.starts if not mine(s.workload)],
            [p for p in d.preemptions if p.by is None or not mine(p.by)],
        )

    base = with_priorities([0] * len(priorities))
    changed = with_priorities(priorities)
    assert project(base) == project(changed)
    # and A's work as a whole still gets the same number of starts and preemptions
    assert len(base.starts) == len(changed.starts)
    assert len(base.preemptions) == len(changed.preemptions)


def overlap(r: RunRecord, lo: float, hi: float) -> float:
    assert r.end is not None
    return max(0.0, min(r.end, hi) - max(r.start, lo))


@DRIVEN_SETTINGS
@given(scenarios(), st.lists(st.floats(1.0, 30 * HOUR), min_size=1, max_size=4))
def test_ledger_conserves_gpu_seconds(sc: Scenario, windows: list[float]) -> None:
    """After a random history of starts, completions, preemptions, requeues and host
    failures, the ledger's charged (and free) GPU-seconds of every node over any window equal
    the sum over the runs of its subtree of GPUs x time inside the window; the root and each
    inner node hold exactly the sum of their children."""
    drv = drive(sc)
    now = drv.state.time + 600.0
    runs = drv.close_runs(now)
    led = drv.state.ledger
    tree = sc.tree
    for w in [*windows, 1e12]:
        for node in [ROOT, *tree.nodes()]:
            mine = [
                r for r in runs if node == ROOT or r.budget == node
                or r.budget.startswith(node + "/")
            ]
            charged = sum(r.gpus * overlap(r, now - w, now) for r in mine if r.allocated)
            free = sum(r.gpus * overlap(r, now - w, now) for r in mine if not r.allocated)
            assert math.isclose(led.charged(node, now, w), charged, rel_tol=1e-9, abs_tol=1e-6)
            assert math.isclose(led.free(node, now, w), free, rel_tol=1e-9, abs_tol=1e-6)
            kids = tree.children(node)
            if kids:
                for series in (led.charged, led.free):
                    total = sum(series(k, now, w) for k in kids)
                    assert math.isclose(series(node, now, w), total, rel_tol=1e-9, abs_tol=1e-6)


@DRIVEN_SETTINGS
@given(scenarios(), st.integers(0, 30))
def test_decide_is_deterministic_and_pure(sc: Scenario, at_half_hours: int) -> None:
    """Two calls on one state give equal decisions and leave the state exactly as it was;
    a state rebuilt by replaying the same history gives the same decisions too."""
    until = at_half_hours * 1800.0
    drv = drive(sc, until=until)
    state, now = drv.state, drv.state.time
    # add fresh pending work so the pass has something to decide
    for j in sc.jobs[:5]:
        spec = j.spec
        fresh = WorkloadSpec(
            "new-" + spec.id, spec.budget, spec.gpus, spec.min_runtime, now,
            resumable=spec.resumable, priority=spec.priority,
        )
        state.submit(fresh, now)
    before = state.fingerprint()
    first = decide(state, now, CFG)
    assert state.fingerprint() == before
    assert decide(state, now, CFG) == first
    again = drive(sc, until=until)
    for j in sc.jobs[:5]:
        again.state.submit(state.pending["new-" + j.spec.id].spec, now)
    assert again.state.fingerprint() == before
    assert decide(again.state, now, CFG) == first


@DRIVEN_SETTINGS
@given(scenarios())
def test_leaving_out_reasons_changes_no_decision(sc: Scenario) -> None:
    """On every pass of a replay, ``decide(..., reasons=False)`` (what the simulator calls)
    decides exactly what the full pass decides; what it says about waiting work is the full
    pass's, with only bulk-skipped work left out."""
    checked = [0]

    def both(state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        full = decide(state, now, config)
        lean = decide(state, now, config, reasons=False)
        assert (lean.starts, lean.preemptions, lean.host_changes, lean.reservations) == (
            full.starts, full.preemptions, full.host_changes, full.reservations
        )
        assert lean.waiting.items() <= full.waiting.items()
        assert set(lean.order) <= set(full.order)
        checked[0] += 1
        return lean

    drive(sc, policy=both)
    assert checked[0] > 0


def rebalance_room(
    state: ClusterState, now: float, spec: WorkloadSpec, giving: dict[str, str],
    restricted: bool,
) -> tuple[tuple[tuple[str, int], ...], list[str]] | None:
    """The room a fresh pass's rebalancing search finds for ``spec`` with victims of the
    sides ``giving``: over the hosts within reach, or (not ``restricted``) over all."""
    probe = Pass(state, now, CFG)
    whole = spec.gpus > probe.hosts.max_size
    plan = find_victims(
        probe.hosts, spec, now,
        lambda c, taken: probe.rules.may_preempt(spec, c, taken, giving),
        only=probe.reach(giving, whole) if restricted else None,
        budget_ok=lambda b: RebalanceRules.side_in(b, giving) is not None,
    )
    return None if plan is None else (plan.hosts, [v.id for v in plan.victims])


def test_rebalancing_searches_only_hosts_within_reach() -> None:
    """On every pass of random replays, for every pending allocated request the
    unallocated-only search fails for: the rebalancing search over the hosts of the sides
    that may give way (``Pass.reach``) finds exactly the room the search over every host
    finds. Some of those searches must find room, on one host and on whole hosts."""
    found = {False: 0, True: 0}  # rooms found, by shape (whole hosts or not)

    @DRIVEN_SETTINGS
    @given(contended_scenarios())
    def replay(sc: Scenario) -> None:
        def check(state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
            for p in state.pending.values():
                spec = p.spec
                probe = Pass(state, now, config)
                if not spec.allocated or find_victims(probe.hosts, spec, now, None) is not None:
                    continue  # the pass would not search for rebalance victims
                _, giving, _, _ = probe.rebalance_bound(spec)
                room = rebalance_room(state, now, spec, giving, restricted=False)
                assert rebalance_room(state, now, spec, giving, restricted=True) == room, spec
                found[spec.gpus > probe.hosts.max_size] += room is not None
            return decide(state, now, config)

        drive(sc, policy=check)

    replay()
    assert found[False] > 0 and found[True] > 0, found


@DRIVEN_SETTINGS
@given(scenarios(max_jobs=40))
def test_no_ping_pong(sc: Scenario) -> None:
    """At every instant the decide/apply loop reaches a quiet pass within a few rounds; no
    workload is both started and preempted at the same instant; and no two budgets take
    GPUs from each other at the same instant (if A's work displaced B's, B's work does not
    displace A's)."""
    events: dict[float, list[tuple[str, str, str, str]]] = {}

    def watch(state: ClusterState, now: float, d: Decisions) -> None:
        for p in d.preemptions:
            if p.by is not None:
                victim = state.running[p.workload].spec.budget
                by = state.pending[p.by].spec.budget
                events.setdefault(now, []).append((by, victim, p.by, p.workload))

    drv = drive(sc, on_pass=watch)
    assert max(drv.rounds_at.values(), default=0) <= 6
    started: dict[float, set[str]] = {}
    for now, d in drv.passes:  # in the order they were applied
        churned = {p.workload for p in d.preemptions} & started.get(now, set())
        assert not churned, f"started then preempted at {now}: {churned}"
        started.setdefault(now, set()).update(s.workload for s in d.starts)
    for now, evs in events.items():
        pairs = {(by, victim) for by, victim, _, _ in evs if by != victim}
        assert not {(v, b) for b, v in pairs} & pairs, f"budgets swapped GPUs at {now}: {evs}"


# ---- the share guarantee ----------------------------------------------------------------------
LONG = 1000 * HOUR  # true duration of the competing work: it never ends by itself


@st.composite
def whole_host_tree(draw: st.DrawFn) -> tuple[BudgetTree, int]:
    """A random tree whose every leaf's share is a whole number of hosts: each leaf gets
    1-3 hosts' worth, each node weighs the hosts of its subtree. Returns it and the hosts."""
    shape = draw(budget_trees())
    hosts = {leaf: draw(st.integers(1, 3)) for leaf in shape.leaves}
    weight = dict.fromkeys(shape.nodes(), 0)
    for leaf, k in hosts.items():
        for node in ancestors(leaf)[:-1]:
            weight[node] += k
    assume(sum(hosts.values()) <= 12)
    return BudgetTree.build(list(weight.items())), sum(hosts.values())


@st.composite
def guarantee_cases(draw: st.DrawFn, whole_hosts: bool = False) -> tuple[Driver, str, int, float]:
    """A cluster full of other budgets' work (allocated within or past its minimum runtime,
    or unallocated, started over the last ``t0`` seconds), more of their work queued, and
    budget B asking at ``t0`` for ``ask`` GPUs, no more than its share. Returns the driver
    (not yet run), B, the ask and t0.

    Restriction (see the tests' docstrings): the others' *allocated* work comes in the same
    unit as B's asks (one GPU, or whole hosts); their unallocated work has any size."""
    size = draw(st.sampled_from([4, 8]))
    if whole_hosts:
        tree, n_hosts = draw(whole_host_tree())
    else:
        tree = draw(budget_trees())
        n_hosts = draw(st.integers(2, 12))
    hosts = [Host(f"h{i:02d}", size) for i in range(n_hosts)]
    total = size * n_hosts
    b = draw(st.sampled_from(tree.leaves))
    others = [leaf for leaf in tree.leaves if leaf != b]
    entitled = math.floor(tree.share(b) * total + 1e-9)
    unit = size if whole_hosts else 1
    assume(entitled >= unit and others)
    t0 = float(draw(st.integers(1, 48)) * 1800)
    state = make_state(tree, hosts)
    fill: list[tuple[float, WorkloadSpec, tuple[tuple[str, int], ...]]] = []
    n = 0

    def other_spec(gpus: int, at: float) -> WorkloadSpec:
        nonlocal n
        n += 1
        unallocated = gpus != unit or draw(st.integers(0, 3)) == 0
        return WorkloadSpec(
            f"o{n:03d}", draw(st.sampled_from(others)), gpus,
            0.0 if unallocated else draw(MIN_RUNTIMES), at,
            resumable=draw(st.booleans()),
        )

    for h in hosts:
        if draw(st.booleans()):
            at = float(draw(st.integers(0, int(t0))))
            fill.append((at, other_spec(size, at), ((h.name, size),)))
        else:
            for _ in range(size):
                at = float(draw(st.integers(0, int(t0))))
                fill.append((at, other_spec(1, at), ((h.name, 1),)))
    fill.sort(key=lambda f: (f[0], f[1].id))
    for at, spec, slices in fill:
        state.submit(spec, at)
        state.start(spec.id, tuple(Slice(h, g) for h, g in slices), at)
    drv = Driver(state)
    queued = [Job(other_spec(draw(st.sampled_from([1, size])), t0), LONG)
              for _ in range(draw(st.integers(0, 12)))]
    ask_units = draw(st.integers(1, entitled // unit))
    mine = [
        Job(WorkloadSpec(f"b{i:02d}", b, unit, draw(MIN_RUNTIMES), t0,
                         resumable=draw(st.booleans())), LONG)
        for i in range(ask_units)
    ]
    drv.add_jobs(queued + mine)
    return drv, b, ask_units * unit, t0


@CORE_SETTINGS
@given(guarantee_cases())
def test_share_guarantee_for_single_gpu_work(case: tuple[Driver, str, int, float]) -> None:
    """A budget asking for no more than its share (in one-GPU workloads) holds all of it by
    ``max_min_runtime`` after asking, whatever the other budgets run and queue."""
    drv, b, ask, t0 = case
    drv.run(until=t0 + CFG.max_min_runtime + 1.0, start=t0)
    assert held_by(drv.state, b) >= ask


@CORE_SETTINGS
@given(guarantee_cases(whole_hosts=True))
def test_share_guarantee_for_whole_host_work(case: tuple[Driver, str, int, float]) -> None:
    """The same with whole-host workloads, on a cluster whose other work is whole-host or
    one-GPU."""
    drv, b, ask, t0 = case
    drv.run(until=t0 + CFG.max_min_runtime + 1.0, start=t0)
    assert held_by(drv.state, b) >= ask
