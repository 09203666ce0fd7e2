"""The two oracles later policy work is checked by, and proof that each can fail.

* The **index oracle** (:mod:`.oracle`): every index of ``ClusterState`` rebuilt from its
  hosts, running and pending work, compared after every event of every driven test (the
  test driver runs it) and of the simulator replays here.
* The **reference pass**: ``decide`` with ``PolicyConfig(shortcuts=False)`` tries every
  request with a full search over every host and reads every usage ratio afresh. Every
  skip rule of the fast pass (failed-size and charge thresholds, hopeless queues, the
  rebalance bound, searches within reach, the free-GPU bounds, the answers it keeps) is
  argued to change no decision; here the two are compared decision by decision on every
  pass of random replays, of the seed scenario's first days and of an ITP trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.core import (
    ClusterState,
    Decisions,
    HostState,
    PolicyConfig,
    decide,
)
from apportion.core.policy import Pass
from apportion.sim.engine import Engine, SimConfig
from apportion.sim.model import Scenario as SimScenario
from apportion.sim.scenarios import seed_scenario
from apportion.sim.traces import load_trace

from .helpers import HOUR, Driver, make_hosts, make_spec, make_state, make_tree, run_on
from .oracle import CACHE_COVERED, COVERED, check_indexes, index_errors, state_attributes
from .strategies import (
    DRIVEN_SETTINGS,
    Scenario,
    budget_trees,
    clusters,
    contended_scenarios,
    host_events,
    jobs,
    scenarios,
)

ITP = Path(__file__).parents[1] / "sim" / "data" / "itp" / "cluster10.csv"


def reference(config: PolicyConfig) -> PolicyConfig:
    return dataclasses.replace(config, shortcuts=False)


def differences(fast: Decisions, ref: Decisions) -> list[str]:
    """What the fast pass decided differently from the reference pass (empty: the same).
    The decisions must be equal; of what they say about waiting work, the fast pass may
    leave out work a pass with no GPU left never looks at (it stops there), and must agree
    on the rest."""
    out = [
        f"{name}: fast {getattr(fast, name)!r}, reference {getattr(ref, name)!r}"
        for name in ("starts", "preemptions", "host_changes", "reservations")
        if getattr(fast, name) != getattr(ref, name)
    ]
    if not set(fast.order) <= set(ref.order):
        out.append(f"order: fast considered {sorted(set(fast.order) - set(ref.order))} only")
    if not fast.waiting.items() <= ref.waiting.items():
        out.append(f"waiting: fast {sorted(fast.waiting.items() - ref.waiting.items())}, "
                   f"reference {sorted(ref.waiting.items() - fast.waiting.items())}")
    return out


class Compared:
    """A policy that decides with the fast pass and checks it against the reference pass on
    every call, and that neither changed anything but the state's derived cache (and, told
    of every change by the simulator, runs the index oracle on it)."""

    def __init__(self, reasons: bool = False) -> None:
        self.reasons = reasons
        self.passes = 0
        self.deciding = 0  # passes that decided something
        self.preempting = 0  # passes that preempted for someone
        self.checked_events = 0

    def __call__(self, state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        check_indexes(state, f"the events before the pass at {now}")
        before = state.fingerprint()
        fast = decide(state, now, config, reasons=self.reasons)
        ref = decide(state, now, reference(config), reasons=self.reasons)
        assert state.fingerprint() == before, f"a pass at {now} wrote its input"
        diff = differences(fast, ref)
        assert not diff, f"pass at {now}: " + "; ".join(diff)
        # the answers the state kept from earlier passes against ones worked out afresh:
        # the same pass, to the last waiting reason (a stale kept answer shows here even
        # where the reference pass would decide the same)
        state.forget_derived()
        fresh = decide(state, now, config, reasons=self.reasons)
        assert fresh == fast, f"pass at {now}: kept answers decided otherwise than fresh ones"
        self.passes += 1
        self.deciding += not fast.empty()
        self.preempting += any(p.by is not None for p in fast.preemptions)
        return fast

    def observe(self, kind: str, name: str, state: ClusterState) -> None:
        check_indexes(state, f"{kind} {name} at {state.time}")
        self.checked_events += 1


def compare_on_replay(sc: Scenario, config: PolicyConfig | None = None) -> Compared:
    both = Compared(reasons=True)
    drv = Driver(make_state(sc.tree, sc.hosts), config=config or PolicyConfig(), policy=both)
    drv.add_jobs(sc.jobs)
    drv.add_host_events(sc.host_events)
    drv.run(until=14 * HOUR, start=0.0)
    return both


@st.composite
def crowded_scenarios(draw: st.DrawFn) -> Scenario:
    """Few hosts of mixed or equal sizes, many workloads, and host failures and drains: where
    every shortcut is taken (queues go hopeless, bounds fall short, searches fail)."""
    tree = draw(budget_trees())
    hosts = draw(clusters(min_hosts=2, max_hosts=5, uniform=draw(st.booleans())))
    return Scenario(tree, hosts, draw(jobs(tree.leaves, hosts, max_jobs=40)),
                    draw(host_events(hosts, 14 * HOUR)))


# ---- the reference pass ----------------------------------------------------------------------
# more examples than the other driven tests: these replays are what keeps every skip rule true
REFERENCE_SETTINGS = settings(DRIVEN_SETTINGS, max_examples=300)


@REFERENCE_SETTINGS
@given(scenarios(limits=True))
def test_reference_pass_decides_as_the_fast_one_on_random_replays(sc: Scenario) -> None:
    """On every pass of random replays (host failures and drains, time limits and work
    limited to some hosts included), the pass with every shortcut off decides exactly what
    the fast pass decides, and says the same about the work it leaves waiting."""
    assert compare_on_replay(sc).passes > 0


@REFERENCE_SETTINGS
@given(st.one_of(contended_scenarios(), crowded_scenarios()))
def test_reference_pass_decides_as_the_fast_one_on_crowded_clusters(sc: Scenario) -> None:
    """The same on small, over-asked clusters, where the fast pass skips the most."""
    assert compare_on_replay(sc).passes > 0


@REFERENCE_SETTINGS
@given(st.one_of(contended_scenarios(), crowded_scenarios()))
def test_reference_pass_decides_as_the_fast_one_with_reservations(sc: Scenario) -> None:
    """The same with two reservations of whole hosts allowed at once: the hosts they
    withhold and the backfill around them change no skip rule's answer."""
    assert compare_on_replay(sc, PolicyConfig(reservations=2)).passes > 0


@REFERENCE_SETTINGS
@given(contended_scenarios(), st.integers(2, 28), st.data())
def test_reference_pass_decides_as_the_fast_one_on_bursts_of_many_lengths(
    sc: Scenario, at_half_hours: int, data: st.DataObject
) -> None:
    """After a random history on a small cluster, a burst of requests of every size and
    minimum runtime from two budgets: the single pass (with reasons, and without) decides as
    the reference pass. Many failed rebalances of one budget and of mixed charges are where
    the failed-size and charge thresholds skip the most."""
    drv = Driver(make_state(sc.tree, sc.hosts))
    drv.add_jobs(sc.jobs)
    drv.run(until=at_half_hours * 1800.0, start=0.0)
    state, now = drv.state, drv.state.time
    budgets = data.draw(st.lists(st.sampled_from(sc.tree.leaves), min_size=1, max_size=2))
    largest = max(h.gpus for h in sc.hosts)
    n = data.draw(st.integers(4, 24))
    for i in range(n):
        gpus = data.draw(st.sampled_from([1, 2, largest // 2 or 1, largest, 2 * largest]))
        mrt = data.draw(st.sampled_from([60.0, 900.0, HOUR, 3 * HOUR, 8 * HOUR]))
        state.submit(make_spec(f"burst{i:02d}", budgets[i % len(budgets)], gpus, mrt, now), now)
    cfg = PolicyConfig()
    for reasons in (True, False):
        fast = decide(state, now, cfg, reasons=reasons)
        ref = decide(state, now, reference(cfg), reasons=reasons)
        assert differences(fast, ref) == []


@REFERENCE_SETTINGS
@given(
    st.integers(1, 24),
    st.integers(0, 4),
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from([60.0, 900.0, HOUR, 4 * HOUR,
                                                           8 * HOUR])), min_size=2, max_size=8),
)
def test_reference_pass_decides_as_the_fast_one_where_the_charge_decides(
    hours: int, extra: int, asks: list[tuple[int, float]]
) -> None:
    """Budgets a, b, c on three 4-GPU hosts: for ``hours`` a has run 4 one-GPU jobs and b
    4 + ``extra`` (so b is over its share and has used more), c nothing. Then a asks, in
    this order, for the ``asks`` (GPUs, minimum runtime): whether the fair-share rule lets
    b give way depends on each request's admission charge, so after a long request fails a
    shorter one may still succeed. The pass, with its failed-rebalance charge threshold,
    decides as the reference pass."""
    st_ = make_state(make_tree("a", "b", "c"), make_hosts(4, 4, 4))
    placed = [("a", "h0")] * 4 + [("b", "h1")] * 4 + [("b", "h2")] * extra
    for i, (budget, host) in enumerate(placed):
        run_on(st_, make_spec(f"{budget}{i}", budget, 1, 600.0), 0.0, (host, 1))
    now = hours * HOUR
    for i, (gpus, mrt) in enumerate(asks):
        st_.submit(make_spec(f"ask{i}", "a", gpus, mrt, now - len(asks) + i), now)
    cfg = PolicyConfig()
    for reasons in (True, False):
        fast = decide(st_, now, cfg, reasons=reasons)
        ref = decide(st_, now, reference(cfg), reasons=reasons)
        assert differences(fast, ref) == []


def run_compared(scenario: SimScenario) -> Compared:
    both = Compared(reasons=False)  # as the simulator's fairshare policy calls it
    Engine(scenario, both, PolicyConfig(), sim=SimConfig()).run()
    return both


def test_reference_pass_and_index_oracle_on_the_seed_scenario() -> None:
    """The first 4 days of the seed scenario (256 GPUs: contended from the first hours, with
    host failures and drains): every pass of the fast pass is the reference pass's, and
    every index of the state agrees with the work after every event the engine reports."""
    both = run_compared(seed_scenario(days=4, size=256))
    # 1,625 passes, 853 deciding, 224 preempting for someone, 2,993 events
    assert both.preempting >= 200 and both.checked_events >= 2900, vars(both)


def test_reference_pass_and_index_oracle_on_an_itp_trace() -> None:
    """The same over the ITP trace cluster10.csv (260 jobs of 1-16 GPUs over 33 days),
    on a cluster of 3 hosts of 8 GPUs, with 4 budgets and a fifth of the work unallocated."""
    trace = load_trace(ITP, format="itp", budgets=4, unallocated_fraction=0.2, rebase=True)
    last = max(j.spec.submit_time for j in trace.jobs)
    sc = SimScenario("itp", trace.tree, tuple(make_hosts(8, 8, 8)), trace.jobs,
                     days=last / 86400.0 + 1)
    both = run_compared(sc)
    # 1,539 passes, 321 deciding, 37 preempting for someone
    assert both.preempting >= 30, vars(both)


class _Past(Exception):
    """The replay has gone past the instant a test looks at."""


class ComparedAt:
    """The fast pass alone, and at one instant both passes as :class:`Compared` does; each
    pass there kept for the test to read. Past the instant it stops the replay (``_Past``)."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.passes: list[Decisions] = []

    def __call__(self, state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        if now > self.at:
            raise _Past
        fast = decide(state, now, config, reasons=False)
        if now == self.at:
            ref = decide(state, now, reference(config), reasons=False)
            diff = differences(fast, ref)
            assert not diff, f"pass at {now}: " + "; ".join(diff)
            self.passes.append(fast)
        return fast


def test_a_failed_rebalance_is_tried_again_once_an_admission_brings_its_side_within_share(
) -> None:
    """The seed scenario at 2,193,413.301 s (day 25): in one pass, a 32-GPU request of
    ``vlm/ocr/u085`` fails to rebalance (no side gives to it: its side is over its share at
    every level), then an 8-GPU request of the same budget preempts a 32-GPU run of its
    sibling ``u088``, which brings ``vlm/ocr`` and ``vlm`` within their shares; the
    budget's 16-GPU request ``train-14106`` then rebalances under the guarantee rule. The
    fast pass must try it (a failure recorded before an admission says nothing after it)
    and decide every pass of that instant as the reference pass does. Replayed without the
    debug lane: the case was found on that run, and the lane's earlier starts change which
    runs are there by day 25; and without the victim size bound, which spares the 32-GPU
    run (four times the 8-GPU request)."""
    at = 2_193_413.301
    policy = ComparedAt(at)
    cfg = PolicyConfig(debug_lane=False, victim_max_factor=0)
    with pytest.raises(_Past):
        Engine(seed_scenario(), policy, cfg, sim=SimConfig()).run()
    by = {(p.workload, p.by) for d in policy.passes for p in d.preemptions}
    assert {("train-13979", "single-13742"), ("single-14076", "train-14106"),
            ("train-14068", "train-14106")} <= by, by


def test_first_over_along_a_path_is_the_fewest_gpus_over_the_share_at_every_level(
) -> None:
    """The largest ``RebalanceRules.first_over`` over a leaf's path, against trying every
    request size with the guarantee rule's own test at each level of it: for each leaf of a replayed
    state, with the GPUs held moved so that each node is under, at and over its share (the
    boundary of the floating-point test), every size from it up leaves the side over its
    share at every level, and the size below it does not."""
    st = replayed()
    cfg = PolicyConfig()
    checked = 0
    for leaf in st.tree.leaves:
        for moved in range(-6, 7):
            rules = Pass(st, 1000.0, cfg).rules
            for node in rules.tree.lineage(leaf):
                rules.add_held(node, moved)

            def over_everywhere(gpus: int, rules: Any = rules, leaf: str = leaf) -> bool:
                spec = make_spec("probe", leaf, gpus, HOUR)
                return not any(rules._within_share(spec, rules.figures(node))
                               for node in rules.tree.lineage(leaf))

            least = max(rules.first_over(node) for node in rules.tree.lineage(leaf))
            assert all(over_everywhere(g) for g in range(least, least + 40)), (leaf, moved)
            assert least == 1 or not over_everywhere(least - 1), (leaf, moved, least)
            checked += 1
    assert checked == 3 * 13


class SparedSidesChecked:
    """The fast pass as a policy that first judges, for the first pending request of every
    budget and every level of its path, each sibling that ``RebalanceRules.spares_all``
    says gives nothing: one by one, as ``Pass.rebalance_bound`` would."""

    def __init__(self) -> None:
        self.judged = 0  # (request, level) pairs asked
        self.spared = 0  # of them, answered "spares all"
        self.sides = 0  # siblings holding victims judged one by one where it said so

    def __call__(self, state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        p = Pass(state, now, config, reasons=False)
        victims, tree = p.victims(), state.tree
        for queue in state.queues.values():
            if not queue:
                continue
            spec = state.pending[queue[0][1]].spec
            for mine in tree.lineage(spec.budget):
                parent = tree.parent_of(mine)
                self.judged += 1
                side = p.rules.figures(mine)
                if not p.rules.spares_all(spec, side, parent, victims.gpus):
                    continue
                self.spared += 1
                for other in p.rules.over_children(parent):
                    theirs = other.name
                    if theirs == mine or not victims.gpus.get(theirs, 0):
                        continue
                    self.sides += 1
                    where = f"at {now}: {spec.id} ({mine}) from {theirs}"
                    assert p.rules.limit(spec, side, other) < victims.smallest(theirs), where
                    assert p.rules.charge_below(side, other) <= 0.0, where
        return decide(state, now, config, reasons=False)


def test_a_level_spared_whole_has_no_sibling_that_gives_or_opens() -> None:
    """``RebalanceRules.spares_all`` lets the rebalance bound skip a level of the path
    without judging its siblings. At every pass of the first 2 days of the seed scenario
    (256 GPUs), wherever it says so for a budget's first pending request, each sibling
    holding victims, judged alone, lets the request take less than its smallest victim
    (gives nothing) and opens to no smaller admission charge (``charge_below`` at most 0);
    and it says so often, with such siblings to judge."""
    checked = SparedSidesChecked()
    Engine(seed_scenario(days=2, size=256), checked, PolicyConfig(), sim=SimConfig()).run()
    # 6,246 asked, 3,507 spared, 1,494 siblings judged one by one
    assert checked.spared >= 3000 and checked.sides >= 1400, vars(checked)


# ---- both oracles can fail ---------------------------------------------------------------------
def test_every_attribute_of_the_state_is_covered_by_the_index_oracle() -> None:
    """The oracle names every attribute of ``ClusterState`` and of its derived cache (pure
    or compiled): an index added to the state without a rebuild here fails this test."""
    state = make_state(make_tree("a"), make_hosts(8))
    assert state_attributes(state) == set(COVERED)
    assert state_attributes(state.derived) == CACHE_COVERED


def test_the_fingerprint_covers_every_attribute_but_the_derived_cache() -> None:
    """``fingerprint()`` (what "decide never writes its input" is checked with) holds every
    attribute of the state except the derived cache, and every attribute of the ledger
    except its kept windows: a new attribute left out of it fails this test."""
    state = make_state(make_tree("a"), make_hosts(8))
    assert set(state.fingerprint()) == {a.lstrip("_") for a in state_attributes(state)} - {
        "cache"
    }
    ledger = state.ledger
    kept = {"_" + name for name in ledger.fingerprint()}
    assert state_attributes(ledger) - kept == {"_memo", "_memo_at"}
    assert kept <= state_attributes(ledger)


def replayed() -> ClusterState:
    """A state after a short history: budgets a/x, a/y, b on hosts of 8, 8 and 4 GPUs, work
    running (allocated and unallocated, one stopping, one with a time limit), pending in
    both queues, one reservation, one checkpoint wait, one host draining, asked about its
    released work and every kept answer."""
    st = make_state(make_tree("a/x", "a/y", "b"), make_hosts(8, 8, 4))
    run_on(st, make_spec("r3", "a/y", 16, HOUR), 0.0, ("h0", 8), ("h1", 8))
    st.finish("r3", 5.0)
    run_on(st, make_spec("r4", "b", 8, 2 * HOUR), 6.0, ("h1", 8))
    st.finish("r4", 7.0)
    run_on(st, make_spec("r1", "a/x", 4, HOUR), 10.0, ("h0", 4))
    limited = dataclasses.replace(make_spec("r2", "b", 2, 600.0), time_limit=2 * HOUR)
    run_on(st, limited, 10.0, ("h0", 2))
    run_on(st, make_spec("u1", "a/y", 3, 0.0), 10.0, ("h1", 3))
    run_on(st, make_spec("r5", "a/x", 2, 900.0), 60.0, ("h2", 2))
    st.mark_stopping("u1")
    for i, (budget, gpus, mrt) in enumerate([("a/x", 2, HOUR), ("a/x", 1, 2 * HOUR),
                                              ("b", 8, HOUR), ("a/y", 2, 0.0)]):
        st.submit(make_spec(f"p{i}", budget, gpus, mrt, 70.0 + i), 70.0 + i)
    st.reserve("p0", ("h1",))
    st.await_checkpoints("p1", 100.0, ("r5",))
    st.set_host_state("h2", HostState.DRAINING, 80.0)
    st.released(1000.0)
    st.smallest_shapes("a/x")
    st.gpus_queues("a/x")
    st.smallest_unallocated()
    st.budget_set("h0")
    assert st.leaves_within(8, 2 * HOUR) == {"a/x", "b"}
    return st


def _bump(index: dict[str, int], key: str, by: int = 1) -> None:
    index[key] = index.get(key, 0) + by


# How to corrupt each index as a wrong update would (through the live dicts the state keeps).
CORRUPT: dict[str, Callable[[ClusterState], Any]] = {
    "used": lambda s: _bump(s._used, "h1"),
    "free": lambda s: _bump(s._free, "h0", -1),
    "stopping_gpus": lambda s: _bump(s._stopping_gpus, "h1", -3),
    "unallocated_used": lambda s: _bump(s._unallocated_used, "h1", 3),
    "protected_until": lambda s: s._protected_until.__setitem__("h0", 600.0),
    "deadlines": lambda s: s._deadlines.__setitem__("r2", HOUR),
    "budgets_on": lambda s: s._budgets_on["h0"].pop("b"),
    "on_host": lambda s: s._on_host["h1"].add("r4"),
    "running_of": lambda s: s._running_of["b"].add("r4"),
    "stopping": lambda s: s._stopping.discard("u1"),
    "no_allocated": lambda s: s._no_allocated.add("h0"),
    "idle": lambda s: s._idle.add("h2"),
    "queues": lambda s: s._queues["a/x"].reverse(),
    "unallocated_queues": lambda s: s._unallocated_queues["a/y"].clear(),
    "sizes": lambda s: s._sizes["b"].__setitem__((8, HOUR), 2),
    "unallocated_sizes": lambda s: s._unallocated_sizes["a/y"].pop((2, 0.0)),
    "pending_allocated": lambda s: _bump(s._pending_allocated, "a"),
    "held": lambda s: _bump(s._held, "b", 2),
    "schedulable": lambda s: s._schedulable.__setitem__("h2", 4),
    "schedulable_names": lambda s: s._schedulable_names.append("h2"),
    "unschedulable": lambda s: s._unschedulable.clear(),
    "draining": lambda s: s._draining.clear(),
    "total_gpus": lambda s: setattr(s, "_total_gpus", 24),
    "free_hosts": lambda s: s._free_hosts[5].add("h0"),
    "open_hosts": lambda s: s._open_hosts[8].discard("h1"),
    "reservations": lambda s: s._reservations.__setitem__("r5", ("h0",)),
    "awaited": lambda s: s._awaited.__setitem__("r1", (0.0, 60.0, frozenset({"r5"}))),
    "smallest_shapes": lambda s: s.derived.smallest["a/x"].append((8, HOUR)),
    "gpus_queues": lambda s: s.derived.by_gpus["a/x"].pop(1),
    "smallest_unallocated": lambda s: setattr(s.derived, "smallest_unallocated", (1, 1 << 30)),
    "released": lambda s: s.derived.released.ids.discard("r2"),
    "budget_set": lambda s: s.derived.budget_sets.__setitem__("h0", frozenset({"a/x"})),
    "protection heap": lambda s: s.derived.protections.clear(),
    "leaves_within": lambda s: s.derived.within[(8, 2 * HOUR)].discard("b"),
}


@pytest.mark.parametrize("index", sorted(CORRUPT))
def test_index_oracle_reports_a_corrupted_index(index: str) -> None:
    """A state whose indexes agree with its work passes the oracle; the same state with one
    index set as a wrong update would set it fails it, and the message names that index."""
    st = replayed()
    assert index_errors(st) == []
    CORRUPT[index](st)
    errors = index_errors(st)
    assert errors and all(index in e for e in errors[:1]), errors


def test_index_oracle_in_the_driver_stops_a_replay_at_the_first_wrong_event() -> None:
    """The driver's oracle runs after every event: a replay whose state is corrupted (an
    index left one GPU off) by a pass fails at the next event, naming the index and it."""
    st = make_state(make_tree("a", "b"), make_hosts(8, 8))
    drv = Driver(st, policy=lambda state, now, cfg: corrupting(state, now, cfg))
    for i in range(4):
        st.submit(make_spec(f"w{i}", "ab"[i % 2], 4, HOUR), 0.0)
    with pytest.raises(AssertionError, match=r"after starting w\d+ .*index free\["):
        drv.settle(0.0)


def corrupting(state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
    """``decide``, after knocking one GPU off a host's free count."""
    d = decide(state, now, config)
    if d.starts:
        _bump(state._free, d.starts[0].placement[0].host, -1)
    return d


def test_reference_comparison_reports_a_wrong_shortcut() -> None:
    """A fast pass whose skip rule errs fails the comparison. Budget b holds both halves of
    one 8-GPU host in two 4-GPU workloads past their minimum runtime, twice its share; a/x
    asks for 4 GPUs, so the guarantee rule lets it take one. Told (by a corrupted index of
    released work) that b has nothing to give, the fast pass's rebalance bound falls short
    and it skips the search; the reference pass, which takes no such shortcut, preempts for
    a/x, and the comparison names the preemptions."""
    st = make_state(make_tree("a/x", "b"), make_hosts(8))
    run_on(st, make_spec("b1", "b", 4, 600.0), 0.0, ("h0", 4))
    run_on(st, make_spec("b2", "b", 4, 600.0), 0.0, ("h0", 4))
    st.submit(make_spec("mine", "a/x", 4, HOUR, HOUR), HOUR)
    cfg = PolicyConfig()
    assert differences(decide(st, HOUR, cfg), decide(st, HOUR, reference(cfg))) == []
    assert [p.by for p in decide(st, HOUR, cfg).preemptions] == ["mine"]
    st.released(HOUR).gpus["b"] = 0  # a shortcut reading a wrong answer
    diff = differences(decide(st, HOUR, cfg), decide(st, HOUR, reference(cfg)))
    assert diff and diff[0].startswith("preemptions: fast (), reference (Preempt("), diff


def test_reference_comparison_reports_a_stale_queue_index() -> None:
    """A fast pass reading a stale index of a queue by GPU count fails the comparison. On one
    8-GPU host where b holds 6 GPUs, protected, a asks for 4 GPUs 20 times and then for 1:
    the first 4 fails every way, so the other 19 are hopeless, more than the pass checks one
    by one, and it looks up the next request worth trying in the index, and starts the 1-GPU
    one. With the index as it
    was before that request was queued (a cache not dropped on submission), the fast pass
    skips it; the reference pass, which walks every request, starts it, and the comparison
    names the starts (as does the pass on kept answers against one on fresh ones)."""
    st = make_state(make_tree("a", "b"), make_hosts(8))
    run_on(st, make_spec("b1", "b", 6, 8 * HOUR), 0.0, ("h0", 6))
    for i in range(20):
        st.submit(make_spec(f"big{i:02d}", "a", 4, HOUR, 10.0 + i / 10), 10.0 + i / 10)
    stale = dict(st.gpus_queues("a"))
    st.submit(make_spec("small", "a", 1, HOUR, 20.0), 20.0)
    cfg = PolicyConfig()
    now = 30.0
    assert [s.workload for s in decide(st, now, cfg).starts] == ["small"]
    assert differences(decide(st, now, cfg), decide(st, now, reference(cfg))) == []
    st.derived.by_gpus["a"] = stale  # the plant: a cache left as it was before "small"
    kept = decide(st, now, cfg)
    diff = differences(kept, decide(st, now, reference(cfg)))
    assert diff and diff[0].startswith("starts: fast (), reference (Start(workload='small'"), diff
    st.forget_derived()
    assert decide(st, now, cfg) != kept
