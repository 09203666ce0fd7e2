"""The live service's own history as a simulator trace (``apportion export-trace`` and
``apportion whatif``; docs/simulator.md, "What-if on live history").

A period ``[start, end)`` of the store becomes:

* one ``SimJob`` per workload submitted in the period: its spec as submitted (budget,
  user, GPUs, minimum runtime, resumable, priority, checkpoint interval, time limit,
  checkpoint on SIGTERM; not its hosts or dependencies) and, as its true
  duration, the time it ran, summed over its attempts and cut at ``end`` (work still running
  at the end counts with its run so far). Work that never ran by the end is still demand:
  it is replayed with the mean run of the workloads of its budget that completed in the
  period (of all budgets if none did; its minimum runtime, at least a minute, if nothing
  completed). Work cancelled before it ever ran is left out, as is work submitted to a
  leaf that has children now (the tree replayed is today's, whose leaves work draws on);
* the budget tree and the hosts as the store holds them now;
* with pools (hosts of several clusters or GPU kinds, or billing or per-pool weights that
  apply to the hosts there are: docs/service.md, "Pools"), each host's cluster and kind, the
  GPU kinds and cluster each workload asked for, and the billing and per-pool weights, so
  the replay runs on the same fleet; a one-pool service's history is one plain cluster, as
  before (its workloads' kinds, all of the one kind there is, are left out);
* host events from the audit log's ``host.state`` entries in the period (draining ->
  unhealthy, down -> failure, back to healthy -> repaired; the engine itself models the
  automated repair of a drained host).

Times are seconds after ``origin``: the first exported submission (so that a trace importer
that starts the replay at the first submission, as ``apportion simulate --trace`` does, reads
the same times); a host event before it is applied at 0."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from apportion.core import BudgetTree, Host, WorkloadSpec
from apportion.core.fleet import FleetConfig
from apportion.sim.model import HostEvent, HostEventKind, Pools, SimJob

from .config import PoolsConfig
from .store import Store
from .store.models import AttemptModel, AuditModel, WorkloadModel
from .store.rows import HostRow

# the audit log's new host state -> the simulator's host event
_HOST_EVENTS = {"draining": HostEventKind.UNHEALTHY, "down": HostEventKind.FAIL,
                "healthy": HostEventKind.REPAIRED}


@dataclass
class History:
    start: float
    end: float
    origin: float  # absolute time of the replay's 0: the first exported submission
    jobs: list[SimJob]
    tree: BudgetTree
    hosts: tuple[Host, ...]
    host_events: list[HostEvent]
    waiting_at_end: int = 0  # never started by the end: replayed with an estimated run
    cancelled_unstarted: int = 0  # cancelled before they ever ran: left out
    running_at_end: int = 0  # replayed with their run so far
    # submitted to a leaf that has children now (work draws on leaves only): left out
    in_former_leaves: dict[str, int] = field(default_factory=dict)
    pools: Pools | None = None  # several pools (or billing or per-pool weights); None: one


def pools_of(hosts: list[HostRow], tree: BudgetTree, config: PoolsConfig) -> Pools | None:
    """The hosts' pools, as the scheduler makes them (``config``'s defaults for a host that
    names none), with the billing of the kinds there are and the per-pool weights of the
    pools there are and the budgets ``tree`` has; ``None`` for one pool that neither is
    billed other than 1 nor has per-pool weights: a plain cluster decides the same."""
    of_host = {h.name: config.of(h.cluster, h.kind) for h in hosts}
    kinds = {k for _, k in of_host.values()}
    names = {f"{c}/{k}" for c, k in of_host.values()}
    fleet = config.fleet(tree)
    billing = {k: w for k, w in fleet.billing.items() if k in kinds}
    overrides = {p: ws for p, ws in fleet.overrides.items() if p in names}
    if len(names) <= 1 and all(w == 1 for w in billing.values()) and not overrides:
        return None
    return Pools(of_host, FleetConfig(billing=billing, overrides=overrides))


def latest_record(store: Store) -> float | None:
    """The latest time the store recorded: a submission, an attempt's start or end, or an
    audit entry."""
    with Session(store.engine) as s:
        times: list[Any] = [
            s.scalar(select(WorkloadModel.submit_time).order_by(
                WorkloadModel.submit_time.desc()).limit(1)),
            s.scalar(select(AttemptModel.started_at).order_by(
                AttemptModel.started_at.desc()).limit(1)),
            s.scalar(select(AttemptModel.ended_at).where(AttemptModel.ended_at.is_not(None))
                     .order_by(AttemptModel.ended_at.desc()).limit(1)),
            s.scalar(select(AuditModel.at).order_by(AuditModel.at.desc()).limit(1)),
        ]
    found = [float(t) for t in times if t is not None]
    return max(found) if found else None


def read_history(store: Store, start: float, end: float,
                 pools: PoolsConfig | None = None) -> History:
    """The period ``[start, end)`` of ``store`` as simulator input (times after the first
    exported submission); ``pools``: the service's (its config's ``[pools]``, ``billing``
    and ``overrides``; default: none, one pool ``default/gpu``)."""
    tree = store.load_tree()
    host_rows = store.hosts()
    fleet = pools_of(host_rows, tree, pools or PoolsConfig())
    with Session(store.engine) as s:
        rows = list(s.scalars(
            select(WorkloadModel)
            .where(WorkloadModel.submit_time >= start, WorkloadModel.submit_time < end,
                   WorkloadModel.id.is_not(None))
            .order_by(WorkloadModel.submit_time, WorkloadModel.seq)))
        ran: dict[str, float] = {}
        running: set[str] = set()
        ids = [str(r.id) for r in rows]
        for i in range(0, len(ids), 500):  # keep IN lists small
            for a in s.scalars(select(AttemptModel).where(
                    AttemptModel.workload_id.in_(ids[i:i + 500]))):
                if a.started_at >= end:
                    continue
                stop = end if a.ended_at is None or a.ended_at > end else float(a.ended_at)
                if a.ended_at is None or a.ended_at > end:
                    running.add(a.workload_id)
                ran[a.workload_id] = ran.get(a.workload_id, 0.0) + max(0.0, stop - a.started_at)
        audit = list(s.scalars(
            select(AuditModel)
            .where(AuditModel.action == "host.state", AuditModel.at >= start,
                   AuditModel.at < end)
            .order_by(AuditModel.at, AuditModel.id)))
    # the true run of a workload that finished by the end is what it ran; a finished one's
    # mean per budget stands in for the unknown run of work still waiting at the end
    done: dict[str, list[float]] = {}
    for r in rows:
        if r.status == "completed" and str(r.id) not in running and ran.get(str(r.id), 0) > 0:
            done.setdefault(r.budget, []).append(ran[str(r.id)])
    every = [d for ds in done.values() for d in ds]
    jobs: list[SimJob] = []
    waiting = cancelled = 0
    origin: float | None = None
    former_leaves: dict[str, int] = {}
    for r in rows:
        wid = str(r.id)
        if not tree.is_leaf(r.budget):  # the tree replayed is today's; it has no place
            former_leaves[r.budget] = former_leaves.get(r.budget, 0) + 1
            continue
        duration = ran.get(wid, 0.0)
        if duration <= 0:
            if r.status == "cancelled":  # withdrawn before it ever ran: no demand to replay
                cancelled += 1
                continue
            waiting += 1
            known = done.get(r.budget) or every
            duration = sum(known) / len(known) if known else max(r.min_runtime, 60.0)
        if origin is None:
            origin = float(r.submit_time)
        jobs.append(SimJob(
            WorkloadSpec(wid, r.budget, r.gpus, r.min_runtime, float(r.submit_time) - origin,
                         user=r.user, resumable=r.resumable, priority=r.priority,
                         checkpoint_interval=r.checkpoint_interval,
                         time_limit=r.time_limit, checkpoint_on_term=r.checkpoint_on_term,
                         gpu_kinds=tuple(r.gpu_kinds or ()) if fleet else (),
                         cluster=r.cluster if fleet else ""),
            duration))
    origin = start if origin is None else origin
    hosts = tuple(Host(h.name, h.gpus) for h in host_rows)
    names = {h.name for h in hosts}
    events = [HostEvent(max(0.0, a.at - origin), a.target, _HOST_EVENTS[a.new["state"]])
              for a in audit
              if isinstance(a.new, dict) and a.new.get("state") in _HOST_EVENTS
              and a.target in names]
    return History(start=start, end=end, origin=origin, jobs=jobs, tree=tree,
                   hosts=hosts, host_events=events, waiting_at_end=waiting,
                   cancelled_unstarted=cancelled, in_former_leaves=former_leaves,
                   running_at_end=len(running & {j.spec.id for j in jobs}), pools=fleet)
