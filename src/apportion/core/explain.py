"""Why a workload waits, and when it may start: ``explain(state, now, config, id)``.

Pure like :func:`~apportion.core.policy.decide` (it runs one pass and reads its result), so
the answer is the policy's own reasoning, not a re-implementation of it:

* **position**: where the first pass at ``now`` considers the workload (``Decisions.order``);
* **ratios**: its budget's usage ratio (the sort metric) and, for every sibling subtree whose
  work the pass considers before it, both sides' ratios at the level where the two paths
  diverge (Fair Tree compares siblings only). Ratios are those at the start of the pass;
  admission charges during the pass raise the ratio of every budget that admits work, which
  is how a side that starts with a higher ratio can still get ahead. Allocated work ahead
  of unallocated work is counted apart: it comes first whatever the ratios;
* **victims**: the cheapest room the victim search finds for it now *if the rules and
  protection allowed anything* (stopping work counts as free), each victim marked with its
  protection end and whether the rebalance rules would let it go today;
* **earliest start**: for work that does not fit, the earliest moment the protection of the
  work in its way ends: the minimum over the hosts it could use of the latest protection end
  among the work it would need there (the work started by this same pass included). It is a
  *lower bound* when work considered before it is still waiting, and never a promise: work
  may also end on its own earlier, and protection ending does not oblige the rules to let
  it preempt.

* **advice**: the least changes to the request with which the policy would start it
  sooner: a shorter minimum runtime, fewer GPUs, for unallocated work a minimum runtime
  (allocated work may displace unallocated work), for allocated work none (unallocated).
  Each is *computed*, by running :func:`decide` on the state with the workload's request
  changed, at ``now`` and at the next moments where protection of running work ends
  (:func:`_moments`), as is the workload's **projected start** "if nothing else changes"
  (no work ends on its own, nothing new arrives). The changed requests are swapped into the
  state and out again, so the state is left exactly as it was (see :func:`_advise`).

Running work is explained by its protection: until when no rebalance preempts it (its
minimum runtime, and for a run resumed after a requeue its restart protection:
:func:`~apportion.core.preemption.rebalance_protected_until`, what the victim search and the
rules apply); a drain of its hosts waits for its minimum runtime only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .config import PolicyConfig, is_debug
from .placement import HostView, find_victims
from .policy import Pass, decide
from .preemption import UNALLOCATED, Candidate, rebalance_protected_until, size_bound_lifts
from .state import ClusterState
from .types import CoreError, Decisions, Placement, Running, WaitReason, WorkloadSpec
from .units import format_duration, format_duration_exact, plural

MAX_MOMENTS = 6
"""Moments a projection looks at: ``now`` and protection ends after it (evenly picked when
there are more), so one answer costs a bounded number of passes however busy the cluster."""
MAX_PASSES = 16
"""Passes one explanation may run for its projection and advice (a pass of the 1,024-GPU
benchmark state takes about 0.1 s with the pure-Python core); past it, advice stops."""
LADDER = (6 * 3600.0, 4 * 3600.0, 2 * 3600.0, 3600.0, 1800.0, 900.0, 300.0, 60.0)
"""Minimum runtimes advice tries (a person's round numbers), besides the debug limit and 0."""


@dataclass(frozen=True, slots=True)
class Rival:
    """A sibling subtree whose work the pass considers before the explained workload."""

    path: str  # the rival's side, under the lowest common ancestor
    ratio: float
    mine: str  # the explained workload's side at the same level
    mine_ratio: float
    workloads: int  # how many of its workloads come first


@dataclass(frozen=True, slots=True)
class Victim:
    """Running work the explained workload would need to displace."""

    id: str
    budget: str
    gpus: int
    allocated: bool
    resumable: bool
    protected_until: float  # no rebalance victim before (rebalance_protected_until)
    protected: bool  # still inside its minimum runtime or restart protection at ``now``
    # unallocated, or the rebalance rules let this workload take it now, its protection
    # apart (that is ``protected``)
    rules_allow: bool
    # when the rules do not (work of another budget): what they refuse, in words
    why_not: str = ""


@dataclass(frozen=True, slots=True)
class Advice:
    """A changed request with which the policy would start the workload sooner, if nothing
    else changes: ``start`` (``== now``: the next pass) on ``hosts``, displacing
    ``preempting`` (then it starts once they have exited)."""

    change: str  # "min_runtime" or "gpus": what differs from the request
    min_runtime: float
    gpus: int
    start: float
    hosts: tuple[str, ...]
    preempting: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Explanation:
    """The answer to "why is it not running / until when is it safe". Times are the
    driver's clock (seconds). Fields for pending work are None/empty for running work and
    the other way round."""

    workload: str
    status: str  # "pending", "running" or "stopping"
    budget: str
    gpus: int
    allocated: bool
    now: float
    ratio: float  # the budget's usage ratio at the start of the pass
    # ---- pending ----
    position: int | None = None  # 1-based, in the first pass's order; None: not reached
    considered: int = 0  # how many workloads that pass considered
    allocated_ahead: int = 0  # of unallocated work: the allocated work considered before it
    same_budget_ahead: int = 0
    rivals: tuple[Rival, ...] = ()
    wait_reason: WaitReason | None = None
    starts_now: bool = False  # the next pass starts it (placement below)
    preempting: tuple[str, ...] = ()  # victims the pass stops for it right now
    # stopped by an earlier pass: the stopping work on the hosts being freed for it
    freeing: tuple[str, ...] = ()
    freed_by: float | None = None  # the last of ``freeing``'s grace ends, if the driver knows
    awaiting: tuple[str, ...] = ()  # victims it waits to checkpoint before preempting them
    plan_hosts: tuple[str, ...] = ()
    victims: tuple[Victim, ...] = ()
    earliest_start: float | None = None
    lower_bound: bool = False
    caveats: tuple[str, ...] = ()
    min_runtime: float = 0.0  # as requested (pending and running)
    projected_start: float | None = None  # by the policy if nothing else changes; None: not
    projection_end: float | None = None  # ... within the moments looked at, up to this time
    advice: tuple[Advice, ...] = ()
    # ---- running ----
    started_at: float | None = None
    protected_until: float | None = None  # no rebalance victim before (see module doc)
    min_runtime_ends: float | None = None  # a drain stops it from then (its start: unallocated)
    restarted: bool = False  # this run resumes after a requeue (restart protection, if allocated)
    placement: Placement = ()
    draining: tuple[str, ...] = ()  # hosts of its placement being drained: it is stopped
    resumable: bool = False  # requeued when preempted (pending or running)
    pool: str = ""  # the pool explained, named when the fleet has several (pending)
    at_risk: float | None = None  # progress a preemption now would throw away (seconds)
    checkpointed_at: float | None = None  # its last checkpoint reported in this run
    checkpoint_on_term: bool = False  # it checkpoints when told to stop
    checkpoint_interval: float = 0.0  # as declared, else the policy's default
    time_limit: float = 0.0  # of one run, as given or the policy's default (0: none)
    time_limit_at: float | None = None  # the pass from then stops it: timeout (None: no limit)
    # stopping work: when the driver kills it if it has not exited (None: not known), and
    # why it was told to stop (the driver's words: the core does not keep them; "": not known)
    killed_at: float | None = None
    stop_reason: str = ""

    def lines(self, clock: Callable[[float], str] | None = None) -> list[str]:
        """The explanation as short sentences for people. Times are relative to ``now``
        ("in 2 h 10 min"); with ``clock``, which writes a time as people read it (the
        driver's choice: the core has no clock), absolute too ("at 14:05 (in 2 h 10 min)")."""
        return _lines(self, clock)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (enums as their value, tuples as lists)."""
        return {
            "workload": self.workload,
            "status": self.status,
            "budget": self.budget,
            "gpus": self.gpus,
            "allocated": self.allocated,
            "now": self.now,
            "ratio": self.ratio,
            "position": self.position,
            "considered": self.considered,
            "allocated_ahead": self.allocated_ahead,
            "same_budget_ahead": self.same_budget_ahead,
            "rivals": [
                {"path": r.path, "ratio": r.ratio, "mine": r.mine, "mine_ratio": r.mine_ratio,
                 "workloads": r.workloads}
                for r in self.rivals
            ],
            "wait_reason": self.wait_reason.value if self.wait_reason else None,
            "starts_now": self.starts_now,
            "preempting": list(self.preempting),
            "freeing": list(self.freeing),
            "freed_by": self.freed_by,
            "awaiting": list(self.awaiting),
            "plan_hosts": list(self.plan_hosts),
            "victims": [
                {"id": v.id, "budget": v.budget, "gpus": v.gpus, "allocated": v.allocated,
                 "resumable": v.resumable, "protected_until": v.protected_until,
                 "protected": v.protected, "rules_allow": v.rules_allow,
                 "why_not": v.why_not}
                for v in self.victims
            ],
            "earliest_start": self.earliest_start,
            "lower_bound": self.lower_bound,
            "caveats": list(self.caveats),
            "started_at": self.started_at,
            "protected_until": self.protected_until,
            "min_runtime_ends": self.min_runtime_ends,
            "restarted": self.restarted,
            "placement": [[s.host, s.gpus] for s in self.placement],
            "resumable": self.resumable,
            "draining": list(self.draining),
            "at_risk": self.at_risk,
            "checkpointed_at": self.checkpointed_at,
            "checkpoint_on_term": self.checkpoint_on_term,
            "checkpoint_interval": self.checkpoint_interval,
            "time_limit": self.time_limit,
            "time_limit_at": self.time_limit_at,
            "killed_at": self.killed_at,
            "stop_reason": self.stop_reason,
            "min_runtime": self.min_runtime,
            "projected_start": self.projected_start,
            "projection_end": self.projection_end,
            "advice": [
                {"change": a.change, "min_runtime": a.min_runtime, "gpus": a.gpus,
                 "start": a.start, "hosts": list(a.hosts), "preempting": list(a.preempting)}
                for a in self.advice
            ],
            "text": self.lines(),
        }


def explain(
    state: ClusterState, now: float, config: PolicyConfig, workload_id: str, pool: str = "",
    grace_ends: Mapping[str, float] | None = None,
) -> Explanation:
    """Explain ``workload_id`` (pending or running) at ``now``. Raises :class:`CoreError`
    if the state holds no such workload (finished, cancelled or unknown). ``pool``: the
    name of the pool ``state`` is, given when the fleet has several: what is said of "all
    healthy hosts" is then said of that pool's, not of the fleet's. ``grace_ends``: when
    the driver kills each stopping workload that has not exited (the core has no grace
    period), if it knows. Pure."""
    pas = Pass(state, now, config)  # only for its ratios and rules: never run
    rules = pas.rules
    r = state.running.get(workload_id)
    if r is not None:
        spec = r.spec
        return Explanation(
            workload=workload_id,
            status="stopping" if r.stopping else "running",
            budget=spec.budget,
            gpus=spec.gpus,
            allocated=spec.allocated,
            now=now,
            ratio=rules.ratio(spec.budget),
            min_runtime=spec.min_runtime,
            started_at=r.started_at,
            protected_until=rebalance_protected_until(r, config),
            min_runtime_ends=r.protected_until(),
            restarted=r.restarted,
            placement=r.placement,
            resumable=spec.resumable,
            draining=tuple(s.host for s in r.placement if s.host in state.draining),
            # what victim choice counts (Running.at_risk), not a figure of its own
            at_risk=r.at_risk(now, config.default_checkpoint_interval),
            checkpointed_at=r.checkpointed_at,
            checkpoint_on_term=spec.checkpoint_on_term,
            checkpoint_interval=spec.checkpoint_interval or config.default_checkpoint_interval,
            time_limit=spec.time_limit,
            # the very deadline Pass.time_limits stops it at
            time_limit_at=state.deadlines.get(workload_id),
            killed_at=(grace_ends or {}).get(workload_id) if r.stopping else None,
        )
    p = state.pending.get(workload_id)
    if p is None:
        raise CoreError(f"workload {workload_id}: not pending or running")
    spec = p.spec
    d = decide(state, now, config)
    order = list(d.order)
    position = order.index(workload_id) + 1 if workload_id in order else None
    ahead = order[: position - 1] if position is not None else _implicitly_ahead(state, spec)
    started = {s.workload: s.placement for s in d.starts}

    same_budget = 0
    allocated_ahead = 0
    rival_count: dict[str, int] = {}
    rival_mine: dict[str, str] = {}
    for wid in ahead:
        other = _spec_of(state, wid)
        if other.allocated and not spec.allocated:  # first whatever the ratios say
            allocated_ahead += 1
            continue
        div = state.tree.divergence(spec.budget, other.budget)
        if div is None:
            same_budget += 1
            continue
        mine, theirs = div
        rival_count[theirs] = rival_count.get(theirs, 0) + 1
        rival_mine[theirs] = mine
    rivals = tuple(
        Rival(path, rules.ratio(path), rival_mine[path], rules.ratio(rival_mine[path]), n)
        for path, n in sorted(rival_count.items(), key=lambda kv: (rules.ratio(kv[0]), kv[0]))
    )
    still_waiting_ahead = [w for w in ahead if w not in started]
    base = Explanation(
        workload=workload_id,
        status="pending",
        budget=spec.budget,
        gpus=spec.gpus,
        allocated=spec.allocated,
        now=now,
        ratio=rules.ratio(spec.budget),
        pool=pool,
        position=position,
        considered=len(order),
        allocated_ahead=allocated_ahead,
        same_budget_ahead=same_budget,
        rivals=rivals,
        min_runtime=spec.min_runtime,
        resumable=spec.resumable,
    )
    if workload_id in started:
        return _replace(base, starts_now=True, earliest_start=now,
                        placement=started[workload_id])
    reason = d.waiting.get(workload_id, WaitReason.NO_CAPACITY)
    preempting = tuple(pr.workload for pr in d.preemptions if pr.by == workload_id)
    if reason is WaitReason.WAITING_FOR_PREEMPTION:
        freeing = () if preempting else _freeing(state, d, workload_id)
        known = grace_ends or {}
        freed_by = (max(known[w] for w in freeing)
                    if freeing and all(w in known for w in freeing) else None)
        return _replace(
            base, wait_reason=reason, preempting=preempting, freeing=freeing,
            freed_by=freed_by, earliest_start=now,
            caveats=("starts once the preempted work has exited (its grace period)",),
        )
    # what only the victim size bound holds back: the moment it lifts is one to look at
    held_back = _held_back_by_size(state, now, config, spec, d, pas) if spec.allocated else ()
    lifts = size_bound_lifts(state.pending[spec.id].queued_at, config)
    projected, horizon, advice = _advise(state, now, config, spec, lifts if held_back else now)
    base = _replace(base, projected_start=projected, projection_end=horizon, advice=advice)
    if reason is WaitReason.WAITING_FOR_CHECKPOINT:
        wait = next(w for w in d.checkpoint_waits if w.workload == workload_id)
        return _replace(
            base, wait_reason=reason, awaiting=wait.victims, earliest_start=wait.until,
            caveats=(f"{', '.join(wait.victims)} checkpoint{'s' if len(wait.victims) == 1 else ''} "
                     f"in {format_duration(wait.until - now)}: then "
                     f"{'it is' if len(wait.victims) == 1 else 'they are'} preempted for "
                     "this workload, losing almost no progress (a pass decides afresh then)",),
        )
    if reason is WaitReason.TOO_LARGE:
        hosts = state.hosts.values()
        healthy = sum(h.gpus for h in hosts if h.schedulable)
        out = sorted(f"{h.name} {h.state.value}" for h in hosts if not h.schedulable)
        shown = ", ".join(out[:5]) + (f" and {len(out) - 5} more" if len(out) > 5 else "")
        return _replace(
            base, wait_reason=reason,
            caveats=(f"asks for more GPUs than all healthy hosts{_of_pool(pool)} together "
                     f"({healthy} of "
                     f"{sum(h.gpus for h in hosts)} GPUs are healthy"
                     + (f"; not healthy: {shown}" if out else "") + "): it starts only once "
                     "enough hosts are healthy again",),
        )
    if not spec.allocated:
        return _replace(
            base, wait_reason=reason,
            caveats=("unallocated work never preempts: it starts when enough GPUs are free, "
                     "which depends on how long running work takes (nobody declares that)",),
        )
    plan_hosts, victims = _hypothetical_plan(state, now, config, spec, d, pas)
    earliest = _earliest_start(state, now, config, spec, d)
    caveats: list[str] = []
    if still_waiting_ahead:
        caveats.append(
            f"lower bound: {plural(len(still_waiting_ahead), 'workload')} considered before "
            f"it {'is' if len(still_waiting_ahead) == 1 else 'are'} still waiting and may "
            "take these GPUs first"
        )
    if config.debug_lane and is_debug(spec, config):
        caveats.append(_debug_lane_caveat(pas, spec, config))
    if earliest is None:
        caveats.append(
            "on every host it could use, the room it needs is held by work of its own "
            "budget, which is never displaced for it: no earliest start can be told, it "
            "starts once enough of that work ends"
        )
    # work of its own budget is never displaced for it (priority orders the queue, nothing
    # more): its victim line says so, and no ratio moving changes that
    if any(not v.rules_allow and not _own(v, spec.budget) for v in victims):
        caveats.append(
            "the rebalance rules do not let it displace some of this work now; then it "
            "waits for that work to end or for the ratios to move"
        )
    if held_back:
        caveats.append(
            f"for another {format_duration(lifts - now)} a rebalance takes no run of more "
            f"than {plural(int(pas.rules.largest_victim(spec)), 'GPU')} for it "
            f"(victim_max_factor); then it may displace {', '.join(held_back)}"
        )
    caveats.append("running work may also end on its own earlier")
    return _replace(
        base,
        wait_reason=reason,
        plan_hosts=plan_hosts,
        victims=victims,
        earliest_start=earliest,
        lower_bound=bool(still_waiting_ahead),
        caveats=tuple(caveats),
    )


def _debug_lane_caveat(pas: Pass, spec: WorkloadSpec, config: PolicyConfig) -> str:
    """Why the debug lane did not start this debug workload (docs/policy.md, "Debug work")."""
    held = pas.debug_held(spec.budget)
    cap = config.debug_max_gpus
    if held + spec.gpus > cap:
        return (f"debug work goes first on free GPUs (the debug lane) only while its budget's "
                f"running debug work holds at most {plural(cap, 'GPU')} with it: "
                f"{spec.budget}'s holds {plural(held, 'GPU')}")
    return ("debug work goes first on free GPUs (the debug lane): no room is left for it now, "
            "on free GPUs or by displacing unallocated work")


# ---- advice: the policy run on changed requests ----------------------------------------
class _Passes:
    """How many more passes this explanation may run (see :data:`MAX_PASSES`)."""

    def __init__(self, left: int) -> None:
        self.left = left

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


class _Saved:
    """What swapping a pending workload's request in and out could leave different: the
    pending entries in their order, its reservation, and which keys the indexes had."""

    def __init__(self, state: ClusterState, wid: str) -> None:
        self.pending = state.pending[wid]
        self.order = dict(state.pending)
        self.reservation = state.reservations.get(wid)
        self.keys = (set(state.queues), set(state.unallocated_queues), set(state.sizes),
                     set(state.unallocated_sizes), set(state.pending_allocated))


def _swap_in(state: ClusterState, variant: WorkloadSpec) -> _Saved:
    saved = _Saved(state, variant.id)
    state.unqueue(variant.id)
    state.submit(variant, state.time, queued_at=saved.pending.queued_at)
    return saved


def _swap_out(state: ClusterState, saved: _Saved) -> None:
    """Put the original request back, leaving every index as it was (keys included)."""
    spec = saved.pending.spec
    state.unqueue(spec.id)
    state.submit(spec, state.time, queued_at=saved.pending.queued_at)
    state.put_back(spec.id, saved.order, saved.reservation, saved.keys)


def _moments(state: ClusterState, now: float, config: PolicyConfig, lifts: float
             ) -> list[float]:
    """``now`` and the moments after it where protection of running work ends (at most
    :data:`MAX_MOMENTS` in all, evenly picked), and ``lifts``, if later: when the victim
    size bound that holds the explained workload back lifts. The only moments at which, if
    nothing else changes, what the policy may do for it changes (ratios move slowly in
    between)."""
    ends = sorted({
        until for wid, r in state.running.items()
        if wid not in state.stopping and (until := rebalance_protected_until(r, config)) > now
    })
    k = MAX_MOMENTS - 1
    if len(ends) > k:
        ends = sorted({ends[round(i * (len(ends) - 1) / (k - 1))] for i in range(k)})
    if lifts > now and lifts not in ends:
        ends = sorted([*ends, lifts])
    return [now, *ends]


def _try(
    state: ClusterState, config: PolicyConfig, variant: WorkloadSpec, t: float,
    passes: _Passes,
) -> Advice | None:
    """Would the policy, at ``t`` and with ``variant`` in place of the pending request of the
    same id, start it (or preempt for it)? None if not, or if the passes ran out."""
    if not passes.take():
        return None
    original = state.pending[variant.id].spec
    saved = _swap_in(state, variant) if variant != original else None
    try:
        d = decide(state, t, config, reasons=False)
    finally:
        if saved is not None:
            _swap_out(state, saved)
    change = "gpus" if variant.gpus != original.gpus else "min_runtime"
    for s in d.starts:
        if s.workload == variant.id:
            return Advice(change, variant.min_runtime, variant.gpus, t,
                          tuple(x.host for x in s.placement))
    for r in d.reservations:
        if r.workload == variant.id:
            victims = tuple(p.workload for p in d.preemptions if p.by == variant.id)
            return Advice(change, variant.min_runtime, variant.gpus, t, r.hosts, victims)
    return None


def _first_start(
    state: ClusterState, config: PolicyConfig, variant: WorkloadSpec, moments: list[float],
    passes: _Passes,
) -> Advice | None:
    """The first of ``moments`` at which the policy would start ``variant`` (see _try)."""
    for t in moments:
        got = _try(state, config, variant, t, passes)
        if got is not None:
            return got
    return None


def _runtimes(spec: WorkloadSpec, config: PolicyConfig) -> list[float]:
    """Positive minimum runtimes to try, longest first (the least change first): for
    allocated work the shorter ones, for unallocated work every allowed one."""
    cap = config.max_min_runtime
    values = {*LADDER, config.debug_max_min_runtime}
    if spec.allocated:
        return sorted((m for m in values if 0 < m < spec.min_runtime and m <= cap),
                      reverse=True)
    return sorted({cap, *(m for m in values if 0 < m <= cap)}, reverse=True)


def _fewer_gpus(spec: WorkloadSpec, state: ClusterState) -> list[int]:
    """Smaller requests, largest first: one host's work any count below; whole-host work
    fewer whole hosts (of the largest size), down to one."""
    size = state.max_host_gpus
    if spec.gpus <= size:
        return list(range(spec.gpus - 1, 0, -1))
    hosts = -(-spec.gpus // size)
    return [k * size for k in range(hosts - 1, 0, -1) if k * size < spec.gpus]


def _dimensions(spec: WorkloadSpec, config: PolicyConfig, state: ClusterState
                ) -> list[list[WorkloadSpec]]:
    """The kinds of change advice tries, each as variants from the least change to the
    most: positive minimum runtimes (shorter for allocated work, any for unallocated work),
    fewer GPUs, and for allocated work no minimum runtime (unallocated)."""
    dims = [[replace(spec, min_runtime=m) for m in _runtimes(spec, config)],
            [replace(spec, gpus=g) for g in _fewer_gpus(spec, state)]]
    if spec.allocated:
        dims.append([replace(spec, min_runtime=0.0)])
    return [d for d in dims if d]


def _advise(
    state: ClusterState, now: float, config: PolicyConfig, spec: WorkloadSpec, lifts: float
) -> tuple[float | None, float, tuple[Advice, ...]]:
    """The projected start of ``spec`` (None: not among the moments looked at), the last
    moment looked at, and per kind of change the least change that would start it soonest,
    if sooner than as asked. Per kind: the first moment at which its largest change would
    start it, then the least change that still does then, by bisection (a smaller change
    is assumed to fare no better than a larger one; whatever is reported was decided by a
    pass, never inferred). ``lifts``: when the victim size bound that holds it back lifts
    (``now`` if it does not)."""
    moments = _moments(state, now, config, lifts)
    passes = _Passes(MAX_PASSES)
    # at ``now`` it does not start (the caller asked decide): look from the next moment
    base = _first_start(state, config, spec, moments[1:], passes)
    advice: list[Advice] = []
    for variants in _dimensions(spec, config, state):
        found = _first_start(state, config, variants[-1], moments, passes)
        if found is None or (base is not None and found.start >= base.start):
            continue
        results = {len(variants) - 1: found}
        lo, hi = 0, len(variants) - 1
        while lo < hi:  # the least change that starts it at the same moment
            mid = (lo + hi) // 2
            got = _try(state, config, variants[mid], found.start, passes)
            if got is not None:
                results[mid], hi = got, mid
            else:
                lo = mid + 1
        advice.append(results[hi])
    return (base.start if base is not None else None), moments[-1], tuple(advice)


# ---- helpers ---------------------------------------------------------------------------
def _replace(e: Explanation, **changes: Any) -> Explanation:
    return replace(e, **changes)


def _spec_of(state: ClusterState, wid: str) -> WorkloadSpec:
    return state.pending[wid].spec


def _implicitly_ahead(state: ClusterState, spec: WorkloadSpec) -> list[str]:
    """The pass stopped before reaching ``spec`` (unallocated work once no GPU is left):
    everything allocated is ahead of it, and its own budget's earlier unallocated work."""
    ahead = [wid for q in state.queues.values() for _, wid in q]
    ahead += [wid for _, wid in state.unallocated_queues.get(spec.budget, [])
              if wid != spec.id and state.pending[wid].spec.submit_time <= spec.submit_time]
    return ahead


def _freeing(state: ClusterState, d: Decisions, workload_id: str) -> tuple[str, ...]:
    """The stopping work on the hosts an earlier pass's preemptions are freeing for
    ``workload_id`` (its reservation, as this pass keeps it): what it waits to exit."""
    hosts = next((r.hosts for r in d.reservations if r.workload == workload_id), ())
    return tuple(sorted({w for h in hosts for w in state.on_host[h] if w in state.stopping}))


class _AnyVictimView(HostView):
    """A host view whose victim candidates include protected work: to show what a
    workload would need to displace if protection and the rules allowed it."""

    def may_be_victim(self, r: Running, now: float) -> bool:
        return True

    def has_protected(self, host: str, now: float) -> bool:
        return False


def _held_back_by_size(
    state: ClusterState, now: float, config: PolicyConfig, spec: WorkloadSpec, d: Decisions,
    pas: Pass,
) -> tuple[str, ...]:
    """The work a rebalance would displace for ``spec`` on the hosts as this pass leaves
    them if the victim size bound were lifted, when only the bound keeps it from taking any
    now (``Pass.try_preempt``'s search, with and without the bound); else ()."""
    if not config.rebalance or now >= size_bound_lifts(state.pending[spec.id].queued_at, config):
        return ()
    view = HostView(state, config.default_checkpoint_interval)
    for s in d.starts:
        view.take(s.placement)
    view.claimed.update(p.workload for p in d.preemptions)  # promised to someone else
    rules, sides = pas.rules, pas.rules.sides(spec)
    only = set(spec.hosts) if spec.hosts else None
    plans = []
    for lifted in (False, True):
        rules.waited_out = lifted
        plans.append(find_victims(view, spec, now,
                                  lambda c, taken: rules.may_preempt(spec, c, taken, sides),
                                  only=only))
    rules.waited_out = False
    bounded, unbounded = plans
    if bounded is not None or unbounded is None:
        return ()
    return tuple(f"{c.id} ({c.budget}, {plural(c.gpus, 'GPU')})" for c in unbounded.victims)


def _hypothetical_plan(
    state: ClusterState,
    now: float,
    config: PolicyConfig,
    spec: WorkloadSpec,
    d: Decisions,
    pas: Pass,
) -> tuple[tuple[str, ...], tuple[Victim, ...]]:
    """The victim search's cheapest plan on the hosts as this pass leaves them (its starts
    take their GPUs, its victims are promised to their preemptors), with every other running
    workload allowed as a victim."""
    view = _AnyVictimView(state, config.default_checkpoint_interval)
    for s in d.starts:
        view.take(s.placement)
    view.claimed.update(p.workload for p in d.preemptions)  # promised to someone else
    plan = find_victims(view, spec, now, lambda c, taken: True)
    if plan is None:
        return (), ()
    sides = pas.rules.sides(spec) if config.rebalance else {}
    pas.rules.waited_out = now >= size_bound_lifts(state.pending[spec.id].queued_at, config)
    taken: dict[str, int] = {}
    out: list[Victim] = []
    for c in plan.victims:
        allowed = c.klass == UNALLOCATED or (
            config.rebalance and pas.rules.may_preempt(spec, _unprotected(c), taken, sides)
        )
        why_not = "" if allowed else _why_not(state, config, spec, c, taken, sides, pas)
        taken[c.budget] = taken.get(c.budget, 0) + c.gpus
        until = rebalance_protected_until(state.running[c.id], config)
        out.append(Victim(
            id=c.id, budget=c.budget, gpus=c.gpus, allocated=c.klass != UNALLOCATED,
            resumable=c.resumable, protected_until=until, protected=now < until,
            rules_allow=allowed, why_not=why_not,
        ))
    return tuple(h for h, _ in plan.hosts), tuple(out)


def _gpus(x: float) -> str:
    """A count of GPUs the rules compute with (a share may be fractional): ``4``, ``1.3``."""
    return f"{round(x, 1):g}"


def _why_not(
    state: ClusterState, config: PolicyConfig, spec: WorkloadSpec, c: Candidate,
    taken: dict[str, int], sides: dict[str, str], pas: Pass,
) -> str:
    """In words, what of ``RebalanceRules.may_preempt`` keeps ``spec`` from taking the
    allocated victim ``c`` (its protection apart), with ``taken`` the plan's victims before
    it: the sides' figures the rules read (docs/policy.md, "Preemption"). Empty for work of
    its own budget (its line says so) or what the lines say elsewhere (the size bound)."""
    if not config.rebalance:
        return "rebalancing is off ([policy] rebalance)"
    div = state.tree.divergence(spec.budget, c.budget)
    if div is None:
        return ""
    mine, theirs = div
    rules = pas.rules
    p, v = rules.figures(mine), rules.figures(theirs)
    holds = f"{theirs} holds {_gpus(v.held)} GPUs against its share of {_gpus(v.fair)}"
    if v.held < v.fair:
        return f"{holds}: no rule takes from work within its share"
    side = rules.side_in(c.budget, sides)  # None: no rule takes even one GPU from that side
    limit = -1.0 if side is None else rules.limit(spec, p, v)
    if limit < 1:
        return (f"{holds}, {mine} {_gpus(p.held)} against its share of {_gpus(p.fair)}, "
                f"usage ratios {rules.ratio(theirs):.3f} and {rules.ratio(mine):.3f}: neither "
                "the guarantee rule (a side over its share gives way to one within it) nor the "
                "fair-share rule (a side more used, by the margin, gives way while it keeps its "
                f"share; this request's admission charge counted) moves GPUs from {theirs} to "
                f"{mine} for it now")
    already = sum(g for leaf, g in taken.items()
                  if leaf == theirs or leaf.startswith(theirs + "/"))
    if already + c.gpus > limit:
        with_others = (f" (with the {already} taken before it, {already + c.gpus})"
                       if already else "")
        return (f"the rules let it take at most {plural(int(limit + 1e-9), 'GPU')} from "
                f"{theirs} now ({holds}), and {c.id} holds {c.gpus}{with_others}")
    return ""


def _own(v: Victim, budget: str) -> bool:
    """Whether victim ``v`` is allocated work of leaf ``budget``: work of a budget never
    preempts its own budget's allocated work (docs/policy.md, "Preemption")."""
    return v.allocated and v.budget == budget


def _unprotected(c: Candidate) -> Candidate:
    """Victim ``c`` as the rebalance rules judge it once its restart protection is over:
    the victim's ``protected`` tells the protection, ``rules_allow`` the rest of the rules
    (as for protection by the minimum runtime, which the rules leave to placement)."""
    return Candidate(c.id, c.budget, c.gpus, c.klass, c.lost, c.protected_until, c.resumable,
                     c.hosts)


def _earliest_start(
    state: ClusterState, now: float, config: PolicyConfig, spec: WorkloadSpec, d: Decisions
) -> float | None:
    """Min over usable hosts of the latest protection end (as a rebalance victim) among the
    work it would need there (work that frees earliest taken first); stopping work counts
    as free now. Allocated work of ``spec``'s own budget is never displaced for it
    (:func:`_own`): no protection ending frees it, so a host that needs it never counts.
    None: every host needs such work (it starts when that work ends, on its own time)."""
    holders: dict[str, list[tuple[float, int]]] = {}  # host -> (protected until, gpus)

    def held_until(r: Running) -> float:
        if r.spec.allocated and r.spec.budget == spec.budget:
            return math.inf
        return max(now, rebalance_protected_until(r, config))

    for wid, r in state.running.items():
        if wid in state.stopping:
            continue
        until = held_until(r)
        for s in r.placement:
            holders.setdefault(s.host, []).append((until, s.gpus))
    for start in d.starts:  # started by this pass: protected from now on
        p = state.pending[start.workload]
        until = held_until(Running(p.spec, start.placement, now, restarted=p.restarted))
        for s in start.placement:
            holders.setdefault(s.host, []).append((until, s.gpus))
    usable = {n: h.gpus for n, h in state.hosts.items() if h.schedulable}
    max_size = max((h.gpus for h in state.hosts.values()), default=0)
    free_at: dict[str, float] = {}  # host -> when enough of it is unprotected
    for name, size in usable.items():
        need = spec.gpus if spec.gpus <= max_size else size
        if size < need:
            continue
        held = sorted(holders.get(name, []))
        avail = size - sum(g for _, g in held)
        t = now
        for until, gpus in held:
            if avail >= need:
                break
            avail += gpus
            t = until
        free_at[name] = t
    if spec.gpus <= max_size:
        earliest = min(free_at.values(), default=now)
        return None if earliest == math.inf else earliest
    # whole hosts: the earliest moment enough of them are all unprotected at once
    total = 0
    for name, t in sorted(free_at.items(), key=lambda kv: (kv[1], kv[0])):
        total += usable[name]
        if total >= spec.gpus:
            return None if t == math.inf else t
    return now  # not enough healthy hosts: reported as too large by the pass


def _at_risk_line(e: Explanation, clock: Callable[[float], str] | None) -> str:
    """What a preemption now would cost running work, as victim choice counts it."""
    assert e.at_risk is not None and e.started_at is not None
    lose = f"if preempted now it would lose {format_duration(e.at_risk)} of progress"
    if not e.resumable:
        return f"{lose}: not resumable, its whole run so far"
    if e.checkpoint_on_term:
        return "if preempted now it would lose nothing: it checkpoints when told to stop"
    every = format_duration(e.checkpoint_interval)
    if e.checkpointed_at is None or e.checkpointed_at <= e.started_at:
        return f"{lose}: no checkpoint reported in this run, one assumed every {every}"
    reported = (f"{format_duration(e.now - e.checkpointed_at)} ago" if clock is None
                else f"at {clock(e.checkpointed_at)}")
    return f"{lose}: its last checkpoint reported {reported}, then one assumed every {every}"


def _lines(e: Explanation, clock: Callable[[float], str] | None = None) -> list[str]:
    def at(t: float) -> str:  # "in 2 h 10 min", or "at 14:05 (in 2 h 10 min)"
        rel = "now" if t <= e.now else f"in {format_duration(t - e.now)}"
        return rel if clock is None or t <= e.now else f"at {clock(t)} ({rel})"

    kind = "allocated" if e.allocated else "unallocated"
    out = [f"{e.workload} ({e.status}, {plural(e.gpus, 'GPU')}, budget {e.budget}, {kind}): "
           f"usage ratio {e.ratio:.3f}"]
    if e.status != "pending":
        assert e.protected_until is not None and e.started_at is not None
        assert e.min_runtime_ends is not None
        where = ", ".join(f"{s.host} ({plural(s.gpus, 'GPU')})" for s in e.placement)
        out.append(f"running on {where} for {format_duration(e.now - e.started_at)}")
        if e.status == "stopping":  # told to stop: no protection or limit matters any more
            why = f" ({e.stop_reason})" if e.stop_reason else ""
            if e.killed_at is None:
                out.append(f"stopping{why}: told to stop (SIGTERM), it ends when it exits")
            elif e.killed_at > e.now:
                out.append(f"stopping{why}: told to stop (SIGTERM), it is killed "
                           f"{at(e.killed_at)} if it has not exited by then")
            else:
                out.append(f"stopping{why}: told to stop (SIGTERM), its grace is over: "
                           "killed now")
            return out
        restart = e.restarted and e.allocated  # its restart protection applies
        if e.protected_until > e.now:
            why = ""
            if restart and e.protected_until > e.min_runtime_ends:
                why = (" (restart protection: a run resumed after a requeue is no rebalance "
                       f"victim for its first {format_duration(e.protected_until - e.started_at)})")
            out.append(f"protected for another {format_duration(e.protected_until - e.now)}"
                       + ("" if clock is None else f", until {clock(e.protected_until)}") + why)
        elif restart:
            out.append("not protected: it may be preempted (past its minimum runtime and its "
                       "restart protection)")
        else:
            out.append("not protected: it may be preempted (unallocated, or past its "
                       "minimum runtime)")
        if e.at_risk is not None and e.status == "running":
            out.append(_at_risk_line(e, clock))
        if e.draining and e.status == "running":  # the drain phase stops it then, for sure
            hosts = ", ".join(e.draining)
            verb = "is" if len(e.draining) == 1 else "are"
            # a drain waits for the minimum runtime only, not for a restart protection
            when = (at(e.min_runtime_ends) + ", when its minimum runtime ends"
                    if e.min_runtime_ends > e.now else "on the next pass")
            fate = ("and requeued (resumable: it keeps its place in its budget's queue)"
                    if e.resumable else "and not requeued (not resumable): it ends preempted")
            out.append(f"{hosts} {verb} being drained: it is stopped {when}, {fate}")
        if e.time_limit_at is not None and e.status == "running":
            when = (at(e.time_limit_at) if e.time_limit_at > e.now
                    else "on the next pass (reached)")
            out.append(f"its time limit of {format_duration_exact(e.time_limit)} stops it "
                       f"{when}: it ends as timeout, not requeued")
        return out
    if e.position is None:
        out.append(f"not reached by the pass{_in_pool(e.pool)} ({plural(e.considered, 'workload')} "
                   "considered before it stopped)")
    elif e.pool:  # each pool's pass has an order of its own
        out.append(f"position {e.position} of {e.considered} in pool {e.pool}'s order")
    else:
        out.append(f"position {e.position} of {e.considered} in the order considered")
    if e.allocated_ahead:
        verb = "comes" if e.allocated_ahead == 1 else "come"
        out.append(f"{plural(e.allocated_ahead, 'allocated workload')} {verb} first "
                   "(all allocated work is considered before unallocated work)")
    if e.same_budget_ahead:
        verb = "comes" if e.same_budget_ahead == 1 else "come"
        out.append(f"{plural(e.same_budget_ahead, 'workload')} of the same budget {verb} first "
                   "(priority, then submission time)")
    for r in e.rivals:
        out.append(f"{plural(r.workloads, 'workload')} of {r.path} (ratio {r.ratio:.3f}) "
                   f"{'comes' if r.workloads == 1 else 'come'} "
                   f"first: compared with {r.mine} (ratio {r.mine_ratio:.3f})")
    if e.starts_now:
        where = ", ".join(f"{s.host} ({plural(s.gpus, 'GPU')})" for s in e.placement)
        out.append(f"starts on the next pass on {where}")
        return out
    if e.wait_reason is WaitReason.TOO_LARGE and e.pool:
        out.append(f"waiting: too large (more GPUs than all healthy hosts{_of_pool(e.pool)} "
                   "together)")
    elif e.wait_reason is not None:
        out.append(f"waiting: {_REASONS[e.wait_reason]}")
    if e.preempting:
        out.append("preempting " + ", ".join(e.preempting))
    if e.freeing:
        one = len(e.freeing) == 1
        line = (f"{', '.join(e.freeing)} {'is' if one else 'are'} stopping on the hosts being "
                "freed for it")
        if e.freed_by is not None and e.freed_by > e.now:
            line += f" ({'its grace' if one else 'the last grace'} ends {at(e.freed_by)})"
        elif e.freed_by is not None:
            line += f" ({'its' if one else 'their'} grace is over: killed now)"
        out.append(line)
    for v in e.victims:
        state = (f"protected for another {format_duration(v.protected_until - e.now)}"
                 if v.protected else "not protected")
        rule = ("" if v.rules_allow else
                ", its own budget's work: never displaced for it, it waits for it to end"
                if _own(v, e.budget) else ", rules do not allow it now"
                + (f": {v.why_not}" if v.why_not else ""))
        out.append(f"would displace {v.id} ({v.budget}, {plural(v.gpus, 'GPU')}): "
                   f"{state}{rule}")
    # waiting for preempted work: the stopping work is named above, whatever pass stopped it
    if e.earliest_start is not None and e.wait_reason is not WaitReason.WAITING_FOR_PREEMPTION:
        if e.earliest_start > e.now:
            label = " (a lower bound)" if e.lower_bound else ""
            out.append(f"could start {at(e.earliest_start)} at the earliest{label}")
        elif e.lower_bound:
            out.append("room without protected work exists already: it waits for the work "
                       "considered before it, which is served first")
        else:
            out.append("room without protected work exists already: it waits for the "
                       "rebalance rules to let it displace that work (or for that work to end)")
    out.extend(e.caveats)
    if e.projection_end is not None and e.wait_reason is not WaitReason.TOO_LARGE:
        if e.projection_end <= e.now:
            out.append("no running work is protected: if nothing else changes, it waits for "
                       "work to end on its own or for the usage ratios to move")
        elif e.projected_start is not None:
            out.append(f"if nothing else changes (no work ends on its own, nothing new "
                       f"arrives), the policy starts it {_by(e.projected_start, e, clock)}")
        else:
            out.append("if nothing else changes (no work ends on its own, nothing new "
                       f"arrives), the policy does not start it {_by(e.projection_end, e, clock)}"
                       ": it looked at the moments where protection of running work ends")
    for a in e.advice:
        out.append(_advice_line(e, a, at))
    return out


def _by(t: float, e: Explanation, clock: Callable[[float], str] | None) -> str:
    """``within 2 h`` or ``by 14:05 (within 2 h)``: a projection looks at a few moments
    only, so the start it finds is a latest, not an exact, time."""
    rel = f"within {format_duration(t - e.now)}"
    return rel if clock is None else f"by {clock(t)} ({rel})"


_REASONS = {
    WaitReason.NO_CAPACITY: "no capacity (it does not fit, and nothing it may displace makes "
                            "room)",
    WaitReason.WAITING_FOR_PREEMPTION: "waiting for preempted work to exit",
    WaitReason.WAITING_FOR_CHECKPOINT: "waiting for the work it displaces to checkpoint",
    WaitReason.TOO_LARGE: "too large (more GPUs than all healthy hosts together)",
}


def _of_pool(pool: str) -> str:
    return f" of pool {pool}" if pool else ""


def _in_pool(pool: str) -> str:
    return f" in pool {pool}" if pool else ""


def _advice_line(e: Explanation, a: Advice, at: Callable[[float], str]) -> str:
    if a.change == "gpus":
        what = f"with {plural(a.gpus, 'GPU')} instead of {e.gpus}"
    elif a.min_runtime == 0:
        what = ("as unallocated work (minimum runtime 0: free, but preemptible at any "
                "moment)")
    elif not e.allocated:
        what = (f"as allocated work with a minimum runtime of {format_duration(a.min_runtime)} "
                "(charged to its budget, protected that long)")
    else:
        what = (f"with a minimum runtime of at most {format_duration(a.min_runtime)} "
                f"(instead of {format_duration(e.min_runtime)})")
    when = "now" if a.start <= e.now else at(a.start)
    where = f" on {', '.join(a.hosts)}" if a.hosts else ""
    by = f", displacing {', '.join(a.preempting)}" if a.preempting else ""
    return f"{what} it could start {when}{where}{by}"


__all__ = ["Advice", "Explanation", "Rival", "Victim", "explain"]
