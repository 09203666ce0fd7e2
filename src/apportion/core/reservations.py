"""Reservations of whole hosts for the large gang workload of a budget that is owed GPUs.

Without them a large request (more than one host) of an under-used budget waits for hosts
to empty by chance: each GPU freed goes to the smaller work ranked around it, and the
rebalance rules rarely let one request take dozens of GPUs at once (the admission charge
of so many GPUs puts the preemptor over its victims). Slurm answers this with backfill
around a reservation, and so does this module:

* **who**: the head of the queue of a leaf budget whose usage ratio is below 1, when it
  asks for more than one host's GPUs, lowest ratio first, at most
  ``PolicyConfig.reservations`` of them at once (none while another of its budget waits
  for victims already preempted for it).
* **which hosts**: each host is *ready* when nothing on it can hold the reservation off any
  more: unallocated and stopping work at once; allocated work at the end of its protection
  (its minimum runtime, and its restart protection) and its next checkpoint if the
  reservation may take it, or at its time limit; allocated work it may not take and that
  has no time limit keeps the host out of reach. It may take resumable work of any other
  budget (:func:`may_take`): never a non-resumable run, which would lose all, never its own
  budget's work.
  The hosts ready first are reserved; the reservation starts (``ready``) when the last of them
  is. Whole hosts only, chosen by readiness: a host that is ready sooner is kept whole.
* **meanwhile** the reserved hosts are out of the rest of the pass's reach; afterwards
  (:func:`backfill`) their free GPUs go to work that cannot delay the start: unallocated
  work (preempted when it starts), work whose time limit ends by then, and resumable
  allocated work of any other budget whose protection, and a checkpoint after it, fall by
  then (taken back when it starts, losing nothing it has not saved).
* **at its start** (``ready <= now``) the workload takes the hosts: what is still on them
  is preempted for it (never protected work: placement refuses it whatever this says),
  and the existing hand-over (``Decisions.reservations``) gives it the GPUs as they free.

A reservation is worked out afresh each pass from the state, so it is no state of its own;
protections only end as time passes, so a reservation's start only moves earlier (a host
that empties sooner than planned replaces a later one) unless a host fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from .config import PolicyConfig
from .placement import HostView, VictimPlan, find_fit
from .preemption import Candidate, RebalanceRules, next_checkpoint
from .state import ClusterState
from .tree import ancestors
from .types import Placement, Running, WorkloadSpec

_INF: Final = float("inf")


@dataclass(slots=True)
class Fence:
    """Hosts reserved for ``spec`` from ``ready`` on; ``withheld``: free GPUs per host kept
    out of the pass's walk, offered by :func:`backfill` to work that cannot delay it."""

    spec: WorkloadSpec
    ratio: float
    hosts: tuple[str, ...]
    ready: float
    withheld: dict[str, int] = field(default_factory=dict)


def heads(
    state: ClusterState, rules: RebalanceRules, config: PolicyConfig, skip: set[str]
) -> list[WorkloadSpec]:
    """The large workloads that get a reservation this pass, lowest budget ratio first."""
    if config.reservations <= 0:
        return []
    multi = state.max_host_gpus
    busy = {state.pending[w].spec.budget for w in state.reservations if w in state.pending}
    owed: list[tuple[float, str]] = []
    for leaf, sizes in state.sizes.items():
        if leaf in busy or not any(gpus > multi for gpus, _ in sizes):
            continue
        head = state.pending[state.queues[leaf][0][1]].spec
        if head.gpus <= multi:
            continue
        ratio = rules.ratio(leaf)
        if ratio < 1.0:
            owed.append((ratio, leaf))
    out: list[WorkloadSpec] = []
    for _, leaf in sorted(owed):
        if len(out) + len(busy) >= config.reservations:
            break
        spec = state.pending[state.queues[leaf][0][1]].spec
        if spec.gpus > multi and spec.id not in skip:
            out.append(spec)
    return out


def _sides(mine: str, theirs: str) -> tuple[str, str] | None:
    """The two sibling subtrees where the paths of budgets ``mine`` and ``theirs`` diverge
    (``mine``'s first), or None for one budget."""
    if mine == theirs:
        return None
    up = ancestors(theirs)
    below_theirs = {parent: child for child, parent in zip(up, up[1:], strict=False)}
    prev = mine
    for node in ancestors(mine):
        if node in below_theirs:
            return (prev, below_theirs[node]) if node != mine else None
        prev = node
    return None


def may_take(head: str, budget: str) -> bool:
    """May a reservation of budget ``head`` take resumable allocated work of ``budget`` once
    it is unprotected (at its next checkpoint)? Any other budget's: what runs on the hosts
    meanwhile is there on the reservation's terms (backfill), and what ran there before has
    had its minimum runtime, the contract's whole promise. Never its own budget's: priority
    never preempts."""
    return _sides(head, budget) is not None


def _ready(
    state: ClusterState, view: HostView, config: PolicyConfig, head: str, host: str,
    now: float,
) -> float:
    """When nothing on ``host`` can hold a reservation of budget ``head`` off any more."""
    ready = now
    for wid in state.on_host[host]:
        if wid in state.stopping or wid in view.claimed:
            continue  # on its way out
        r = state.running[wid]
        spec = r.spec
        if not spec.allocated:
            continue
        until = _INF
        if spec.resumable and may_take(head, spec.budget):
            until = r.protected_until()
            if r.restarted:
                until = max(until, r.started_at + config.restart_protection)
            until = _checkpointed(r, until, config)
        if spec.time_limit > 0:
            until = min(until, r.started_at + spec.time_limit)
        ready = max(ready, until)
        if ready == _INF:
            break
    return ready


def _checkpointed(r: Running, at: float, config: PolicyConfig) -> float:
    """The first moment from ``at`` when preempting ``r`` loses nothing it has not saved."""
    return next_checkpoint(r, at, config)


def plan(
    state: ClusterState, view: HostView, rules: RebalanceRules, config: PolicyConfig,
    spec: WorkloadSpec, now: float,
) -> Fence | None:
    """The hosts to reserve for ``spec`` and when they are ready, or None if too few hosts
    would ever be (or the hosts it may use are too few)."""
    ratio = rules.ratio(spec.budget)
    allowed = set(spec.hosts) if spec.hosts else None
    options: list[tuple[float, str]] = []
    for name in view.names:
        if name in view.touched or (allowed is not None and name not in allowed):
            continue
        ready = _ready(state, view, config, spec.budget, name, now)
        if ready < _INF:
            options.append((ready, name))
    options.sort(key=lambda o: (o[0], -view.size[o[1]], o[1]))
    chosen: list[str] = []
    total = 0
    ready = now
    for at, name in options:
        if total >= spec.gpus:
            break
        chosen.append(name)
        total += view.size[name]
        ready = at
    if total < spec.gpus:
        return None
    return Fence(spec, ratio, tuple(sorted(chosen)), ready)


def victims(view: HostView, fence: Fence, now: float) -> list[Candidate]:
    """What is still on the fence's hosts and may be preempted for it now (each once)."""
    out: dict[str, Candidate] = {}
    for name in fence.hosts:
        for c in view.candidates(name, now):
            if c.id not in view.claimed:
                out.setdefault(c.id, c)
    return sorted(out.values(), key=lambda c: (c.klass, c.lost, c.id))


def hand_over(view: HostView, fence: Fence, now: float) -> tuple[Placement | None, VictimPlan]:
    """At its start: a placement if the hosts are free already, else the plan that claims
    them and the victims to preempt for it (none if only stopping work is left)."""
    placement = find_fit(view, fence.spec.gpus, only=fence.hosts)
    taken = victims(view, fence, now)
    hosts = tuple((h, view.size[h]) for h in fence.hosts)
    return placement, VictimPlan(hosts, tuple(taken), (sum(c.lost for c in taken), 0, len(taken)))


def withhold(view: HostView, fence: Fence, now: float) -> None:
    """Keep the fence's hosts out of the rest of the pass: their free and stopping GPUs
    promised, the work on them no victim for anyone else."""
    fence.withheld = {h: view.free[h] for h in fence.hosts}
    hosts = tuple((h, view.free[h] + view.stopping[h]) for h in fence.hosts)
    view.claim(VictimPlan(hosts, tuple(victims(view, fence, now)), (0.0, 0, 0)))


def may_backfill(
    config: PolicyConfig, fence: Fence, spec: WorkloadSpec, restarted: bool, now: float,
) -> bool:
    """May pending ``spec`` start on the fence's hosts before it begins? Only if it cannot
    delay it: unallocated work (preempted when it begins), work whose time limit ends by
    then, and resumable allocated work of another budget whose protection (and restart
    protection) ends by then and that checkpoints by then too (preempted when it begins,
    losing nothing it has not saved)."""
    if not spec.allocated:
        return True
    if spec.time_limit > 0 and now + spec.time_limit <= fence.ready:
        return True
    if not spec.resumable or not may_take(fence.spec.budget, spec.budget):
        return False
    protected = spec.min_runtime + (config.restart_protection if restarted else 0.0)
    if not spec.checkpoint_on_term:
        interval = spec.checkpoint_interval or config.default_checkpoint_interval
        if interval > 0:  # its first checkpoint at or after the end of its protection
            protected = math.ceil(protected / interval - 1e-9) * interval
    return now + protected <= fence.ready


def backfill(
    state: ClusterState, view: HostView, rules: RebalanceRules, config: PolicyConfig,
    fences: Sequence[Fence], started: set[str], now: float,
) -> list[tuple[WorkloadSpec, Placement]]:
    """Give the GPUs the fences withheld to pending work that cannot delay them: allocated
    work first (lowest budget ratio, then queue order), then unallocated work."""
    open_fences = [f for f in fences if any(f.withheld.values())]
    if not open_fences:
        return []
    for f in open_fences:
        for h, gpus in f.withheld.items():
            view.give_back(h, gpus)
    most = max(g for f in open_fences for g in f.withheld.values())
    whole = max(sum(f.withheld.values()) for f in open_fences)
    tries: list[tuple[tuple[int, float, int, float, str], WorkloadSpec, bool]] = []
    for wid, p in state.pending.items():
        spec = p.spec
        if wid in started or spec.gpus > whole or (spec.gpus <= view.max_size and spec.gpus > most):
            continue
        key = (0 if spec.allocated else 1, rules.ratio(spec.budget), -spec.priority,
               p.queued_at, wid)
        tries.append((key, spec, p.restarted))
    tries.sort(key=lambda t: t[0])
    out: list[tuple[WorkloadSpec, Placement]] = []
    for _, spec, restarted in tries:
        for f in open_fences:
            if not may_backfill(config, f, spec, restarted, now):
                continue
            only = f.hosts if not spec.hosts else tuple(h for h in f.hosts if h in spec.hosts)
            placement = find_fit(view, spec.gpus, only=only)
            if placement is not None:
                view.take(placement)
                out.append((spec, placement))
                break
    return out
