"""Why a workload waits, and when it may start: ``explain(state, now, config, id)``.

Pure like :func:`~apportion.core.policy.decide` (it runs one pass and reads its result), so
the answer is the policy's own reasoning, not a re-implementation of it:

* **position**: where the first pass at ``now`` considers the workload (``Decisions.order``);
* **ratios**: its budget's usage ratio (the sort metric) and, for every sibling subtree whose
  work the pass considers before it, both sides' ratios at the level where the two paths
  diverge (Fair Tree compares siblings only). Ratios are those at the start of the pass;
  admission charges during the pass raise the ratio of every budget that admits work, which
  is how a side that starts with a higher ratio can still get ahead;
* **victims**: the cheapest room the victim search finds for it now *if the rules and
  protection allowed anything* (stopping work counts as free), each victim marked with its
  protection end and whether the rebalance rules would let it go today;
* **earliest start**: for work that does not fit, the earliest moment the protection of the
  work in its way ends: the minimum over the hosts it could use of the latest protection end
  among the work it would need there (the work started by this same pass included). It is a
  *lower bound* when work considered before it is still waiting, and never a promise: work
  may also end on its own earlier, and protection ending does not oblige the rules to let
  it preempt.

Running work is explained by its protection: until when nothing but a host failure ends it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .config import PolicyConfig
from .placement import HostView, find_victims
from .policy import _Pass, decide
from .state import ClusterState
from .types import CoreError, Decisions, Placement, Running, WaitReason, WorkloadSpec


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
    protected_until: float
    protected: bool  # still inside its minimum runtime at ``now``
    rules_allow: bool  # unallocated, or the rebalance rules let this workload take it now


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
    same_budget_ahead: int = 0
    rivals: tuple[Rival, ...] = ()
    wait_reason: WaitReason | None = None
    starts_now: bool = False  # the next pass starts it (placement below)
    preempting: tuple[str, ...] = ()  # victims the pass stops for it right now
    plan_hosts: tuple[str, ...] = ()
    victims: tuple[Victim, ...] = ()
    earliest_start: float | None = None
    lower_bound: bool = False
    caveats: tuple[str, ...] = ()
    # ---- running ----
    started_at: float | None = None
    protected_until: float | None = None
    placement: Placement = ()

    def lines(self) -> list[str]:
        """The explanation as short sentences for people (times relative to ``now``; the
        absolute times are in the fields)."""
        return _lines(self)

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
            "same_budget_ahead": self.same_budget_ahead,
            "rivals": [
                {"path": r.path, "ratio": r.ratio, "mine": r.mine, "mine_ratio": r.mine_ratio,
                 "workloads": r.workloads}
                for r in self.rivals
            ],
            "wait_reason": self.wait_reason.value if self.wait_reason else None,
            "starts_now": self.starts_now,
            "preempting": list(self.preempting),
            "plan_hosts": list(self.plan_hosts),
            "victims": [
                {"id": v.id, "budget": v.budget, "gpus": v.gpus, "allocated": v.allocated,
                 "resumable": v.resumable, "protected_until": v.protected_until,
                 "protected": v.protected, "rules_allow": v.rules_allow}
                for v in self.victims
            ],
            "earliest_start": self.earliest_start,
            "lower_bound": self.lower_bound,
            "caveats": list(self.caveats),
            "started_at": self.started_at,
            "protected_until": self.protected_until,
            "placement": [[s.host, s.gpus] for s in self.placement],
            "text": self.lines(),
        }


def explain(
    state: ClusterState, now: float, config: PolicyConfig, workload_id: str
) -> Explanation:
    """Explain ``workload_id`` (pending or running) at ``now``. Raises :class:`CoreError`
    if the state holds no such workload (finished, cancelled or unknown). Pure."""
    pas = _Pass(state, now, config)  # only for its ratios and rules: never run
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
            started_at=r.started_at,
            protected_until=r.protected_until(),
            placement=r.placement,
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
    rival_count: dict[str, int] = {}
    rival_mine: dict[str, str] = {}
    for wid in ahead:
        other = _spec_of(state, wid)
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
        position=position,
        considered=len(order),
        same_budget_ahead=same_budget,
        rivals=rivals,
    )
    if workload_id in started:
        return _replace(base, starts_now=True, earliest_start=now,
                        placement=started[workload_id])
    reason = d.waiting.get(workload_id, WaitReason.NO_CAPACITY)
    preempting = tuple(pr.workload for pr in d.preemptions if pr.by == workload_id)
    if reason is WaitReason.WAITING_FOR_PREEMPTION:
        return _replace(
            base, wait_reason=reason, preempting=preempting, earliest_start=now,
            caveats=("starts once the preempted work has exited (its grace period)",),
        )
    if reason is WaitReason.TOO_LARGE:
        return _replace(
            base, wait_reason=reason,
            caveats=("asks for more GPUs than all healthy hosts together: it starts only "
                     "once enough hosts are healthy again",),
        )
    if not spec.allocated:
        return _replace(
            base, wait_reason=reason,
            caveats=("unallocated work never preempts: it starts when enough GPUs are free, "
                     "which depends on how long running work takes (nobody declares that)",),
        )
    plan_hosts, victims = _hypothetical_plan(state, now, config, spec, d, pas)
    earliest = _earliest_start(state, now, spec, d)
    caveats: list[str] = []
    if still_waiting_ahead:
        caveats.append(
            f"lower bound: {len(still_waiting_ahead)} workload(s) considered before it are "
            "still waiting and may take these GPUs first"
        )
    if any(not v.rules_allow for v in victims):
        caveats.append(
            "the rebalance rules do not let it displace some of this work now; then it "
            "waits for that work to end or for the ratios to move"
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


class _AnyVictimView(HostView):
    """A host view whose victim candidates include protected work: to show what a
    workload would need to displace if protection and the rules allowed it."""

    def may_be_victim(self, r: Running, now: float) -> bool:
        return True

    def has_protected(self, host: str, now: float) -> bool:
        return False


def _hypothetical_plan(
    state: ClusterState,
    now: float,
    config: PolicyConfig,
    spec: WorkloadSpec,
    d: Decisions,
    pas: _Pass,
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
    taken: dict[str, int] = {}
    out: list[Victim] = []
    for c in plan.victims:
        allowed = c.klass == 1 or (
            config.rebalance and pas.rules.may_preempt(spec, c, taken, sides)
        )
        taken[c.budget] = taken.get(c.budget, 0) + c.gpus
        out.append(Victim(
            id=c.id, budget=c.budget, gpus=c.gpus, allocated=c.klass != 1,
            resumable=c.resumable, protected_until=c.protected_until,
            protected=now < c.protected_until, rules_allow=allowed,
        ))
    return tuple(h for h, _ in plan.hosts), tuple(out)


def _earliest_start(state: ClusterState, now: float, spec: WorkloadSpec, d: Decisions) -> float:
    """Min over usable hosts of the latest protection end among the work it would need
    there (work that frees earliest taken first); stopping work counts as free now."""
    holders: dict[str, list[tuple[float, int]]] = {}  # host -> (protected until, gpus)
    for wid, r in state.running.items():
        if wid in state.stopping:
            continue
        for s in r.placement:
            holders.setdefault(s.host, []).append((max(now, r.protected_until()), s.gpus))
    for start in d.starts:  # started by this pass: protected from now on
        started = state.pending[start.workload].spec
        for s in start.placement:
            holders.setdefault(s.host, []).append((now + started.min_runtime, s.gpus))
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
        return min(free_at.values(), default=now)
    # whole hosts: the earliest moment enough of them are all unprotected at once
    total = 0
    for name, t in sorted(free_at.items(), key=lambda kv: (kv[1], kv[0])):
        total += usable[name]
        if total >= spec.gpus:
            return t
    return now  # not enough healthy hosts: reported as too large by the pass


def _dur(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 120:
        return f"{m}m"
    return f"{m // 60}h{m % 60:02d}m"


def _lines(e: Explanation) -> list[str]:
    out = [f"{e.workload} ({e.status}, {e.gpus} GPU(s), budget {e.budget}, "
           f"{'allocated' if e.allocated else 'unallocated'}): usage ratio {e.ratio:.3f}"]
    if e.status != "pending":
        assert e.protected_until is not None and e.started_at is not None
        where = ",".join(f"{s.host}:{s.gpus}" for s in e.placement)
        out.append(f"running on {where} for {_dur(e.now - e.started_at)}")
        if e.protected_until > e.now:
            out.append(f"protected for another {_dur(e.protected_until - e.now)}")
        else:
            out.append("not protected: it may be preempted (unallocated, or past its "
                       "minimum runtime)")
        return out
    if e.position is None:
        out.append(f"not reached by the pass ({e.considered} considered before it stopped)")
    else:
        out.append(f"position {e.position} of {e.considered} in the order considered")
    if e.same_budget_ahead:
        out.append(f"{e.same_budget_ahead} workload(s) of the same budget come first "
                   "(priority, then submission time)")
    for r in e.rivals:
        out.append(f"{r.workloads} workload(s) of {r.path} (ratio {r.ratio:.3f}) come first: "
                   f"compared with {r.mine} (ratio {r.mine_ratio:.3f})")
    if e.starts_now:
        where = ",".join(f"{s.host}:{s.gpus}" for s in e.placement)
        out.append(f"starts on the next pass on {where}")
        return out
    if e.wait_reason is not None:
        out.append(f"waiting: {e.wait_reason.value}")
    if e.preempting:
        out.append("preempting " + ", ".join(e.preempting))
    for v in e.victims:
        state = (f"protected for another {_dur(v.protected_until - e.now)}" if v.protected
                 else "not protected")
        rule = "" if v.rules_allow else ", rules do not allow it now"
        out.append(f"would displace {v.id} ({v.budget}, {v.gpus} GPU(s)): {state}{rule}")
    if e.earliest_start is not None and not e.preempting:
        if e.earliest_start > e.now:
            label = " (a lower bound)" if e.lower_bound else ""
            out.append(f"could start in {_dur(e.earliest_start - e.now)} at the earliest{label}")
        elif e.lower_bound:
            out.append("room without protected work exists already: it waits for the work "
                       "considered before it, which is served first")
        else:
            out.append("room without protected work exists already: it waits for the "
                       "rebalance rules to let it displace that work (or for that work to end)")
    out.extend(e.caveats)
    return out


__all__ = ["Explanation", "Rival", "Victim", "explain"]
