"""Who may displace whom.

Unallocated work may be displaced by any allocated workload. Allocated work may be
displaced only after its minimum runtime (enforced in :mod:`placement`, whatever the rules
here say) and only under one of two rules, both judged at the level where the two budgets'
paths diverge (the two sibling subtrees under their lowest common ancestor, as Fair Tree
compares them):

* **guarantee**: the victim's side holds more than its share of the healthy GPUs, the
  preemptor's side stays within its share after the swap, and the victim's side ends at
  least as far over (relative to its share) as the preemptor's (a tie is allowed: a budget
  asking for exactly its share must get it from a side holding exactly that much too many).
  This is what makes "a budget asking for no more than its share gets it within
  ``max_min_runtime``" true.
* **fair share**: the victim's side has the higher usage ratio over the lookback window (by
  ``rebalance_margin``, after charging the preemptor's admission), and stays at or above its
  share after the swap. This lets an under-used budget burst to reclaim what it missed.

Neither rule can be undone by the other right away: after a guarantee swap the preemptor's
side is within its share, so the guarantee rule cannot turn back (its victim side must hold
more than its share) and the fair-share rule (victim must stay at or above share) cannot either;
after a fair-share swap the victim's side is still at or above its share, so taking a GPU
back would put it over. No ping-pong.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Final

from .config import HOUR, PolicyConfig, is_debug
from .ledger import UsageLedger, usage_ratio
from .tree import BudgetTree, ancestors
from .types import Running, WorkloadSpec

_EPS: Final = 1e-9
_INF: Final = float("inf")
UNALLOCATED: Final = 1  # the victim class of unallocated work (see victim_class)


def victim_class(spec: WorkloadSpec) -> int:
    """Cheaper victims first: 1 unallocated, 2 allocated and resumable, 3 allocated only."""
    if not spec.allocated:
        return UNALLOCATED
    return 2 if spec.resumable else 3


class Candidate:
    """A running workload as a possible victim, with what preempting it would cost.

    A plain class with final attributes rather than a frozen dataclass: searches build
    thousands per second, and compiled, this is several times cheaper to construct."""

    __slots__ = (
        "budget", "gpus", "hosts", "id", "klass", "lost", "protected_until", "restarted_at",
        "resumable",
    )

    def __init__(
        self,
        id: str,
        budget: str,
        gpus: int,
        klass: int,
        lost: float,  # GPU-seconds of progress a preemption would throw away (estimate)
        protected_until: float,
        resumable: bool,
        hosts: tuple[str, ...] = (),  # where it runs: preempting it frees GPUs on all of them
        restarted_at: float = float("-inf"),  # start of this run if it is a restart
    ) -> None:
        self.id: Final = id
        self.budget: Final = budget
        self.gpus: Final = gpus
        self.klass: Final = klass
        self.lost: Final = lost
        self.protected_until: Final = protected_until
        self.resumable: Final = resumable
        self.hosts: Final = hosts
        self.restarted_at: Final = restarted_at

    def __repr__(self) -> str:
        return f"Candidate({self.id!r}, {self.budget!r}, {self.gpus}, klass={self.klass})"

    @staticmethod
    def of(r: Running, now: float, default_checkpoint: float) -> Candidate:
        # the class by name, not ``cls``: compiled, that is a direct constructor call
        # rather than a generic one with its arguments parsed (victim searches build many)
        return Candidate(
            r.spec.id,
            r.spec.budget,
            r.gpus_held,
            victim_class(r.spec),
            r.at_risk(now, default_checkpoint) * r.gpus_held,
            r.protected_until(),
            r.spec.resumable,
            r.hosts,
            r.started_at if r.restarted and r.spec.allocated else float("-inf"),
        )


def rebalance_protected_until(r: Running, config: PolicyConfig) -> float:
    """Until when running ``r`` is no rebalance victim, as the policy applies it: allocated
    work until the end of its minimum runtime (placement offers no victim inside it,
    :meth:`Running.protected_until`) or, for a run that resumes after a requeue, until
    ``restart_protection`` after that restart (:meth:`RebalanceRules.may_preempt` refuses
    it), whichever is later; unallocated work not at all (its start: any allocated work
    may displace it at once, restarted or not). A reservation's hosts are ready for it no
    sooner either (:func:`~apportion.core.reservations.plan`).

    A drain waits for the minimum runtime alone (:meth:`Running.protected_until`), and a
    host failure for nothing. What ``explain`` and the service's queue show as running
    work's protection, so that they agree with what :func:`~apportion.core.decide` does."""
    until = r.protected_until()
    if r.restarted and r.spec.allocated:
        until = max(until, r.started_at + config.restart_protection)
    return until


def next_checkpoint(r: Running, at: float, config: PolicyConfig) -> float:
    """The first moment from ``at`` when preempting ``r`` loses nothing it has not saved:
    at once if it checkpoints on SIGTERM, else at its next checkpoint (the one it reported
    plus its interval, or its interval's next multiple since its start)."""
    spec = r.spec
    if spec.checkpoint_on_term:
        return at
    interval = spec.checkpoint_interval or config.default_checkpoint_interval
    if interval <= 0:
        return at
    since = r.started_at if r.checkpointed_at is None else max(r.checkpointed_at, r.started_at)
    return since + math.ceil(max(0.0, at - since) / interval - _EPS) * interval


def checkpoint_due(
    victims: Iterable[Candidate], running: Mapping[str, Running], now: float,
    latest: float, config: PolicyConfig, waited: AbstractSet[str] = frozenset(),
) -> float | None:
    """Until when a plan's preemptions may wait so that no victim loses progress: the last
    of their next checkpoints, if every victim with progress at risk is resumable and
    checkpoints within ``checkpoint_wait``, and no later than ``latest`` (the preemptor's
    ``queued_at + max_min_runtime``: the share guarantee's bound); None: preempt now.
    A victim in ``waited`` (the preemptor waited for its checkpoint already, and that wait
    is over: :meth:`ClusterState.checkpoints_awaited`) is not waited for again.

    A restarted run that reported no checkpoint is not waited for: its checkpoints fall
    after its set-up time, which the policy does not know, so the estimate would miss them.
    A plan with a victim that would lose its progress anyway (non-resumable, or too far
    from a checkpoint) preempts at once: waiting would only add to what is lost."""
    if config.checkpoint_wait <= 0:
        return None
    due = now
    for c in victims:
        if c.lost <= 0.0 or c.id in waited:
            continue
        r = running[c.id]
        if not r.spec.resumable or (r.restarted and r.checkpointed_at is None):
            return None
        at = next_checkpoint(r, now, config)
        if at - now > config.checkpoint_wait:
            return None
        due = max(due, at)
    if due <= now + 1e-6 or due > latest:
        return None
    return due


def size_bound_lifts(queued_at: float, config: PolicyConfig) -> float:
    """When the victim size bound (:meth:`RebalanceRules.largest_victim`) stops applying to
    work queued at ``queued_at``: an hour before the share guarantee's deadline
    (``queued_at + max_min_runtime``), so that a pass comes by the deadline with the bound
    lifted; the drivers pass at least hourly (the simulator at every hour's end, the
    service every ``interval_s``). A fixed time, not a pass asked for when the bound refuses
    a victim: which requests a pass searches depends on its shortcuts, and the reference
    pass must decide the same."""
    return queued_at + max(0.0, config.max_min_runtime - HOUR)


class Figures:
    """What the rules read of one budget node in a pass: its share of the cluster, the
    same in healthy GPUs, the GPUs its allocated work holds as the pass moves them, and its
    charged GPU-seconds and usage ratio once read. One record per node the pass looks at,
    so that a rule reads a node with one lookup, not one per figure (a pass judges a few
    hundred sides), and the rules' inner loops pass the record itself, not the name."""

    def __init__(self, name: str, share: float, fair: float, held: float) -> None:
        self.name = name
        self.share = share
        self.fair = fair  # share x healthy GPUs
        self.held = held  # a whole number, kept as a float as the rules compute with it
        self.used = 0.0  # charged GPU-seconds in the window, read from the ledger once
        self.read = False  # is ``used`` read?
        self.extra = 0.0  # provisional admission charges of this pass
        self.ratio = 0.0
        self.rated = False  # is ``ratio`` up to date (no admission charged the node since)?


def _within(p: Figures, gpus: int) -> bool:
    """Would side ``p`` stay within its share with ``gpus`` more? The guarantee rule's test,
    the one expression every reader of it uses."""
    return (p.held + gpus) / p.fair <= 1 + _EPS


def _first_over(p: Figures) -> int:
    """The fewest GPUs (at least 1) that side ``p`` would not stay within its share with
    (:func:`_within` false): found near the figure, then exactly with the same
    floating-point test, which only turns false as the count grows."""
    gpus = max(1, int((1 + _EPS) * p.fair - p.held))
    while gpus > 1 and not _within(p, gpus - 1):
        gpus -= 1
    while _within(p, gpus):
        gpus += 1
    return gpus


class RebalanceRules:
    """Usage ratios of one pass, moved by the pass's own admissions and evictions."""

    def __init__(
        self,
        tree: BudgetTree,
        ledger: UsageLedger,
        held: Mapping[str, int],
        now: float,
        capacity: float,
        healthy: int,
        config: PolicyConfig,
    ) -> None:
        self.tree = tree
        self.ledger = ledger
        self.now = now
        # GPUs allocated work holds at the pass's start, per node (the state's own dict: a
        # dict, not any mapping, so that the compiled core reads it without a method call)
        self._start_held: dict[str, int] = held if isinstance(held, dict) else dict(held)
        # per node, read on first use (a pass only looks at the nodes its walk visits)
        self._figures: dict[str, Figures] = {}
        self.capacity = capacity  # healthy GPU-seconds in the window
        self.healthy = healthy  # healthy GPUs now
        self.cfg = config
        # answers kept until the next admission or eviction moves the numbers they read
        self._over: dict[str, list[Figures]] = {}  # parent -> its children at or over share
        # parent -> the two highest (usage ratio, name) among them that hold victims
        self._top: dict[str, list[tuple[float, str]]] = {}
        self.memo = config.shortcuts  # False: every ratio read afresh from the ledger
        # set per request by the pass: is it past size_bound_lifts (then the victim size
        # bound no longer applies)? And did the bound refuse a victim the rules allowed
        # (then the failure says nothing of larger requests, whose bound is larger)?
        self.waited_out = False
        self.large_refused = False

    def figures(self, node: str) -> Figures:
        """The pass's record of ``node`` (made on first use)."""
        figures = self._figures.get(node)
        if figures is None:
            share = self.tree.share(node)
            figures = self._figures[node] = Figures(
                node, share, share * self.healthy, float(self._start_held.get(node, 0))
            )
        return figures

    def ratio(self, node: str) -> float:
        """Usage ratio: charged GPU-seconds / (share x healthy GPU-seconds), over the window."""
        return self.ratio_of(self.figures(node))

    def ratio_of(self, f: Figures) -> float:
        """:meth:`ratio` of the node whose record is ``f``."""
        if f.rated and self.memo:
            return f.ratio
        if not f.read or not self.memo:
            f.used = self.ledger.charged(f.name, self.now, self.cfg.lookback, self.memo)
            f.read = True
        f.ratio = usage_ratio(f.used + f.extra, f.share, self.capacity)
        f.rated = True
        return f.ratio

    def held(self, node: str) -> float:
        """GPUs the allocated work of ``node``'s subtree holds now (not stopping), as this
        pass has moved them."""
        return self.figures(node).held

    def add_held(self, node: str, gpus: int) -> None:
        self.figures(node).held += gpus

    def admission(self, spec: WorkloadSpec) -> float:
        return self.charge(spec.gpus, spec.min_runtime)

    def charge(self, gpus: int, min_runtime: float) -> float:
        """GPU-seconds charged at admission to work of this shape."""
        return gpus * min_runtime * self.cfg.admission_charge

    def admit(self, spec: WorkloadSpec) -> None:
        charge = self.admission(spec)
        self._moved(spec.budget)
        for node in self.tree.lineage(spec.budget):
            f = self.figures(node)
            f.extra += charge
            f.held += spec.gpus
            f.rated = False

    def evict(self, victim: Candidate) -> None:
        if victim.klass != UNALLOCATED:
            self._moved(victim.budget)
            for node in self.tree.lineage(victim.budget):
                self.add_held(node, -victim.gpus)

    def _moved(self, budget: str) -> None:
        """Forget the answers that read the numbers of ``budget`` or its ancestors: which
        children of each of its ancestors are at or over their share."""
        for node in ancestors(budget)[1:]:
            self._over.pop(node, None)
            self._top.pop(node, None)

    def sides(self, spec: WorkloadSpec) -> dict[str, str]:
        """For each subtree that may hold victims for work of ``spec``'s budget under either
        rule, the preemptor's own side at that level. A superset: judged for the smallest
        possible request (one GPU, no admission charge); :meth:`may_preempt` then judges the
        real request. (A pass asks the narrower question per request, in
        ``Pass.rebalance_bound``; this answers ``apportion why``.)

        Fair Tree compares siblings only, so it suffices to walk up the preemptor's path and
        look at each ancestor's siblings: a handful of checks instead of one per budget."""
        out: dict[str, str] = {}
        for mine in self.tree.lineage(spec.budget):
            smallest = WorkloadSpec("\x00side", mine, 1, 0.0, 0.0)
            p = self.figures(mine)
            for v in self.over_children(self.tree.parent_of(mine)):
                if v is not p and self.limit(smallest, p, v) >= 0:
                    out[v.name] = mine
        return out

    def over_children(self, parent: str) -> list[Figures]:
        """The records of the children of ``parent`` holding at least their share of the
        healthy GPUs: the only ones either rule lets give way (see :meth:`limit`), shared by
        all their siblings."""
        cached = self._over.get(parent)
        if cached is None or not self.memo:
            cached = []
            for kid in self.tree.children(parent):
                f = self.figures(kid)
                if f.held >= (1 - _EPS) * f.fair:
                    cached.append(f)
            self._over[parent] = cached
        return cached

    def spares_all(
        self, spec: WorkloadSpec, p: Figures, parent: str, victims: dict[str, int]
    ) -> bool:
        """Does neither rule let any sibling of side ``p`` (under ``parent``) that holds GPUs
        in ``victims`` give ``spec`` a GPU, nor would a smaller admission charge let one
        (``charge_below`` at most 0 for each)? Then ``Pass.rebalance_bound`` gains nothing
        at this level, and need not judge the siblings one by one.

        Exact, not a bound: the guarantee rule allows none when ``mine`` would end over its
        share (:meth:`_within_share`, as :meth:`limit` asks it); the fair-share test and
        ``charge_below`` only grow with the sibling's usage ratio (floating-point rounding
        is monotone too), so if they fail for the highest ratio among the siblings holding
        victims, they fail for every one. ``victims`` must be the pass's one
        (``Pass.victims``): the answer is kept per parent until an admission or eviction
        moves the numbers (as :meth:`over_children`'s)."""
        if self._within_share(spec, p):
            return False  # the guarantee rule may let some sibling give
        return self.fair_share_spares(p, parent, victims, self.admission(spec))

    def fair_share_spares(
        self, p: Figures, parent: str, victims: dict[str, int], charge: float
    ) -> bool:
        """Does the fair-share rule let no sibling of side ``p`` (under ``parent``) that
        holds GPUs in ``victims`` give work of ``p`` with an admission charge of ``charge``
        a GPU, nor would a smaller charge let one? Judged on the highest ratio among those
        siblings (see :meth:`spares_all`, which adds the guarantee rule)."""
        top = self._top.get(parent)
        if top is None or not self.memo:
            ranked = [(self.ratio_of(kid), kid.name)
                      for kid in self.over_children(parent) if victims.get(kid.name, 0)]
            ranked.sort(reverse=True)
            top = self._top[parent] = ranked[:2]
        highest = -1.0  # the highest ratio among the others: ``p`` may be one of the two
        for ratio, kid in top:
            if kid != p.name:
                highest = ratio
                break
        else:
            return True  # no sibling holds victims
        ratio_p = self.ratio_of(p) + usage_ratio(charge, p.share, self.capacity)
        if highest > ratio_p * (1 + self.cfg.rebalance_margin):
            return False  # the fair-share rule lets it give
        return self.charge_below_ratio(p, highest) <= 0.0

    @staticmethod
    def side_in(budget: str, sides: dict[str, str]) -> str | None:
        """The side among ``sides`` (as from :meth:`sides`) that work of ``budget`` is on,
        if any: the sides are siblings of the preemptor's ancestors, so one of ``budget``'s
        ancestors among them is the side where the two diverge."""
        for node in ancestors(budget):
            if node in sides:
                return node
        return None

    def may_preempt(
        self, spec: WorkloadSpec, victim: Candidate, taken: dict[str, int], sides: dict[str, str]
    ) -> bool:
        """May ``spec`` displace ``victim``, given the GPUs already ``taken`` (per victim
        budget) from others in the same plan? ``sides`` maps each victim side that may give
        way to the preemptor's side at that level (from :meth:`sides` or narrower); a victim
        elsewhere may not be taken. Protection is checked by the caller."""
        if victim.klass == UNALLOCATED:
            return True
        if self.now < victim.restarted_at + self.cfg.restart_protection:
            return False  # restarted a short while ago: moving it again is churn
        theirs = self.side_in(victim.budget, sides)
        if theirs is None:
            return False  # same budget (priority never preempts), or that side is not over
        mine = sides[theirs]
        already = sum(
            g for leaf, g in taken.items() if leaf == theirs or leaf.startswith(theirs + "/")
        )
        if already + victim.gpus > self.limit(spec, self.figures(mine), self.figures(theirs)):
            return False
        if not self.waited_out and victim.gpus > self.largest_victim(spec):
            self.large_refused = True
            return False
        return True

    def largest_victim(self, spec: WorkloadSpec) -> float:
        """The most GPUs a rebalance victim of ``spec`` may hold before ``spec`` has waited
        out the guarantee's bound (``PolicyConfig.victim_max_factor``): taking a run many
        times the request's size destroys far more progress than the request gains, while
        the queue's churn (ends, protections running out) usually opens smaller room
        within that bound."""
        factor = self.cfg.victim_max_factor
        if factor <= 0:
            return _INF
        largest = factor * spec.gpus
        if is_debug(spec, self.cfg):
            largest = max(largest, float(self.cfg.debug_max_gpus))
        return largest

    def tightest_bound(self, spec: WorkloadSpec) -> bool:
        """Did ``spec``'s last search run under the tightest size bound any request of its
        size may have (not waited out, and no debug allowance above the factor's), or under
        none for all (the bound off)? Set by the caller: ``waited_out``."""
        factor = self.cfg.victim_max_factor
        if factor <= 0:
            return True
        return not self.waited_out and self.largest_victim(spec) == factor * spec.gpus

    @staticmethod
    def over_share(v: Figures) -> float:
        """GPUs side ``v`` holds above its share: what the fair-share rule lets it lose
        (as in :meth:`limit`)."""
        return v.held - (1 - _EPS) * v.fair

    def charge_below(self, p: Figures, v: Figures) -> float:
        """The admission charge below which the fair-share rule lets work of side ``p``
        take from its sibling ``v`` (see :meth:`limit`); 0 or less if at none."""
        return self.charge_below_ratio(p, self.ratio_of(v))

    def charge_below_ratio(self, p: Figures, ratio_theirs: float) -> float:
        """:meth:`charge_below` for a sibling with this usage ratio."""
        margin = 1 + self.cfg.rebalance_margin
        return (ratio_theirs / margin - self.ratio_of(p)) * (p.share * self.capacity)

    @staticmethod
    def _within_share(spec: WorkloadSpec, p: Figures) -> bool:
        """Would the preemptor's side ``p`` stay within its share with ``spec`` admitted?
        Only then may the guarantee rule let any side give."""
        return _within(p, spec.gpus)

    def first_over(self, node: str) -> int:
        """The fewest GPUs (at least 1) from which a request would leave side ``node`` over
        its share (:meth:`_within_share` false), so that the guarantee rule lets no sibling
        of ``node`` give to it: found with the same floating-point test, which only turns
        false as the count grows."""
        return _first_over(self.figures(node))

    @staticmethod
    def guarantee_most(p: Figures, v: Figures) -> float:
        """At least as much as the guarantee rule lets any request of side ``p``'s work
        take from its sibling ``v``, whatever its size (:meth:`_guarantee`); negative
        if it lets none take a GPU. It applies only to a request within the share of
        ``p`` (:func:`_within`, false from :func:`_first_over` on); of its two terms the
        first falls with the request and the overshoot grows with it, so each is taken at
        the size that makes it largest (1 GPU, the largest request within the share), and
        floating-point rounding is monotone, so no request's figure is above it."""
        if not _within(p, 1) or v.held <= v.fair:
            return -1.0
        room = _first_over(p) - 1  # the largest request within the share: at least 1
        return max(v.held - ((p.held + 1) / p.fair - _EPS) * v.fair, v.held - v.fair + room)

    def overshoot_room(
        self, spec: WorkloadSpec, p: Figures, v: Figures, limit: float, released: int,
        smallest: int,
    ) -> int:
        """The largest request of ``spec``'s budget to which side ``v`` may give more
        than to ``spec`` by the guarantee rule's overshoot, or 0 if none. ``limit`` is what
        it may lose to ``spec`` (:meth:`limit`), ``released`` the GPUs of its work past its
        minimum runtime and ``smallest`` the least of them one preemption takes.

        The overshoot grows with the request (the victim side may end up to the request
        below its share), so a larger request may take a victim a smaller one may not; it
        applies while the preemptor's side ``p`` stays within its share, so up to the
        largest such request (its room). It lets the side give more only if the limit at
        that room is above ``limit`` and reaches its smallest victim, and ``limit`` does not
        already cover all it could give. Beyond the room the guarantee rule lets this side
        lose no more than to ``spec``."""
        if limit >= released:
            return 0  # it may already lose all it could: a larger limit gives no more
        if not self._within_share(spec, p) or v.held <= v.fair:
            return 0  # the rule allows nothing here to spec, nor to any larger request
        room = _first_over(p) - 1  # at least spec.gpus: the side is within its share with it
        most = v.held - v.fair + room  # the overshoot's limit at the room: the largest
        return room if most > limit and most >= smallest else 0

    def _guarantee(self, spec: WorkloadSpec, p: Figures, v: Figures) -> float:
        """The most GPUs the guarantee rule alone lets ``spec`` take from the side ``v``
        (as in :meth:`limit`, ``p`` the preemptor's side); negative if none."""
        held_v = v.held
        fair_v = v.fair
        inst_p = (p.held + spec.gpus) / p.fair
        if self._within_share(spec, p) and held_v > fair_v:
            # the victim side ends at least as far over as the preemptor's, or (overshoot)
            # at most the preemptor's request below its own share: the last victim may hold
            # more GPUs than are missing (one 4-GPU victim for a 2-GPU request that brings
            # its side to its share), or a budget owed a little could wait for ever behind
            # larger work; no more GPUs are left idle than the preemptor gets
            return max(held_v - (inst_p - _EPS) * fair_v, held_v - fair_v + spec.gpus)
        return -1.0

    def limit(self, spec: WorkloadSpec, p: Figures, v: Figures) -> float:
        """The most GPUs the rules let ``spec`` take from side ``v`` (the sibling of its own
        side ``p``) in one pass; negative if neither rule allows any. One number per side
        lets a pass bound what rebalancing could free before searching hosts."""
        held_v = v.held
        fair_v = v.fair  # the victim side's share, in GPUs
        if held_v < (1 - _EPS) * fair_v:
            return -1.0  # under its share: both rules spare it (the common case, and cheap)
        best = self._guarantee(spec, p, v)
        if best >= held_v - (1 - _EPS) * fair_v:
            return best  # the fair-share rule's limit (share itself) is no higher
        ratio_p = self.ratio_of(p) + usage_ratio(self.admission(spec), p.share, self.capacity)
        if self.ratio_of(v) > ratio_p * (1 + self.cfg.rebalance_margin):
            # fair-share rule: the victim side stays at or above its share
            best = max(best, held_v - (1 - _EPS) * fair_v)
        return best
