"""One scheduling pass: ``decide(state, now, config) -> Decisions``.

The pass runs in numbered phases over a read-only :class:`ClusterState`:

0. **time limits**: running work at or past its time limit is stopped (it ends as
   ``timeout``); its GPUs stay held until it exits, like any stopping work.
1. **drain**: on draining hosts, preempt what is no longer protected; an empty draining
   host goes to repair.
2. **rank**: pending allocated work in Fair Tree order: at each level of the budget tree the
   child with the lowest usage ratio first, depth-first; inside a budget by priority, then
   submission time. Admitting a workload charges its budget ``gpus x min_runtime`` at once
   (provisionally, for this pass) and re-ranks, so one budget cannot take everything before
   its ratio moves.
   Before the walk, the head large workload of an owed budget gets a reservation of whole
   hosts (:mod:`apportion.core.reservations`): they are out of the walk's reach until it
   starts.
3. **admit or preempt**: each workload in that order is placed if it fits (best fit, so large
   jobs stay placeable); otherwise it may displace unallocated work, then allocated work past
   its minimum runtime under the two rebalance rules of :mod:`apportion.core.preemption`.
   Never protected work.
4. **backfill**: unallocated work fills what is left, never preempting; then the reserved
   hosts' free GPUs go to work that cannot delay their reservation.

All working data is local to the pass; ``state`` is never written.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Mapping
from typing import Final

from . import reservations
from .config import PolicyConfig, is_debug
from .placement import HostView, VictimPlan, find_fit, find_victims
from .preemption import (
    UNALLOCATED,
    Candidate,
    RebalanceRules,
    checkpoint_due,
    size_bound_lifts,
    victim_class,
)
from .queueindex import Entry
from .state import ClusterState, Released
from .tree import ROOT, ancestors
from .types import (
    NO_SIZE,
    CheckpointWait,
    CoreError,
    Decisions,
    HostChange,
    HostState,
    Preempt,
    PreemptReason,
    Reservation,
    Start,
    WaitReason,
    WorkloadSpec,
)
from .units import format_duration_exact, plural

_INF: Final = float("inf")
_NEAR: Final = 16  # requests Pass.next_live checks one by one before it asks the queue index


def _NO_VICTIMS(candidate: Candidate, taken: dict[str, int]) -> bool:
    """A reservation waits for its own stopping victims; it never takes new ones."""
    return False


def _gives(held: int, smallest: int, limit: float) -> float:
    """What a side adds to the rebalance bound: nothing unless its smallest victim is
    within the limit (see ``Pass.rebalance_bound``)."""
    return min(held, limit) if held and limit >= smallest else 0.0


def _charge_threshold(
    gpus: int, short_bound: float | None, opening: list[tuple[float, float]]
) -> float:
    """After rebalancing failed for a request of ``gpus``: the least admission charge from
    which a request of the same budget at least as large fails too. For it no side may lose
    more than for the failed one, except the sides in ``opening`` (from
    :meth:`Pass.rebalance_bound`), which a charge below theirs opens: the guarantee rule
    allows less to a larger request (beyond the sizes its overshoot lets take more, which
    the failure does not cover: ``grows_to`` there), the fair-share rule the same wherever
    it allows at all,
    and a larger charge spares more sides. If the bound fell short (``short_bound``) and
    stays short with every side opened, any charge fails: 0. If it fell short, the charge
    below which enough sides open to reach ``gpus``; if the search failed instead, below
    which any opens. Slightly above the exact figure, so that rounding can only make a later
    request be tried, never skipped."""
    if not opening:
        return 0.0  # no charge opens a side: nothing as large can succeed (the common case)
    threshold = 0.0
    if short_bound is None:
        threshold = max((below for below, _ in opening), default=0.0)
    else:
        bound = short_bound
        for below, more in sorted(opening, reverse=True):
            bound += more
            if bound >= gpus:
                threshold = below
                break
    return threshold * (1 + 1e-9)


class TooLarge(CoreError):
    """More GPUs than the cluster holds: :meth:`~apportion.core.fleet.FleetState.validate`
    words it over every pool the work may use when it is too large for each."""


def validate_spec(spec: WorkloadSpec, state: ClusterState, config: PolicyConfig) -> None:
    """Refuse a workload the policy could never run, naming the field (:class:`TooLarge`
    when it asks for more GPUs than the cluster holds)."""
    state.tree.require_leaf(spec.budget)
    if spec.min_runtime > config.max_min_runtime:
        raise CoreError(
            f"workload {spec.id}: min_runtime: {format_duration_exact(spec.min_runtime)} is over "
            f"the cap of {format_duration_exact(config.max_min_runtime)}"
        )
    limit = spec.time_limit
    if config.max_time_limit and not 0 < limit <= config.max_time_limit:
        raise CoreError(
            f"workload {spec.id}: time_limit: "
            f"{format_duration_exact(limit) if limit else 'none'} is over the cap of "
            f"{format_duration_exact(config.max_time_limit)}"
        )
    if limit and limit < spec.min_runtime:
        raise CoreError(
            f"workload {spec.id}: time_limit: {format_duration_exact(limit)} is shorter than its "
            f"minimum runtime of {format_duration_exact(spec.min_runtime)}"
        )
    largest, total = state.max_host_gpus, state.total_gpus  # not a scan per submission
    if not state.hosts:
        raise CoreError(f"workload {spec.id}: gpus: the cluster has no hosts")
    if spec.gpus > largest and spec.gpus > total:
        raise TooLarge(
            f"workload {spec.id}: gpus: {spec.gpus} is more than the cluster's {total}"
        )
    if spec.hosts:
        unknown = [h for h in spec.hosts if h not in state.hosts]
        if unknown:
            raise CoreError(f"workload {spec.id}: hosts: unknown host {unknown[0]!r}")
        mine = [state.hosts[h].gpus for h in spec.hosts]
        one_host = spec.gpus <= largest  # the shape rule: one host, else whole hosts
        if (one_host and spec.gpus > max(mine)) or (not one_host and spec.gpus > sum(mine)):
            raise CoreError(
                f"workload {spec.id}: hosts: {plural(spec.gpus, 'GPU')} cannot fit on the "
                f"hosts it may use ({', '.join(spec.hosts)})"
            )


def decide(
    state: ClusterState, now: float, config: PolicyConfig, reasons: bool = True
) -> Decisions:
    """Decide what to start, preempt and drain at ``now``. Pure: same inputs, same output,
    and ``state`` is left exactly as it was.

    ``reasons=False`` leaves out of ``Decisions.order`` and ``Decisions.waiting`` the work a
    pass passes over in bulk (the rest of a queue nothing in which can succeed): recording
    it costs a pass time in proportion to the whole queue, and only readers of the queue
    (``apportion why``, the queue view) need it. The decisions are the same either way."""
    return Pass(state, now, config, reasons).run()


_NONE_FAILED: Final[list[tuple[int, float]]] = []  # read only


class _PerShape:
    """The smallest request of each shape, on one host or on whole hosts, for which a step
    of the pass failed (``NO_SIZE``: none yet). Two fields rather than a dict keyed by the
    shape: the walk asks millions of times."""

    def __init__(self) -> None:
        self.one = NO_SIZE
        self.whole = NO_SIZE

    def of(self, whole_hosts: bool) -> int:
        return self.whole if whole_hosts else self.one

    def set(self, whole_hosts: bool, gpus: int) -> None:
        if whole_hosts:
            self.whole = gpus
        else:
            self.one = gpus


class Pass:
    """Working data of one pass. Everything the pass changes lives here."""

    def __init__(
        self, state: ClusterState, now: float, config: PolicyConfig, reasons: bool = True
    ) -> None:
        self.state = state
        self.now = now
        self.cfg = config
        self.reasons = reasons
        # False: the reference pass, every shortcut off (see PolicyConfig.shortcuts)
        self.fast = config.shortcuts
        tree = state.tree
        ledger = state.ledger
        capacity = max(ledger.capacity(now, config.lookback), 1.0)
        healthy = max(state.healthy_gpus(), 1)
        self.rules = RebalanceRules(tree, ledger, state.held, now, capacity, healthy, config)
        self.hosts = HostView(state, config.default_checkpoint_interval, full=not self.fast)
        self.starts: list[Start] = []
        self.preempts: list[Preempt] = []
        self.changes: list[HostChange] = []
        self.timeouts: list[str] = []
        self.waits: list[CheckpointWait] = []  # rebalances put off until checkpoints
        self.recheck = _INF  # when a pass is due for a checkpoint waited for (Decisions)
        self.order: list[str] = []
        self.waiting: dict[str, WaitReason] = {}
        # Smallest request that failed this pass: anything larger of the same shape fails too.
        # Kept per shape (one host / whole hosts): with hosts of mixed sizes, a single-host
        # request failing says nothing about whole free smaller hosts.
        self.fit_fail_min = _PerShape()  # did not fit
        self.unalloc_fail_min = _PerShape()  # unallocated victims too few
        # Per shape (one host / whole hosts) and preemptor budget, the requests rebalancing
        # could not make room for, as (GPUs, admission charge from which the fair-share rule
        # spared every side it spared for that request): a request at least as large with
        # at least that charge fails too (see ``_charge_threshold``). Two dicts rather than
        # one keyed by (budget, shape): the walk asks millions of times, and a tuple key is
        # built for each question.
        self.rebalance_failed_one: dict[str, list[tuple[int, float]]] = {}
        self.rebalance_failed_whole: dict[str, list[tuple[int, float]]] = {}
        # (budget, GPUs, debug?) -> admission charge from which a request of exactly that
        # shape, not waited out, fails: the victim size bound refused a victim of the
        # failed one, so the failure says nothing of larger requests (whose bound is larger)
        # but holds for the same size, whose bound is the same (RebalanceRules.largest_victim)
        self.size_refused: dict[tuple[str, int, bool], float] = {}
        # (budget, GPUs) -> admission charge from which a request of exactly that size fails,
        # waited out or not, debug or not (see ``covers_its_size``). ``rebalance_failed_*``
        # cannot say it when the guarantee rule's overshoot lets a larger request take
        # more (``grows_to``): they cover only the larger ones then.
        self.size_failed: dict[tuple[str, int], float] = {}
        # budget -> GPUs -> live_below: kept until one of the thresholds above falls, the
        # budget's alone when only its own rebalance failures move (they bound no other's)
        self._live: dict[str, dict[int, float]] = {}
        self._largest: dict[str, int] = {}  # leaf -> GPUs of its largest pending request
        self._victims: Released | None = None
        self._remaining: dict[str, int] = {}  # the walk's (admit_allocated)
        self.reservations: list[Reservation] = []
        self.handled: set[str] = set()  # pending work settled before the walk (reservations)
        self.fences: list[reservations.Fence] = []
        self._judged: set[str] = set()  # budgets judge_givers ran for since the last admission
        # Did a request of one GPU, on any host, fail to fit? Until then a pass that tells why
        # work waits (reasons) still tells it of every unallocated request, as before the
        # free-GPU failures were known without trying (seed_failures)
        self.tried_one_gpu = False
        self._whole_seeded = False  # see seed_whole_failures

    def run(self) -> Decisions:
        if self.fast:
            self.seed_failures()
        self.time_limits()
        self.drain()
        self.honour_reservations()
        self.reserve()
        self.debug_lane()
        self.admit_allocated()
        self.backfill_unallocated()
        self.backfill_reserved()
        return Decisions(
            starts=tuple(self.starts),
            preemptions=tuple(self.preempts),
            host_changes=tuple(self.changes),
            reservations=tuple(self.reservations),
            order=tuple(self.order),
            waiting=self.waiting,
            timeouts=tuple(self.timeouts),
            checkpoint_waits=tuple(self.waits),
            recheck_at=self.recheck if self.recheck < _INF else None,
        )

    # ---- what is known to fail before anything is tried ----------------------------------
    def seed_failures(self) -> None:
        """Set the smallest requests that cannot fit, and that unallocated victims cannot
        make room for, from the hosts' counts before anything is tried: one GPU more than
        the most free on one host, than free, stopping and unallocated GPUs add up to on one
        host (the state's ``open_hosts``); for whole hosts, than the wholly free hosts hold
        and than the hosts with no allocated work hold (:meth:`seed_whole_failures`). A try
        of that size would find each so, and since a pass only hands GPUs out, a larger
        request fails too; the walk need not try a request of each budget to learn it
        (:meth:`doomed` reads them)."""
        self.fit_fail_min.one = self.hosts.room(False) + 1
        self.unalloc_fail_min.one = max(self.state.open_hosts, default=0) + 1

    def seed_whole_failures(self) -> None:
        """:meth:`seed_failures` for whole hosts, once the walk first asks about a request
        of whole hosts (they count hosts one by one: a cluster with no such request pending
        need not). A size a try failed at already may be lower."""
        self._whole_seeded = True
        hosts, fit, unallocated = self.hosts, self.fit_fail_min, self.unalloc_fail_min
        fit.whole = min(fit.whole, hosts.room(True) + 1)
        unallocated.whole = min(unallocated.whole, hosts.unallocated_clearable() + 1)

    def judge_givers(self, budget: str) -> None:
        """The first time the pass asks whether a request of ``budget`` is doomed where it
        could neither fit nor get unallocated room (again after an admission): if the
        fair-share rule lets no side give to its work at any charge at any level of its
        path (:meth:`RebalanceRules.fair_share_spares` at no charge: a charge only spares
        more), no side gives to a request that the guarantee rule gives nothing to either,
        so rebalancing fails, of either shape, for every request from
        :meth:`guarantee_refused_from` on. That is what a try of one such request records
        where no side gives (:meth:`try_preempt`), known here without the try."""
        self._judged.add(budget)
        rules, tree = self.rules, self.state.tree
        victims = self.victims().gpus
        for mine in tree.lineage(budget):
            if not rules.fair_share_spares(rules.figures(mine), tree.parent_of(mine), victims,
                                           0.0):
                return
        fails_from = self.guarantee_refused_from(budget, NO_SIZE)
        if fails_from < NO_SIZE:
            self.rebalance_fails(budget, False, fails_from, 0.0)
            self.rebalance_fails(budget, True, fails_from, 0.0)

    # ---- phase 0: time limits --------------------------------------------------------
    def time_limits(self) -> None:
        """Stop work whose time limit has passed. It is claimed, so no one counts it as a
        victim this pass (it already stops)."""
        st = self.state
        for wid, until in sorted(st.deadlines.items()):
            if self.now >= until and wid not in st.stopping:
                self.hosts.claimed.add(wid)
                self.timeouts.append(wid)

    # ---- phase 1: drain ----------------------------------------------------------------
    def drain(self) -> None:
        st = self.state
        for name in st.draining:
            on = st.on_host[name]
            if not on:
                self.changes.append(HostChange(name, HostState.REPAIR, "drained: empty"))
                continue
            for wid in sorted(on):
                r = st.running[wid]
                if r.stopping or wid in self.hosts.claimed or self.now < r.protected_until():
                    continue
                # claimed: a workload spanning several hosts is preempted once, and is no
                # victim for anyone else in this pass
                self.hosts.claimed.add(wid)
                self.preempts.append(Preempt(wid, PreemptReason.DRAIN, r.spec.resumable))

    # ---- phase 1b: GPUs already being freed for someone -----------------------------------
    def honour_reservations(self) -> None:
        """Work whose victims were preempted for it gets the freed GPUs first, before the walk:
        otherwise a workload ranked ahead of it could take them, and it would have to
        preempt again (a wasted preemption). A reservation whose hosts can no longer hold the
        workload (a host died, its GPUs went elsewhere) lapses and the walk decides afresh."""
        st = self.state
        held = sorted(
            (st.pending[w].spec for w in st.reservations if w in st.pending),
            key=lambda spec: (spec.submit_time, spec.id),
        )
        for spec in held:
            hosts = st.reservations[spec.id]
            placement = find_fit(self.hosts, spec.gpus, only=hosts)
            if placement is not None:
                self.hosts.take(placement)
                self.starts.append(Start(spec.id, placement))
            else:
                plan = find_victims(self.hosts, spec, self.now, _NO_VICTIMS, only=hosts)
                if plan is None:
                    continue  # lapsed
                self.hosts.claim(plan)
                self.reservations.append(Reservation(spec.id, tuple(h for h, _ in plan.hosts)))
                self.waiting[spec.id] = WaitReason.WAITING_FOR_PREEMPTION
            self.rules.admit(spec)
            self.handled.add(spec.id)
            self.order.append(spec.id)

    # ---- phase 1c: whole hosts reserved for large work of owed budgets -------------------
    def reserve(self) -> None:
        """Each head large workload of an owed budget (see :mod:`reservations`) starts on
        its reserved hosts once they are ready, preempting what is left on them; until
        then the hosts are withheld from the walk."""
        for spec in reservations.heads(self.state, self.rules, self.cfg, self.handled):
            fence = reservations.plan(self.state, self.hosts, self.rules, self.cfg, spec,
                                      self.now)
            if fence is None:
                continue
            self.handled.add(spec.id)
            self.order.append(spec.id)
            if fence.ready > self.now:
                reservations.withhold(self.hosts, fence, self.now)
                self.fences.append(fence)
                self.waiting[spec.id] = WaitReason.NO_CAPACITY
                continue
            placement, plan = reservations.hand_over(self.hosts, fence, self.now)
            self.rules.admit(spec)
            if placement is not None:
                self.hosts.take(placement)
                self.starts.append(Start(spec.id, placement))
                continue
            self.hosts.claim(plan)
            self.reservations.append(Reservation(spec.id, fence.hosts))
            for victim in plan.victims:
                reason = (PreemptReason.UNALLOCATED if victim.klass == UNALLOCATED
                          else PreemptReason.REBALANCE)
                self.preempts.append(Preempt(victim.id, reason, victim.resumable, by=spec.id))
                self.rules.evict(victim)
            self.waiting[spec.id] = WaitReason.WAITING_FOR_PREEMPTION

    # ---- phase 1d: debug work first -----------------------------------------------------
    def debug_lane(self) -> None:
        """Pending debug work gets free GPUs (or displaces unallocated work) before the walk
        hands them out in Fair Tree order, each budget's in its queue order, the budget whose
        next debug job was submitted first going next: its owner is at a terminal, and it
        asks for little and for a short time. Never rebalance victims:
        those it may take only in its budget's turn in the walk, under the same rules as any
        work. A budget whose running debug work would hold more than ``debug_max_gpus`` GPUs
        with it gets nothing here, so the lane cannot be used to jump the queue with work
        labelled debug that runs on."""
        cfg = self.cfg
        if not cfg.debug_lane:
            return
        hosts = self.hosts
        if (self.fast and hosts.room(False) <= 0
                and self.state.ledger.rate(ROOT, charged=False) <= 0
                and hosts.reclaimable_unallocated() <= 0):
            # no GPU free, stopping or unallocated: nothing could start here (asked in this
            # order: the last sums every host's counts, the first two are kept figures)
            return
        st = self.state
        # first_below finds a minimum runtime below its bound; debug work's is at most its cap
        bound = math.nextafter(cfg.debug_max_min_runtime, _INF)
        # Each budget's debug work in its queue order (a cursor per GPU count: position in
        # that count's queue), the budgets in the order of their next job's submit time: the
        # work is looked at lazily, so a pass costs what the budgets with debug work and the
        # starts cost, not the depth of their queues.
        cursors: dict[str, dict[int, int]] = {}
        heads: list[tuple[float, str, str]] = []  # (submit time, id, leaf) of each next job
        for leaf in st.leaves_within(cfg.debug_max_gpus, cfg.debug_max_min_runtime):
            at_gpus: dict[int, int] = {}
            for gpus in st.gpus_queues(leaf):
                if gpus > cfg.debug_max_gpus:
                    break  # by GPU count, smallest first
                at_gpus[gpus] = self._next_debug(leaf, gpus, 0, bound)
            cursors[leaf] = at_gpus
            self._push_debug_head(leaf, at_gpus, heads)
        lane: dict[str, int] = {}  # leaf -> GPUs its running debug work holds, as started here
        while heads:
            _, wid, leaf = heapq.heappop(heads)
            at_gpus = cursors[leaf]
            spec = st.pending[wid].spec
            gpus = spec.gpus
            held = lane.get(leaf)
            if held is None:
                held = lane[leaf] = self.debug_held(leaf)
            if held + gpus > cfg.debug_max_gpus:
                at_gpus[gpus] = -1  # its budget's debug work only grows: none of these fits
            elif self.try_fit(spec) or self._debug_displaces_unallocated(spec):
                lane[leaf] = held + gpus
                self.rules.admit(spec)
                self.forget_rebalance_failures()
                self.handled.add(spec.id)
                self.order.append(spec.id)
                at_gpus[gpus] = self._next_debug(leaf, gpus, at_gpus[gpus] + 1, bound)
            elif self.fast and not spec.hosts:
                # no room for this many GPUs: free GPUs and unallocated work only fall in a
                # pass, so the rest of this count fails too (a request limited to some hosts
                # failing says nothing about the others)
                at_gpus[gpus] = -1
            else:
                at_gpus[gpus] = self._next_debug(leaf, gpus, at_gpus[gpus] + 1, bound)
            self._push_debug_head(leaf, at_gpus, heads)

    def _debug_displaces_unallocated(self, spec: WorkloadSpec) -> bool:
        plan = self.unallocated_plan(spec)
        if plan is None:
            return False
        self.preempt_for(spec, plan)
        return True

    def _next_debug(self, leaf: str, gpus: int, start: int, bound: float) -> int:
        """The position, from ``start`` on, of the next debug job of ``leaf`` asking for
        ``gpus`` GPUs not settled before the walk (-1: none)."""
        sub = self.state.gpus_queues(leaf)[gpus]
        at = sub.first_below(start, bound)
        while at >= 0 and sub.entries[at][1] in self.handled:
            at = sub.first_below(at + 1, bound)
        return at

    def _push_debug_head(
        self, leaf: str, at_gpus: dict[int, int], heads: list[tuple[float, str, str]]
    ) -> None:
        """Queue ``leaf``'s next debug job (the first in its queue order among the GPU
        counts' next ones) by its submit time."""
        queues = self.state.gpus_queues(leaf)
        best: Entry | None = None
        for gpus, at in at_gpus.items():
            if at >= 0:
                entry = queues[gpus].entries[at]
                if best is None or entry < best:
                    best = entry
        if best is not None:
            heapq.heappush(heads, (self.state.pending[best[1]].spec.submit_time, best[1], leaf))

    def debug_held(self, leaf: str) -> int:
        """GPUs held by ``leaf``'s running debug work."""
        st, held = self.state, 0
        for wid in st.running_of.get(leaf, ()):
            r = st.running[wid]
            if is_debug(r.spec, self.cfg):
                held += r.gpus_held
        return held

    # ---- phases 2-3: rank, admit or preempt ---------------------------------------------
    def admit_allocated(self) -> None:
        st = self.state
        # per node but the root (no one's child: never read), not yet considered this pass
        self._remaining = dict(st.pending_allocated)
        remaining = self._remaining
        cursor: dict[str, int] = {}
        leaf: str | None = self.pick()
        while leaf is not None:
            i = cursor.get(leaf, 0)
            path = st.tree.lineage(leaf)
            if self.hopeless(leaf):
                self.skip_rest(leaf, i)
                for node in path:
                    remaining[node] -= len(st.queues[leaf]) - i
                cursor[leaf] = len(st.queues[leaf])
                leaf = self.pick()
                continue
            if self.fast:
                j = self.next_live(leaf, i)
                if j > i:  # what a walk would try and fail, changing nothing: in one step
                    self.skip_rest(leaf, i, j)
                    for node in path:
                        remaining[node] -= j - i
                    cursor[leaf] = i = j
                if i == len(st.queues[leaf]):
                    leaf = self.pick()
                    continue
            cursor[leaf] = i + 1
            for node in path:
                remaining[node] -= 1
            spec = st.pending[st.queues[leaf][i][1]].spec
            if spec.id in self.handled:
                if remaining.get(leaf, 0) == 0:
                    leaf = self.pick()
                continue
            self.order.append(spec.id)
            if self.try_admit(spec):
                self.rules.admit(spec)  # ratios moved: re-rank
                self.forget_rebalance_failures()
                leaf = self.pick()
            elif remaining.get(leaf, 0) == 0:
                leaf = self.pick()

    def pick(self) -> str | None:
        """The leaf the walk tries next, in Fair Tree order: from the root down, the child
        with the lowest (usage ratio, name) among those with work not yet considered.

        Each node's children are looked at one by one on every call. Ratios move only when
        the walk admits work, and keeping each node's children sorted until then was tried
        and measured dearer: most passes admit often, and a sort is paid again after each
        admission for the few calls between two."""
        tree, remaining = self.state.tree, self._remaining
        node: str = ROOT
        while True:
            best: str | None = None
            best_ratio = 0.0
            for kid in tree.children(node):  # lowest (ratio, name) first
                if remaining.get(kid, 0) > 0:
                    ratio = self.rules.ratio(kid)
                    if best is None or ratio < best_ratio or (ratio == best_ratio and kid < best):
                        best, best_ratio = kid, ratio
            if best is None:
                return None if node == ROOT else node
            node = best

    def hopeless(self, leaf: str) -> bool:
        """Would every pending workload of ``leaf`` fail by the pass's thresholds? They only
        fall until the pass admits something, and skipping the queue admits nothing, so the
        answer is exact, and it spares a walk over a long queue."""
        if not self.fast:
            return False
        # exact=False: a size failing by ``size_failed`` says nothing of larger ones
        return all(
            self.doomed(leaf, g, m, exact=False) for g, m in self.state.smallest_shapes(leaf)
        )

    def doomed(self, budget: str, gpus: int, min_runtime: float, exact: bool = True) -> bool:
        """Would trying a request of ``budget`` of this shape now fail by the pass's
        thresholds alone (too large for the healthy GPUs, no larger than what failed to fit
        and to find unallocated victims, and rebalancing failed for one no larger with no
        more charge), changing nothing? :meth:`try_admit` takes these same steps one by one;
        the thresholds only fall until the pass admits something (which forgets the failed
        rebalances: :meth:`forget_rebalance_failures`), so a doomed request stays doomed
        until then. With ``exact``, also a request of a size that failed (``size_failed``)
        with no less charge; without, the answer only grows with the size and the charge."""
        if gpus > self.hosts.healthy_total:
            return True
        multi = gpus > self.hosts.max_size
        if multi and not self._whole_seeded:
            self.seed_whole_failures()
        if gpus < self.fit_fail_min.of(multi) or gpus < self.unalloc_fail_min.of(multi):
            return False
        if not self.cfg.rebalance:
            return True
        if budget not in self._judged:
            self.judge_givers(budget)
        charge = self.rules.charge(gpus, min_runtime)
        return self.rebalance_hopeless(budget, multi, gpus, charge, exact)

    def live_below(self, budget: str, gpus: int) -> float:
        """A minimum runtime from which every request of ``budget`` for ``gpus`` GPUs is
        :meth:`doomed` now (infinity: none is). Slightly above the exact figure, so that
        rounding can only make a request be checked, never skipped: for one budget and GPU
        count, doom depends on the minimum runtime only through the admission charge
        ``gpus x min_runtime x admission_charge``, which grows with it."""
        of_budget = self._live.get(budget)
        if of_budget is None:
            of_budget = self._live[budget] = {}
        kept = of_budget.get(gpus)
        if kept is None:
            kept = of_budget[gpus] = self._live_below(budget, gpus)
        return kept

    def _live_below(self, budget: str, gpus: int) -> float:
        if gpus > self.hosts.healthy_total:
            return 0.0
        multi = gpus > self.hosts.max_size
        if multi and not self._whole_seeded:
            self.seed_whole_failures()
        if gpus < self.fit_fail_min.of(multi) or gpus < self.unalloc_fail_min.of(multi):
            return _INF
        if not self.cfg.rebalance:
            return 0.0
        least = self.size_failed.get((budget, gpus), _INF)
        for g, c in self._rebalance_failed(budget, multi):  # a loop: no generator
            if gpus >= g and c < least:
                least = c
        per_second = gpus * self.cfg.admission_charge  # admission charge per minimum-runtime s
        if least == _INF or per_second <= 0.0:
            return _INF if least > 0.0 else 0.0
        return least / per_second * (1 + 1e-9)

    def next_live(self, leaf: str, start: int) -> int:
        """The place in ``leaf``'s queue, from ``start`` on, of the first workload that is
        neither :meth:`doomed` nor settled before the walk; the queue's length if none is.
        The next few are checked one by one; beyond them, per GPU count of the leaf's
        pending work, the first of it below
        :meth:`live_below` (``ClusterState.gpus_queues``), checked exactly: the walk need
        not visit the hopeless work in between, however deep the queue."""
        st = self.state
        queue = st.queues[leaf]
        near = min(start + _NEAR, len(queue))
        for at in range(start, near):  # the common case: close by, no index needed
            wid = queue[at][1]
            spec = st.pending[wid].spec
            if wid not in self.handled and not self.doomed(leaf, spec.gpus, spec.min_runtime):
                return at
        if near == len(queue):
            return near
        first = queue[near]
        best: Entry | None = None
        for gpus, sub in st.gpus_queues(leaf).items():
            bound = self.live_below(leaf, gpus)
            at = sub.position(first)
            while True:
                at = sub.first_below(at, bound)
                if at < 0:
                    break
                entry = sub.entries[at]
                if best is not None and entry > best:
                    break  # a later one than found already
                if entry[1] not in self.handled and not self.doomed(
                    leaf, gpus, sub.min_runtimes[at]
                ):
                    best = entry
                    break
                at += 1
        return len(queue) if best is None else bisect_left(queue, best)

    def rebalance_fails(self, budget: str, multi: bool, gpus: int, charge: float) -> None:
        """Record that rebalancing failed for requests of ``budget`` of at least ``gpus``
        GPUs from an admission charge of ``charge``. Only the entries no other is both
        smaller and cheaper than are kept: the others answer no question differently."""
        # get, loops and ``del``, not setdefault, any() and pop(): compiled, setdefault
        # raises and clears a KeyError for a missing key and pop() is a generic method
        # call, and this is asked twice for every budget judged
        table = self.rebalance_failed_whole if multi else self.rebalance_failed_one
        failed = table.get(budget)
        if failed is None:
            table[budget] = [(gpus, charge)]
        else:
            for g, c in failed:
                if gpus >= g and charge >= c:
                    return
            failed[:] = [(g, c) for g, c in failed if not (g >= gpus and c >= charge)]
            failed.append((gpus, charge))
        if budget in self._live:
            del self._live[budget]

    def covers_its_size(self, spec: WorkloadSpec, multi: bool) -> bool:
        """Does a failed rebalance for ``spec``, in which the size bound refused no victim,
        hold for every request of its budget and size with no less admission charge, each
        under its own size bound (waited out or not, debug or not)?

        A larger charge only lowers the sides' limits, and the search, first fit on each
        host in a fixed order, takes no more of a side under a lower limit. The bounds:
        * one host, and a bound of at least the request (``victim_max_factor`` >= 1): on
          each host the failed search took only victims of fewer GPUs than it still needed
          (one as large would have made room there), so every victim another bound may
          refuse, it skipped: the same search;
        * otherwise, only if ``spec`` had the tightest bound of its size, or none applies
          (:meth:`RebalanceRules.tightest_bound`): a looser bound lets in only victims the
          limits skipped."""
        if not multi and self.cfg.victim_max_factor >= 1:
            return True
        return self.rules.tightest_bound(spec)

    def same_size_fails(self, budget: str, gpus: int, charge: float) -> None:
        """Record that rebalancing fails for requests of ``budget`` of exactly ``gpus`` GPUs
        from an admission charge of ``charge`` (see ``size_failed``)."""
        key = (budget, gpus)
        if charge < self.size_failed.get(key, _INF):
            self.size_failed[key] = charge
            self._live.pop(budget, None)

    def forget_rebalance_failures(self) -> None:
        """After an admission (and the evictions of its plan): a failed rebalance may now
        succeed. The admitted side holds more, so the rules may let it lose more; a victim's
        side holds less, so a request of a budget in it may now be within its share and the
        guarantee rule apply. A budget's sides are judged afresh (:meth:`judge_givers`)."""
        self._judged.clear()
        self.size_refused.clear()
        if self.rebalance_failed_one or self.rebalance_failed_whole or self.size_failed:
            self.size_failed.clear()
            self.rebalance_failed_one.clear()
            self.rebalance_failed_whole.clear()
            self._live.clear()

    def rebalance_hopeless(
        self, budget: str, multi: bool, gpus: int, charge: float, exact: bool = True
    ) -> bool:
        """Did rebalancing fail this pass for a request of ``budget`` no larger, whose
        admission charge spared no fewer sides? With ``exact``, also for one of exactly
        this size (``size_failed``); without, the answer only grows with the size."""
        # the walk asks millions of times: no key is built while nothing is recorded
        if exact and self.size_failed and charge >= self.size_failed.get((budget, gpus), _INF):
            return True
        return any(gpus >= g and charge >= c for g, c in self._rebalance_failed(budget, multi))

    def _rebalance_failed(self, budget: str, multi: bool) -> list[tuple[int, float]]:
        failed = (self.rebalance_failed_whole if multi else self.rebalance_failed_one).get(budget)
        return _NONE_FAILED if failed is None else failed

    def skip_rest(self, leaf: str, start: int, stop: int | None = None) -> None:
        """Record ``leaf``'s queue from ``start`` (up to ``stop``) as considered and waiting,
        as a walk over it would."""
        if not self.reasons:
            return
        st, total = self.state, self.hosts.healthy_total
        ids = [wid for _, wid in st.queues[leaf][start:stop] if wid not in self.handled]
        self.order.extend(ids)
        self.waiting.update(dict.fromkeys(ids, WaitReason.NO_CAPACITY))
        largest = self._largest.get(leaf)
        if largest is None:  # once per leaf and pass: the queue may hold many shapes
            largest = self._largest[leaf] = max(gpus for gpus, _ in st.sizes[leaf])
        if largest > total:
            for wid in ids:
                if st.pending[wid].spec.gpus > total:
                    self.waiting[wid] = WaitReason.TOO_LARGE

    def try_admit(self, spec: WorkloadSpec) -> bool:
        if spec.gpus > self.hosts.healthy_total:
            self.waiting[spec.id] = WaitReason.TOO_LARGE
            return False
        if self.try_fit(spec):
            return True
        if self.try_preempt(spec):
            return True
        self.waiting[spec.id] = WaitReason.NO_CAPACITY
        return False

    def try_fit(self, spec: WorkloadSpec) -> bool:
        multi = spec.gpus > self.hosts.max_size
        if self.fast and spec.gpus >= self.fit_fail_min.of(multi):
            self.tried_one_gpu = self.tried_one_gpu or (spec.gpus == 1 and not spec.hosts)
            return False
        placement = None
        if not self.fast or spec.gpus <= self.hosts.room(multi):  # else no search finds room
            placement = find_fit(self.hosts, spec.gpus, only=spec.hosts or None)
        if placement is None:
            # a request limited to some hosts failing says nothing about larger ones that
            # may use any host; the reverse holds, so it still skips by the others' failures
            if not spec.hosts:
                self.fit_fail_min.set(multi, spec.gpus)
                self._live.clear()
                self.tried_one_gpu = self.tried_one_gpu or spec.gpus == 1
            return False
        self.hosts.take(placement)
        self.starts.append(Start(spec.id, placement))
        return True

    def try_preempt(self, spec: WorkloadSpec) -> bool:
        """Make room by displacing work: unallocated only, then with rebalance victims."""
        multi = spec.gpus > self.hosts.max_size
        limited = set(spec.hosts) if spec.hosts else None  # None: any host
        plan = self.unallocated_plan(spec)
        rebalancing = plan is None  # the plan, if any, comes from the rebalance search
        queued_at = self.state.pending[spec.id].queued_at
        self.rules.waited_out = self.now >= size_bound_lifts(queued_at, self.cfg)
        self.rules.large_refused = False
        if plan is None and self.cfg.rebalance and not self.fast:
            sides = self.all_sides(spec)
            plan = find_victims(
                self.hosts, spec, self.now,
                lambda c, taken: self.rules.may_preempt(spec, c, taken, sides),
                only=limited,
            )
        elif plan is None and self.cfg.rebalance:
            charge = self.rules.admission(spec)
            if self.rebalance_hopeless(spec.budget, multi, spec.gpus, charge):
                return False
            shape = (spec.budget, spec.gpus, is_debug(spec, self.cfg))
            if not self.rules.waited_out and charge >= self.size_refused.get(shape, _INF):
                return False
            bound, giving, opening, grows_to = self.rebalance_bound(spec)
            # with no side that may give, the search could take unallocated victims only,
            # and that search just failed for this request or for a smaller one: skip it
            self.hosts.refused_after_taking = False
            if bound >= spec.gpus and giving:
                reach = self.reach(giving, multi)
                plan = find_victims(
                    self.hosts,
                    spec,
                    self.now,
                    lambda c, taken: self.rules.may_preempt(spec, c, taken, giving),
                    only=reach if limited is None else reach & limited,
                    budget_ok=lambda budget: self.rules.side_in(budget, giving) is not None,
                )
            if plan is None and self.hosts.refused_after_taking:
                # the whole-host search is greedy: with fewer victims allowed (a larger
                # request's lower limit, a size bound the failed one did not have) it may
                # pass over the host it took first and find room on others, so this failure
                # proves nothing for any other request (HostView.refused_after_taking)
                return False
            if plan is None and limited is None and self.rules.large_refused:
                threshold = _charge_threshold(spec.gpus, None, opening)
                self.size_refused[shape] = min(threshold, self.size_refused.get(shape, _INF))
            elif plan is None and limited is None:
                # a larger request may take more where the overshoot lets it (up to
                # grows_to GPUs): the failure covers only what is larger still
                fails_from = max(spec.gpus, grows_to + 1)
                if not giving and not opening:
                    # no side gives, nor would for a smaller charge (the threshold is 0):
                    # the fair-share rule gives to no request of this budget; nor does the
                    # guarantee rule to a smaller request that still leaves its side over
                    # its share at every level where it might let a sibling give to any,
                    # whatever its charge: worked out only if the budget has smaller work
                    # pending
                    smallest = self.state.smallest_shapes(spec.budget)
                    if smallest and smallest[0][0] < spec.gpus:
                        fails_from = self.guarantee_refused_from(spec.budget, fails_from)
                    # no side gives to such a request: so it finds none to search, whatever
                    # its shape (one host or whole hosts), and fails for the other shape too
                    self.rebalance_fails(spec.budget, not multi, fails_from, 0.0)
                short = bound if bound < spec.gpus else None
                threshold = _charge_threshold(spec.gpus, short, opening)
                self.rebalance_fails(spec.budget, multi, fails_from, threshold)
                if fails_from > spec.gpus and self.covers_its_size(spec, multi):
                    self.same_size_fails(spec.budget, spec.gpus, threshold)
        if plan is None:
            return False
        due = self.checkpoint_due(spec, plan) if rebalancing else None
        if due is not None:
            self.hosts.claim(plan)
            self.await_checkpoints(spec, plan, due)
            return True
        self.preempt_for(spec, plan)
        return True

    def unallocated_plan(self, spec: WorkloadSpec) -> VictimPlan | None:
        """Room for ``spec`` made by displacing unallocated work only (what any allocated
        work may do), or None; a failure is recorded for the larger requests it rules out."""
        multi = spec.gpus > self.hosts.max_size
        if self.fast and spec.gpus >= self.unalloc_fail_min.of(multi):
            return None
        limited = set(spec.hosts) if spec.hosts else None  # None: any host
        plan = find_victims(self.hosts, spec, self.now, None, only=limited)
        if plan is None and limited is None:
            self.unalloc_fail_min.set(multi, spec.gpus)
            self._live.clear()
        return plan

    def preempt_for(self, spec: WorkloadSpec, plan: VictimPlan) -> None:
        """Claim the plan's GPUs for ``spec``, reserve its hosts and stop its victims."""
        self.hosts.claim(plan)
        self.reservations.append(Reservation(spec.id, tuple(h for h, _ in plan.hosts)))
        for victim in plan.victims:
            unallocated = victim.klass == UNALLOCATED
            reason = PreemptReason.UNALLOCATED if unallocated else PreemptReason.REBALANCE
            self.preempts.append(Preempt(victim.id, reason, victim.resumable, by=spec.id))
            self.rules.evict(victim)
        self.waiting[spec.id] = WaitReason.WAITING_FOR_PREEMPTION

    def checkpoint_due(self, spec: WorkloadSpec, plan: VictimPlan) -> float | None:
        """Until when this rebalance may wait for its victims' checkpoints
        (:func:`preemption.checkpoint_due`); None: it does not wait."""
        st = self.state
        return checkpoint_due(plan.victims, st.running, self.now,
                              st.pending[spec.id].queued_at + self.cfg.max_min_runtime,
                              self.cfg, st.checkpoints_awaited(spec.id, self.now))

    def await_checkpoints(self, spec: WorkloadSpec, plan: VictimPlan, due: float) -> None:
        """Put the rebalance off until ``due``, its victims' checkpoints: the plan's GPUs and
        victims stay promised to ``spec`` for this pass (claimed), as for a preemption, but
        nothing is stopped yet; the pass at ``due`` decides afresh (and then preempts,
        losing almost nothing)."""
        self.waits.append(CheckpointWait(spec.id, due, tuple(v.id for v in plan.victims)))
        self.recheck = min(self.recheck, due)
        for victim in plan.victims:
            self.rules.evict(victim)
        self.waiting[spec.id] = WaitReason.WAITING_FOR_CHECKPOINT

    def rebalance_bound(
        self, spec: WorkloadSpec
    ) -> tuple[float, dict[str, str], list[tuple[float, float]], int]:
        """At most how many GPUs could ``spec`` get by rebalancing, and the sides that may
        give way to it (victim side -> the preemptor's side at that level): free, stopping and
        unallocated GPUs, plus from each side the lesser of what its unprotected work holds and
        what the rules let it lose. Fair Tree compares siblings only, so the sides are
        the siblings of the preemptor's ancestors, and only those at or over their share can
        give (see :meth:`RebalanceRules.limit`). A search only runs when the bound reaches the
        request, which in a full cluster is rare.

        Also the sides the fair-share rule spares only for ``spec``'s admission charge, as
        (charge below which the rule would let the side give, GPUs the bound would gain):
        what a shorter request could get more (see :func:`_charge_threshold`).

        And the largest request of the same budget that some side may give more GPUs to
        than to ``spec``, by the guarantee rule's overshoot (0: none,
        :meth:`RebalanceRules.overshoot_room`): up to that size, a failure of ``spec`` says
        nothing about a larger request."""
        victims = self.victims()
        bound = float(self.hosts.reclaimable_unallocated())
        giving: dict[str, str] = {}
        opening: list[tuple[float, float]] = []
        grows_to = 0
        charge = self.rules.admission(spec) * (1 + 1e-9)  # rounding: count a side in, not out
        tree, rules, released = self.state.tree, self.rules, victims.gpus
        for mine in tree.lineage(spec.budget):
            parent = tree.parent_of(mine)
            p = rules.figures(mine)
            if rules.spares_all(spec, p, parent, released):
                continue  # no side at this level gives or opens: nothing to add
            for v in rules.over_children(parent):
                theirs = v.name
                held = released.get(theirs, 0)
                if v is p or not held:
                    continue
                smallest = victims.smallest(theirs)
                limit = rules.limit(spec, p, v)
                grows_to = max(grows_to, rules.overshoot_room(
                    spec, p, v, limit, held, smallest))
                gives = _gives(held, smallest, limit)
                if gives:
                    bound += gives
                    giving[theirs] = mine
                if gives < held:  # would the fair-share rule let it give more?
                    more = _gives(held, smallest, rules.over_share(v)) - gives
                    if more > 0:
                        opens_below = rules.charge_below(p, v)
                        if 0.0 < opens_below <= charge:
                            opening.append((opens_below, more))
        return bound, giving, opening, grows_to

    def guarantee_refused_from(self, budget: str, cap: int) -> int:
        """The lesser of ``cap`` and the fewest GPUs from which a request of ``budget`` leaves
        its side over its share (:meth:`RebalanceRules.first_over`) at every level of its
        path where the guarantee rule might let a sibling give a victim to some request of
        ``budget``, whatever its size: a sibling over its share holding work past its
        minimum runtime, the least of which one preemption takes is within
        :meth:`RebalanceRules.guarantee_most`. At the other levels the rule lets no side
        give to any request of ``budget``, so they do not count. A level is judged only if
        its figure would raise the answer (the siblings are the dearer question)."""
        victims = self.victims()
        tree = self.state.tree
        least = 1
        for mine in tree.lineage(budget):
            first = self.rules.first_over(mine)
            if first <= least:
                continue
            p = self.rules.figures(mine)
            for v in self.rules.over_children(tree.parent_of(mine)):
                theirs = v.name
                if (v is not p and victims.gpus.get(theirs, 0)
                        and self.rules.guarantee_most(p, v) >= victims.smallest(theirs)):
                    if first >= cap:
                        return cap
                    least = first
                    break
        return least

    def all_sides(self, spec: WorkloadSpec) -> dict[str, str]:
        """Every side that could hold victims for ``spec`` (each sibling of each of its
        budget's ancestors -> that ancestor), whether the rules let it give or not: what the
        reference pass searches with instead of :meth:`rebalance_bound`'s ``giving``
        (:meth:`RebalanceRules.may_preempt` refuses a victim a side may not lose)."""
        tree = self.state.tree
        sides: dict[str, str] = {}
        for mine in ancestors(spec.budget)[:-1]:
            for theirs in tree.children(tree.parent_of(mine)):
                if theirs != mine:
                    sides[theirs] = mine
        return sides

    def reach(self, giving: dict[str, str], whole_hosts: bool) -> set[str]:
        """The hosts where rebalancing with victims of the sides ``giving`` can make room,
        once the unallocated-only search has failed: those holding work of such a side. One
        host: no other reaches the request with free, stopping and unallocated GPUs alone
        (that search just failed, or failed for fewer GPUs). Whole hosts: besides hosts with
        no allocated work, a host may be emptied only if all its allocated work is of such
        sides and, none of it protected, past its minimum runtime, so among their hosts."""
        hosts = self.victims().hosts
        reach: set[str] = set().union(*(hosts[theirs] for theirs in giving))
        if whole_hosts:
            reach |= self.hosts.unallocated_hosts()
        return reach

    def victims(self) -> Released:
        """Allocated work past its minimum runtime and not stopping, per budget node: the
        GPUs it holds (an upper bound on what rebalancing could take from that subtree), its
        smallest workload (the least one preemption there takes) and its hosts. The state
        keeps it as protections end; asked once per pass."""
        if self._victims is None:
            self._victims = self.state.released(self.now)
        return self._victims

    # ---- phase 4: backfill unallocated work ------------------------------------------------
    def backfill_unallocated(self) -> None:
        st = self.state
        fast = self.fast
        if fast and self.none_left():
            return  # not one GPU left: nothing more can start this pass
        if fast and not self.reasons and self.nothing_fits():
            return  # nobody to tell why: spare ranking the budgets
        leaves = sorted(
            (leaf for leaf, q in st.unallocated_queues.items() if q),
            key=lambda leaf: (self.rules.ratio(leaf), leaf),
        )
        for leaf in leaves:
            queue = st.unallocated_queues[leaf]
            hopeless = fast and self.cannot_fit(st.unallocated_sizes[leaf])
            for i, (_, wid) in enumerate(queue):
                if fast and self.none_left():
                    return  # not one GPU left: nothing more can start this pass
                if hopeless:
                    if not self.reasons:
                        break
                    rest = [w for _, w in queue[i:]]  # as failed tries would record them
                    self.order.extend(rest)
                    self.waiting.update(dict.fromkeys(rest, WaitReason.NO_CAPACITY))
                    break
                spec = st.pending[wid].spec
                self.order.append(wid)
                if not self.try_fit(spec):
                    self.waiting[wid] = WaitReason.NO_CAPACITY
                    # only a failure lowers the thresholds
                    hopeless = fast and self.cannot_fit(st.unallocated_sizes[leaf])

    def backfill_reserved(self) -> None:
        """The reserved hosts' free GPUs to work that cannot delay their reservations."""
        if not self.fences:
            return
        started = {s.workload for s in self.starts} | self.handled
        for spec, placement in reservations.backfill(
            self.state, self.hosts, self.rules, self.cfg, self.fences, started, self.now
        ):
            self.starts.append(Start(spec.id, placement))
            if spec.allocated:
                self.rules.admit(spec)
            self.waiting.pop(spec.id, None)

    def none_left(self) -> bool:
        """Is not one GPU left to start unallocated work on? Known without a try when the
        pass need not tell why work waits; else once a try of one GPU failed, so that the
        unallocated requests before it are still looked at and told why they wait."""
        return self.fit_fail_min.one <= 1 and (self.tried_one_gpu or not self.reasons)

    def nothing_fits(self) -> bool:
        """Would no pending unallocated request fit on the GPUs free now? One host's work
        fits only within the most free on a host, larger work only on wholly free hosts
        (the kept bounds are exact as of when they were first asked, upper bounds once the
        walk hands GPUs out: a request above one is above the figure now; only one within it
        needs the figure worked out afresh)."""
        single, multi = self.state.smallest_unallocated()
        hosts = self.hosts
        return (single > hosts.room(False) or single > hosts.room(False, fresh=True)) and (
            multi > hosts.room(True) or multi > hosts.room(True, fresh=True))

    def cannot_fit(self, sizes: Mapping[tuple[int, float], int]) -> bool:
        """Would a request of each of these sizes fail to fit, by the pass's thresholds?"""
        fail = self.fit_fail_min
        return all(gpus >= fail.of(gpus > self.hosts.max_size) for gpus, _ in sizes)


__all__ = ["Candidate", "PolicyConfig", "TooLarge", "decide", "is_debug", "validate_spec",
           "victim_class"]
