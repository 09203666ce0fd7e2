"""Pools: several clusters and GPU kinds under one budget tree (core/fleet.py).

Property tests drive random fleets (two or three pools of different sizes, kinds and
billing weights; work asking for one kind, a list, or any, sometimes a cluster) through
:class:`FleetDriver`, which checks every pass pool by pool with
:func:`.helpers.check_pass` and every index (each pool's, and the fleet's one ledger) after
every event. Table-driven cases have known answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from apportion.core import (
    ROOT,
    BudgetTree,
    ClusterState,
    CoreError,
    Decisions,
    Host,
    HostState,
    PolicyConfig,
    Slice,
    WaitReason,
    WorkloadSpec,
    decision_log,
)
from apportion.core.fleet import FleetConfig, FleetState, advice, decide_fleet, pool_name

from .helpers import HOUR, Driver, HostEvent, Job, check_pass, make_tree
from .oracle import check_fleet_indexes
from .strategies import CORE_SETTINGS, MIN_RUNTIMES, budget_trees, host_events, scenarios
from .strategies import jobs as job_streams

CFG = PolicyConfig()
KINDS = ("H100", "B200", "B300")
BILLING = FleetConfig(billing={"H100": 1.0, "B200": 2.2, "B300": 3.0})
FLEET_SETTINGS = settings(CORE_SETTINGS, max_examples=40)


# ---- the driver ---------------------------------------------------------------------------
def split(fleet: FleetState, d: Decisions) -> dict[str, Decisions]:
    """The decisions of one fleet pass, pool by pool (by the hosts they name)."""
    out: dict[str, Decisions] = {}
    for name, pool in fleet.pools.items():
        out[name] = Decisions(
            starts=tuple(s for s in d.starts if fleet.pool_of(s.placement[0].host) == name),
            preemptions=tuple(p for p in d.preemptions if p.workload in pool.running),
            host_changes=tuple(c for c in d.host_changes if c.host in pool.hosts),
            reservations=tuple(r for r in d.reservations if r.hosts[0] in pool.hosts),
            timeouts=tuple(w for w in d.timeouts if w in pool.running),
        )
    return out


def check_fleet_pass(fleet: FleetState, now: float, d: Decisions) -> None:
    """A fleet pass: every gang in one pool its request accepts, nothing started twice, no
    workload admitted (started or given a reservation) in two pools, every preemption for
    work admitted in that pool, and each pool's share of the pass meets every per-pass
    invariant (check_pass)."""
    ids = [s.workload for s in d.starts]
    assert len(ids) == len(set(ids)), f"a workload started twice: {ids}"
    for s in d.starts:
        pools = {fleet.pool_of(sl.host) for sl in s.placement}
        assert len(pools) == 1, f"{s.workload} spans pools {pools}"
        assert pools <= set(fleet.waits_in(s.workload)), f"{s.workload} started outside its pools"
    for r in d.reservations:
        assert len({fleet.pool_of(h) for h in r.hosts}) == 1, f"reservation spans pools: {r}"
    admitted: dict[str, str] = {}
    for name, part in split(fleet, d).items():
        check_pass(fleet.pools[name], now, part)
        mine = {s.workload for s in part.starts} | {r.workload for r in part.reservations}
        for w in mine:
            assert admitted.setdefault(w, name) == name, f"{w} admitted in two pools"
        for p in part.preemptions:
            assert p.by is None or p.by in mine, f"{p.workload} preempted in {name} for {p.by}"


@dataclass
class FleetDriver(Driver):
    """:class:`.helpers.Driver` over a :class:`FleetState` with :func:`decide_fleet`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.pool_of_run: dict[int, str] = {}
        self.health: list[tuple[float, str, bool]] = []  # (time, host, healthy after)

    def _host_event(self, e: HostEvent, now: float) -> None:
        was = self.state.hosts[e.host].state is HostState.HEALTHY
        super()._host_event(e, now)
        healthy = self.state.hosts[e.host].state is HostState.HEALTHY
        if healthy != was:
            self.health.append((now, e.host, healthy))

    def _checked(self, event: str) -> None:
        check_fleet_indexes(self.state, event)  # type: ignore[arg-type]

    def settle(self, now: float) -> int:
        fleet: FleetState = self.state  # type: ignore[assignment]
        for i in range(self.max_rounds):
            before = fleet.fingerprint()
            d = decide_fleet(fleet, now, self.config)
            assert fleet.fingerprint() == before, "decide_fleet changed the fleet"
            check_fleet_pass(fleet, now, d)
            if self.on_pass is not None:
                self.on_pass(self.state, now, d)
            if d.recheck_at is not None:  # a pass is due then, as in the simulator
                self.rechecks.append(d.recheck_at)
            if d.empty():
                self.rounds_at[now] = i
                return i
            self.passes.append((now, d))
            n = len(self.runs)
            self.apply(d, now)
            for k, s in enumerate(d.starts):
                self.pool_of_run[n + k] = fleet.pool_of(s.placement[0].host)
        raise AssertionError(f"no quiet pass at {now} after {self.max_rounds} rounds")


# ---- random fleets ------------------------------------------------------------------------
@dataclass(frozen=True)
class FleetScenario:
    tree: BudgetTree
    pools: tuple[tuple[str, str, tuple[Host, ...]], ...]  # (cluster, kind, hosts)
    jobs: tuple[Job, ...]
    config: FleetConfig
    host_events: tuple[HostEvent, ...] = ()


def make_fleet(sc: FleetScenario) -> FleetState:
    fleet = FleetState(sc.tree, sc.config)
    for cluster, kind, hosts in sc.pools:
        for h in hosts:
            fleet.add_host(h, cluster, kind, 0.0)
    return fleet


@st.composite
def fleets(draw: st.DrawFn, max_jobs: int = 30) -> FleetScenario:
    """Two or three pools (kinds H100/B200/B300 in clusters c1/c2, 1-6 hosts of 4 or 8
    GPUs each), a few drains, failures and repairs, and a workload stream asking for one
    kind, two, or any, sometimes a cluster."""
    tree = draw(budget_trees())
    n = draw(st.integers(2, 3))
    kinds = draw(st.permutations(KINDS))[:n]
    pools = []
    for i, kind in enumerate(kinds):
        size = draw(st.sampled_from([4, 8]))
        hosts = tuple(Host(f"{kind.lower()}-{j}", size) for j in range(draw(st.integers(1, 6))))
        pools.append((f"c{1 + i % 2}", kind, hosts))
    everything = [h for _, _, hs in pools for h in hs]
    stream = draw(job_streams(tree.leaves, everything, max_jobs=max_jobs))
    out = []
    for j in stream:
        ask = draw(st.sampled_from(["any", "one", "two"]))
        kinds_asked: tuple[str, ...] = ()
        if ask == "one":
            kinds_asked = (draw(st.sampled_from(kinds)),)
        elif ask == "two":
            kinds_asked = tuple(draw(st.permutations(kinds))[:2])
        cluster = draw(st.sampled_from(["", "", "", "c1"]))
        spec = replace(j.spec, gpu_kinds=kinds_asked, cluster=cluster)
        out.append(Job(spec, j.duration))
    sc = FleetScenario(tree, tuple(pools), (), BILLING)
    fleet = make_fleet(sc)
    kept = []
    for j in out:
        try:
            fleet.validate(j.spec, CFG)
        except CoreError:
            continue  # asks for what no pool has (e.g. 32 GPUs of a 4-host pool)
        kept.append(j)
    return replace(sc, jobs=tuple(kept), host_events=tuple(draw(host_events(everything))))


def drive(sc: FleetScenario, until: float = 14 * HOUR) -> FleetDriver:
    drv = FleetDriver(make_fleet(sc))  # type: ignore[arg-type]
    drv.add_jobs(sc.jobs)
    drv.add_host_events(sc.host_events)
    drv.run(until=until, start=0.0)
    return drv


@FLEET_SETTINGS
@given(fleets())
def test_every_pass_over_a_random_fleet_keeps_gangs_in_one_pool_and_hosts_within_size(
    sc: FleetScenario,
) -> None:
    """Driven through 14 h, every pass starts each gang on hosts of one pool among those
    its request accepts, never over-commits a host, never preempts protected work, and every
    index (each pool's and the fleet ledger's rates) agrees with the work after every event
    (all checked by FleetDriver as it goes); and the pass is pure (fingerprint unchanged)."""
    drv = drive(sc)
    assert drv.passes or not sc.jobs, "nothing was decided for a non-empty stream"


@FLEET_SETTINGS
@given(fleets())
def test_protected_work_is_never_preempted_in_any_pool(sc: FleetScenario) -> None:
    """No allocated workload is preempted before its minimum runtime, in whichever pool it
    runs (judged on the run each preemption ended)."""
    drv = drive(sc)
    for now, p in drv.preempted:
        spec = next(j.spec for j in sc.jobs if j.spec.id == p.workload)
        ended = [r for r in drv.runs if r.id == p.workload and r.end == now]
        assert ended, f"{p.workload}: no run ended at {now}"
        if spec.allocated:
            assert all(now >= r.start + spec.min_runtime - 1e-6 for r in ended), (p, ended)


@FLEET_SETTINGS
@given(fleets(), st.lists(st.floats(1.0, 30 * HOUR), min_size=1, max_size=3))
def test_billing_weights_conserve_charged_units(sc: FleetScenario, windows: list[float]) -> None:
    """The fleet ledger charges each budget, over any window, exactly the GPU-seconds of
    its allocated runs times the billing weight of the pool each ran in, and as capacity
    the healthy GPU-seconds of every host (drains, failures and repairs included) times its
    pool's weight."""
    drv = drive(sc)
    now = drv.state.time
    runs = drv.close_runs(now)
    weight = {name: pool.billing for name, pool in drv.state.pools.items()}  # type: ignore[attr-defined]
    fleet: FleetState = drv.state  # type: ignore[assignment]
    for w in windows:
        lo = now - w
        want: dict[str, float] = {}
        for i, r in enumerate(runs):
            assert r.end is not None
            if not r.allocated:
                continue
            sec = max(0.0, min(r.end, now) - max(r.start, lo))
            for node in (r.budget, *_ancestors(r.budget)):
                want[node] = want.get(node, 0.0) + sec * r.gpus * weight[drv.pool_of_run[i]]
        for node in [ROOT, *sc.tree.nodes()]:
            got = fleet.ledger.charged(node, now, w, memo=False)
            assert math.isclose(got, want.get(node, 0.0), rel_tol=1e-9, abs_tol=1e-6), node
        cap = 0.0
        for c, k, hosts in sc.pools:
            for h in hosts:
                up, since, seconds = True, 0.0, 0.0
                changes = [(t, up) for t, name, up in drv.health if name == h.name]
                for t, healthy in [*changes, (now, False)]:
                    if up:
                        seconds += max(0.0, t - max(since, lo))
                    up, since = healthy, t
                cap += weight[f"{c}/{k}"] * h.gpus * seconds
        assert math.isclose(fleet.ledger.capacity(now, w), cap, rel_tol=1e-9, abs_tol=1e-6)


def _ancestors(path: str) -> list[str]:
    out = []
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        out.append(path)
    return [*out, ROOT]


@FLEET_SETTINGS
@given(fleets(), st.integers(0, 20))
def test_decide_fleet_is_deterministic_and_leaves_the_fleet_unchanged(
    sc: FleetScenario, at_half_hours: int
) -> None:
    """Two passes over the same fleet give the same decisions, on a fleet built twice from
    the same input too, and neither changes the fleet's fingerprint."""
    until = at_half_hours * 1800.0
    one, two = drive(sc, until), drive(sc, until)
    a, b = one.state, two.state
    before = a.fingerprint()  # type: ignore[attr-defined]
    d1 = decide_fleet(a, until, CFG)  # type: ignore[arg-type]
    d2 = decide_fleet(a, until, CFG)  # type: ignore[arg-type]
    d3 = decide_fleet(b, until, CFG)  # type: ignore[arg-type]
    assert a.fingerprint() == before  # type: ignore[attr-defined]
    assert decision_log(until, d1) == decision_log(until, d2) == decision_log(until, d3)
    assert d1.waiting == d2.waiting == d3.waiting


@FLEET_SETTINGS
@given(scenarios(max_jobs=30), st.sampled_from(KINDS))
def test_a_fleet_of_one_pool_decides_as_the_single_pool_state(sc: object, kind: str) -> None:
    """A fleet with one pool, whatever its billing weight, makes exactly the decisions of
    a plain ClusterState over the same hosts and work, pass by pass."""
    tree, hosts, jobs = sc.tree, sc.hosts, sc.jobs  # type: ignore[attr-defined]
    plain = Driver(ClusterState(tree, hosts))
    plain.add_jobs(jobs)
    plain.run(until=14 * HOUR, start=0.0)
    fleet = FleetState(tree, BILLING)
    for h in hosts:
        fleet.add_host(h, "c1", kind, 0.0)
    drv = FleetDriver(fleet)  # type: ignore[arg-type]
    drv.add_jobs(jobs)
    drv.run(until=14 * HOUR, start=0.0)
    assert [(t, decision_log(t, d)) for t, d in drv.passes] == [
        (t, decision_log(t, d)) for t, d in plain.passes
    ]


# ---- the share guarantee, per pool ----------------------------------------------------
LONG = 1000 * HOUR


@st.composite
def pool_guarantee_cases(draw: st.DrawFn) -> tuple[FleetDriver, str, str, int, float]:
    """Two pools (H100 in c1, B200 in c2), both full of other budgets' one-GPU work
    (allocated, started over the last ``t0`` seconds, or unallocated), more of theirs
    queued for either kind or any, and budget B asking at ``t0`` for ``ask`` one-GPU
    workloads of one pool's kind, no more than its share of that pool. Returns the driver,
    B, the pool, the ask and t0."""
    tree = draw(budget_trees())
    b = draw(st.sampled_from(tree.leaves))
    others = [leaf for leaf in tree.leaves if leaf != b]
    assume(others)
    sizes = {"H100": draw(st.integers(2, 8)), "B200": draw(st.integers(2, 8))}
    fleet = FleetState(tree, BILLING)
    for kind, cluster in (("H100", "c1"), ("B200", "c2")):
        for i in range(sizes[kind]):
            fleet.add_host(Host(f"{kind.lower()}-{i}", 8), cluster, kind, 0.0)
    kind = draw(st.sampled_from(["H100", "B200"]))
    pool = "c1/H100" if kind == "H100" else "c2/B200"
    entitled = math.floor(tree.share(b) * 8 * sizes[kind] + 1e-9)
    assume(entitled >= 1)
    t0 = float(draw(st.integers(1, 48)) * 1800)
    n = 0

    def other(at: float, kinds: tuple[str, ...]) -> WorkloadSpec:
        nonlocal n
        n += 1
        unallocated = draw(st.integers(0, 3)) == 0
        return WorkloadSpec(f"o{n:03d}", draw(st.sampled_from(others)), 1,
                            0.0 if unallocated else draw(MIN_RUNTIMES), at,
                            resumable=draw(st.booleans()), gpu_kinds=kinds)

    fill = []
    for name, host in sorted(fleet.hosts.items()):
        k = fleet.where(fleet.pool_of(name))[1]
        for _ in range(host.gpus):
            at = float(draw(st.integers(0, int(t0))))
            fill.append((at, other(at, (k,)), name))
    fill.sort(key=lambda f: (f[0], f[1].id))
    for at, spec, host in fill:
        fleet.submit(spec, at)
        fleet.start(spec.id, (Slice(host, 1),), at)
    drv = FleetDriver(fleet)  # type: ignore[arg-type]
    queued = [Job(other(t0, draw(st.sampled_from([(), ("H100",), ("B200",), ("B200", "H100")]))),
                  LONG) for _ in range(draw(st.integers(0, 12)))]
    ask = draw(st.integers(1, entitled))
    mine = [Job(WorkloadSpec(f"b{i:02d}", b, 1, draw(MIN_RUNTIMES), t0,
                             resumable=draw(st.booleans()), gpu_kinds=(kind,)), LONG)
            for i in range(ask)]
    drv.add_jobs(queued + mine)
    return drv, b, pool, ask, t0


@CORE_SETTINGS
@given(pool_guarantee_cases())
def test_a_budget_asking_no_more_than_its_share_of_a_pool_gets_it_there(
    case: tuple[FleetDriver, str, str, int, float],
) -> None:
    """A budget asking for no more than its share of one pool (one-GPU work of that kind)
    holds all of it in that pool by ``max_min_runtime`` after asking, whatever the other
    budgets run in either pool and queue for either kind."""
    drv, b, pool, ask, t0 = case
    drv.run(until=t0 + CFG.max_min_runtime + 1.0, start=t0)
    state = drv.state.pools[pool]  # type: ignore[attr-defined]
    assert state.held.get(b, 0) >= ask


# ---- table-driven cases -------------------------------------------------------------------
def two_pools(tree: BudgetTree, h100: int = 1, b200: int = 1,
              config: FleetConfig = BILLING) -> FleetState:
    fleet = FleetState(tree, config)
    for i in range(h100):
        fleet.add_host(Host(f"h100-{i}", 8), "c1", "H100", 0.0)
    for i in range(b200):
        fleet.add_host(Host(f"b200-{i}", 8), "c2", "B200", 0.0)
    return fleet


def run_on(fleet: FleetState, spec: WorkloadSpec, t: float, host: str, gpus: int) -> None:
    fleet.submit(spec, t)
    fleet.start(spec.id, (Slice(host, gpus),), t)


def started(d: Decisions) -> dict[str, str]:
    return {s.workload: s.placement[0].host for s in d.starts}


def test_a_team_under_its_share_fleet_wide_goes_first_in_the_pool_with_room() -> None:
    """x used H100 heavily, y used some B200 (less in billed units than x's H100 use): when
    both ask for the one free B200 host, y gets it, because the order is fleet-wide (by B200
    usage alone x, which never used B200, would be first)."""
    fleet = two_pools(make_tree("x", "y"), h100=1, b200=1)
    run_on(fleet, WorkloadSpec("x-old", "x", 8, HOUR, 0.0, gpu_kinds=("H100",)), 0.0,
           "h100-0", 8)
    run_on(fleet, WorkloadSpec("y-old", "y", 2, HOUR, 0.0, gpu_kinds=("B200",)), 0.0,
           "b200-0", 2)
    fleet.finish("y-old", 3 * HOUR)  # y: 2 x 3 h x 2.2 = 13.2 B200 units; x: 8 x 10 h
    now = 10 * HOUR
    fleet.advance(now)
    for w in ("x", "y"):
        fleet.submit(WorkloadSpec(f"{w}-new", w, 8, HOUR, now, gpu_kinds=("B200",)), now)
    d = decide_fleet(fleet, now, CFG)
    assert started(d) == {"y-new": "b200-0"}
    assert d.order[:2] == ("y-new", "x-new")


def test_work_accepting_two_kinds_goes_to_the_one_that_starts_it() -> None:
    """A request for H100 or B200 (H100 first) starts on B200 when the H100 pool is full
    of protected work, and on H100 when both have room."""
    fleet = two_pools(make_tree("x", "y"))
    run_on(fleet, WorkloadSpec("x-h", "x", 8, 4 * HOUR, 0.0, gpu_kinds=("H100",)), 0.0,
           "h100-0", 8)
    fleet.submit(WorkloadSpec("y-1", "y", 4, HOUR, 60.0, gpu_kinds=("H100", "B200")), 60.0)
    d = decide_fleet(fleet, 60.0, CFG)
    assert started(d) == {"y-1": "b200-0"}
    assert not d.preemptions

    both = two_pools(make_tree("x", "y"))
    both.submit(WorkloadSpec("y-1", "y", 4, HOUR, 0.0, gpu_kinds=("H100", "B200")), 0.0)
    assert started(decide_fleet(both, 0.0, CFG)) == {"y-1": "h100-0"}


def test_work_accepting_two_kinds_starts_where_it_fits_rather_than_preempt() -> None:
    """When the pass over its first kind would preempt for it and the other pool has room,
    it starts in the other pool and nothing is preempted."""
    fleet = two_pools(make_tree("x", "y"))
    run_on(fleet, WorkloadSpec("x-h", "x", 8, HOUR, 0.0, gpu_kinds=("H100",)), 0.0,
           "h100-0", 8)  # past its minimum runtime at 2 h: y could take it back
    now = 2 * HOUR
    fleet.advance(now)
    fleet.submit(WorkloadSpec("y-1", "y", 4, HOUR, now, gpu_kinds=("H100", "B200")), now)
    h100_only = decide_fleet(fleet, now, CFG)
    assert started(h100_only) == {"y-1": "b200-0"} and not h100_only.preemptions


@pytest.mark.parametrize(("asks_at", "reason"), [
    (52 * 60.0, WaitReason.WAITING_FOR_CHECKPOINT),  # y-old's checkpoint 8 min away
    (40 * 60.0, WaitReason.WAITING_FOR_PREEMPTION),  # 20 min away: preempted now
])
def test_work_given_room_by_a_preemption_has_its_wait_reason_with_two_pools(
        asks_at: float, reason: WaitReason) -> None:
    """y holds the one B200 host with resumable work past its minimum runtime, checkpointing
    every 30 min; x asks for 4 B200 GPUs (its share), which rebalancing gives it. With an
    H100 pool beside, x waits for y's checkpoint, or for y to stop, as the pass over the
    B200 pool alone says (merging the pools' decisions dropped the reason of work given
    room without starting: the queue said the pass had not reached it)."""
    def decided(fleet: FleetState) -> Decisions:
        run_on(fleet, WorkloadSpec("y-old", "y", 8, 30 * 60.0, 0.0, gpu_kinds=("B200",),
                                   resumable=True, checkpoint_interval=30 * 60.0),
               0.0, "b200-0", 8)
        fleet.advance(asks_at)
        fleet.submit(WorkloadSpec("x-new", "x", 4, HOUR, asks_at, gpu_kinds=("B200",)),
                     asks_at)
        return decide_fleet(fleet, asks_at, CFG)

    alone = decided(two_pools(make_tree("x", "y"), h100=0))
    both = decided(two_pools(make_tree("x", "y")))
    assert alone.waiting == {"x-new": reason}
    assert both.waiting == {"x-new": reason}
    assert decision_log(asks_at, both) == decision_log(asks_at, alone)


def test_a_per_pool_weight_override_sets_the_share_guaranteed_in_that_pool() -> None:
    """x and y weigh the same, but in the B200 pool x weighs 3: with the pool full of y's
    work past its minimum runtime, x asking 6 of its 8 GPUs gets all 6 there (its pool share
    is 3/4; without the override, the guarantee covers 4 and the rest waits for the
    fair-share rule)."""
    tree = make_tree("x", "y")
    cfg = FleetConfig(billing=BILLING.billing, overrides={"c2/B200": {"x": 3.0}})
    got = {}
    for name, config in (("override", cfg), ("none", BILLING)):
        fleet = two_pools(tree, config=config)
        for i in range(8):
            run_on(fleet, WorkloadSpec(f"y{i}", "y", 1, HOUR, 0.0, gpu_kinds=("B200",)), 0.0,
                   "b200-0", 1)
        # y is also far under its share fleet-wide, so the fair-share rule spares it
        now = 2 * HOUR
        fleet.advance(now)
        for i in range(6):
            fleet.submit(WorkloadSpec(f"x{i}", "x", 1, HOUR, now, gpu_kinds=("B200",)), now)
        d = decide_fleet(fleet, now, PolicyConfig(rebalance_margin=100.0))
        got[name] = len([p for p in d.preemptions if p.by and p.by.startswith("x")])
    assert got == {"override": 6, "none": 4}


def test_a_budget_weighted_zero_in_a_pool_never_waits_there() -> None:
    """An override of weight 0 takes the budget out of that pool: its work asking for any
    kind waits only in the others, and work asking only for that pool is refused, naming
    the field."""
    cfg = FleetConfig(overrides={"c1/H100": {"x": 0.0}})
    fleet = two_pools(make_tree("x", "y"), config=cfg)
    fleet.submit(WorkloadSpec("x-any", "x", 1, HOUR, 0.0), 0.0)
    assert fleet.waits_in("x-any") == ("c2/B200",)
    with pytest.raises(CoreError, match=r"gpu_kinds: no pool of H100 funds budget x"):
        fleet.validate(WorkloadSpec("x-h", "x", 1, HOUR, 0.0, gpu_kinds=("H100",)), CFG)


def test_advice_names_the_kind_that_would_start_the_work_now() -> None:
    """Work waiting for B200 (its pool full of protected work) is told that H100 would
    start it now, with the flag to ask for it."""
    fleet = two_pools(make_tree("x", "y"))
    run_on(fleet, WorkloadSpec("x-b", "x", 8, 4 * HOUR, 0.0, gpu_kinds=("B200",)), 0.0,
           "b200-0", 8)
    fleet.submit(WorkloadSpec("y-1", "y", 4, HOUR, 60.0, gpu_kinds=("B200",)), 60.0)
    before = fleet.fingerprint()
    assert not decide_fleet(fleet, 60.0, CFG).starts
    assert advice(fleet, 60.0, CFG, "y-1") == [
        "waiting for B200 GPUs; H100 in c1 would start it now (--gpu-kind H100)"
    ]
    assert fleet.fingerprint() == before



def test_advice_names_only_pools_the_host_list_leaves_hosts_in() -> None:
    """With the one B200 host full, work asking for B200 on a host list is advised only the
    pools its list leaves hosts in (it was advised H100 in east and in west with every H100
    host excluded, and west with a nodelist of eb1 and eh1), and the request changed as
    each line says is accepted with its host list; without a list both are named."""
    fleet = FleetState(make_tree("x", "y"))
    for name, cluster, kind, gpus in (("eh1", "east", "H100", 8), ("eh2", "east", "H100", 8),
                                      ("eb1", "east", "B200", 8), ("wh1", "west", "H100", 4)):
        fleet.add_host(Host(name, gpus), cluster, kind, 0.0)
    run_on(fleet, WorkloadSpec("x-b", "x", 8, 4 * HOUR, 0.0, gpu_kinds=("B200",)), 0.0,
           "eb1", 8)
    east = "waiting for B200 GPUs; H100 in east would start it now (--gpu-kind H100)"
    west = "waiting for B200 GPUs; H100 in west would start it now (--gpu-kind H100)"
    for hosts, expected in (
        (("eb1",), []),  # --exclude eh1,eh2,wh1
        (("eb1", "eh1"), [east]),  # --nodelist eb1,eh1
        ((), [east, west]),
    ):
        spec = WorkloadSpec("y-1", "y", 4, HOUR, 60.0, gpu_kinds=("B200",), hosts=hosts)
        fleet.submit(spec, 60.0)
        assert advice(fleet, 60.0, CFG, "y-1") == expected, hosts
        fleet.unqueue("y-1")
        for line in expected:
            cluster = line.split(" in ")[1].split()[0]
            followed = replace(spec, gpu_kinds=("H100",))
            fleet.validate(followed, CFG)
            assert fleet.accepts(followed, pool_name(cluster, "H100"))

@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("A100",)),
         r"workload w: gpu_kinds: unknown GPU kind 'A100' \(the fleet has B200, H100\)"),
        (WorkloadSpec("w", "x", 1, HOUR, 0.0, cluster="c9"),
         r"workload w: cluster: unknown cluster 'c9' \(the fleet has c1, c2\)"),
        (WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("B200",), cluster="c1"),
         r"workload w: cluster: cluster c1 has no B200 GPUs \(the fleet has them in c2\)"),
        (WorkloadSpec("w", "x", 24, HOUR, 0.0, gpu_kinds=("B200",)),
         r"workload w: gpus: 24 is more than any pool it may use holds \(c2/B200: 8\)"),
    ],
    ids=["unknown kind", "unknown cluster", "kind not in that cluster", "too large"],
)
def test_work_no_pool_can_run_is_refused_naming_the_field(spec: WorkloadSpec,
                                                          message: str) -> None:
    """validate refuses, with the field and the choices, work no pool of the fleet can run:
    a kind the cluster asked for lacks is said so of the cluster (it said no pool of B200 in
    c1 funds the budget), and too many GPUs for the one pool of its kind names that pool
    (it said "the cluster's 8")."""
    with pytest.raises(CoreError, match=message):
        two_pools(make_tree("x", "y")).validate(spec, CFG)


def test_too_many_gpus_for_every_pool_names_what_each_holds() -> None:
    """Work larger than each of several pools is refused naming each pool's GPUs (it named
    the first pool's by name alone, 8, though 16 fit in another), and ``any pool it may
    use`` when its kinds leave some out; one that fits the larger pool is accepted; work
    that may use one pool names that pool (it said "the cluster's 8")."""
    fleet = two_pools(make_tree("x", "y"), h100=1, b200=2)
    fleet.add_host(Host("b300-0", 4), "c3", "B300", 0.0)
    fleet.validate(WorkloadSpec("fits", "x", 16, HOUR, 0.0), CFG)
    for spec, message in (
        (WorkloadSpec("w", "x", 17, HOUR, 0.0),
         "workload w: gpus: 17 is more than any pool holds (c1/H100: 8, c2/B200: 16, "
         "c3/B300: 4)"),
        (WorkloadSpec("w", "x", 17, HOUR, 0.0, gpu_kinds=("B300", "H100")),
         "workload w: gpus: 17 is more than any pool it may use holds (c1/H100: 8, "
         "c3/B300: 4)"),
        (WorkloadSpec("w", "x", 17, HOUR, 0.0, gpu_kinds=("H100",)),
         "workload w: gpus: 17 is more than any pool it may use holds (c1/H100: 8)"),
    ):
        with pytest.raises(CoreError) as refused:
            fleet.validate(spec, CFG)
        assert str(refused.value) == message


def test_a_host_list_that_rules_out_every_pool_is_named_as_the_cause() -> None:
    """Work whose host list holds no GPU of its kind (or cluster) is refused naming the
    hosts and what they lack, and one whose hosts are only in pools that do not fund its
    budget names those pools (both said no pool of the kind funded the budget "on the
    hosts it may use"); without a host list the refusal is unchanged."""
    cfg = FleetConfig(overrides={"c1/H100": {"x": 0.0}})
    fleet = two_pools(make_tree("x", "y"), config=cfg)
    fleet.add_host(Host("h100-east", 8), "c3", "H100", 0.0)
    fleet.add_host(Host("b300-0", 4), "c3", "B300", 0.0)
    for spec, message in (
        (WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("H100",), hosts=("b200-0",)),
         "workload w: hosts: the hosts it may use (b200-0) have no H100 GPUs"),
        (WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("H100", "B300"),
                      hosts=("b200-0",)),
         "workload w: hosts: the hosts it may use (b200-0) have no H100 or B300 GPUs"),
        (WorkloadSpec("w", "x", 1, HOUR, 0.0, cluster="c3", hosts=("b200-0",)),
         "workload w: hosts: the hosts it may use (b200-0) have no GPUs in cluster c3"),
        (WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("H100",), hosts=("h100-0",)),
         "workload w: hosts: the pools of the hosts it may use (c1/H100) do not fund "
         "budget x"),
        (WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("H100",), cluster="c3",
                      hosts=("h100-0",)),
         "workload w: hosts: the hosts it may use (h100-0) have no H100 GPUs in cluster c3"),
    ):
        with pytest.raises(CoreError) as refused:
            fleet.validate(spec, CFG)
        assert str(refused.value) == message


def test_a_cluster_that_rules_out_every_pool_is_named_as_the_cause() -> None:
    """x is not funded in c1 (weight 0): asking for cluster c1 is refused naming the
    cluster, with or without a kind, as a kind funded only elsewhere (it named gpu_kinds,
    which were not sent); a kind the cluster lacks is said so of the cluster (it said no
    pool of it there funds the budget); kinds funding the budget nowhere name gpu_kinds,
    and a budget funded in no pool at all names the budget."""
    cfg = FleetConfig(overrides={"c1/H100": {"x": 0.0}, "c1/B300": {"x": 0.0}})
    fleet = two_pools(make_tree("x", "y"), config=cfg)
    fleet.add_host(Host("b300-0", 4), "c1", "B300", 0.0)
    nowhere = two_pools(make_tree("x", "y"),
                        config=FleetConfig(overrides={"c1/H100": {"x": 0.0},
                                                      "c2/B200": {"x": 0.0}}))
    for f, spec, message in (
        (fleet, WorkloadSpec("w", "x", 1, HOUR, 0.0, cluster="c1"),
         "workload w: cluster: no pool of any kind in cluster c1 funds budget x"),
        (fleet, WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("H100", "B200"), cluster="c1"),
         "workload w: cluster: no pool of H100,B200 in cluster c1 funds budget x"),
        (fleet, WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("B200",), cluster="c1"),
         "workload w: cluster: cluster c1 has no B200 GPUs (the fleet has them in c2)"),
        (fleet, WorkloadSpec("w", "x", 1, HOUR, 0.0, gpu_kinds=("H100", "B300")),
         "workload w: gpu_kinds: no pool of H100,B300 funds budget x"),
        (nowhere, WorkloadSpec("w", "x", 1, HOUR, 0.0),
         "workload w: budget: no pool of any kind funds budget x"),
    ):
        with pytest.raises(CoreError) as refused:
            f.validate(spec, CFG)
        assert str(refused.value) == message


def test_a_gang_spanning_pools_is_refused_at_start() -> None:
    """FleetState.start refuses a placement on hosts of two pools, and work larger than
    every pool it accepts (16 GPUs of two one-host pools) is accepted by none."""
    fleet = two_pools(make_tree("x", "y"))
    fleet.submit(WorkloadSpec("w", "x", 8, HOUR, 0.0), 0.0)
    with pytest.raises(CoreError, match="spans pools c1/H100, c2/B200"):
        fleet.start("w", (Slice("h100-0", 4), Slice("b200-0", 4)), 0.0)
    assert fleet.pools_for(WorkloadSpec("big", "x", 16, HOUR, 0.0)) == ()



@FLEET_SETTINGS
@given(fleets())
def test_every_fleet_pass_decides_as_the_reference_pass(sc: FleetScenario) -> None:
    """Driven through 14 h, every fleet pass makes the decisions of the reference pass with
    every shortcut off, in every pool (starts, preemptions, host changes, timeouts and
    reservations); of the work left waiting it may leave out work a pass with no GPU left
    never looks at, and agrees on the rest (as tests/core/test_oracles.py holds one pool
    to)."""
    reference = PolicyConfig(shortcuts=False)
    seen = []

    def compare(state: object, now: float, d: Decisions) -> None:
        ref = decide_fleet(state, now, reference)  # type: ignore[arg-type]
        assert decision_log(now, d) == decision_log(now, ref)
        assert d.reservations == ref.reservations
        assert d.waiting.items() <= ref.waiting.items()
        assert set(d.order) <= set(ref.order)
        seen.append(now)

    drv = FleetDriver(make_fleet(sc), on_pass=compare)  # type: ignore[arg-type]
    drv.add_jobs(sc.jobs)
    drv.add_host_events(sc.host_events)
    drv.run(until=14 * HOUR, start=0.0)
    assert seen
