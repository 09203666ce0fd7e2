"""Builders and a small deterministic driver for the core tests.

The driver applies decisions the way the simulator does: host changes first, then
preemptions (the victim exits at once: requeued if the preemption says so, else finished),
then starts; it loops ``decide`` at one instant until a pass is quiet, and jumps from one
event to the next (submission, true completion, end of a minimum runtime, host event, hour
boundary).
Every pass is checked against the per-pass invariants in :func:`check_pass`, and after
every event folded into the state (a submission, start, stop, requeue, reservation, host
change) every index of the state is compared with one rebuilt from the work alone
(:func:`.oracle.check_indexes`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from apportion.core import (
    BudgetNode,
    BudgetTree,
    ClusterState,
    Decisions,
    Host,
    HostState,
    PolicyConfig,
    Preempt,
    PreemptReason,
    Running,
    Slice,
    WorkloadSpec,
    decide,
)

from .oracle import check_indexes

HOUR = 3600.0
EPS = 1e-6


# ---- builders ----------------------------------------------------------------------------
def make_tree(*nodes: tuple[str, float] | str) -> BudgetTree:
    """``make_tree("a", ("b", 3.0), "c/d")``: weight 1 unless given."""
    return BudgetTree.build(
        BudgetNode(n, 1.0) if isinstance(n, str) else BudgetNode(n[0], n[1]) for n in nodes
    )


def make_hosts(*sizes: int, prefix: str = "h") -> list[Host]:
    """``make_hosts(8, 8, 4)`` -> hosts h0, h1, h2 with those GPU counts."""
    return [Host(f"{prefix}{i}", g) for i, g in enumerate(sizes)]


def make_spec(
    wid: str,
    budget: str = "a",
    gpus: int = 1,
    min_runtime: float = HOUR,
    submit_time: float = 0.0,
    *,
    resumable: bool = False,
    priority: int = 0,
    checkpoint_interval: float = 0.0,
) -> WorkloadSpec:
    return WorkloadSpec(
        wid,
        budget,
        gpus,
        min_runtime,
        submit_time,
        resumable=resumable,
        priority=priority,
        checkpoint_interval=checkpoint_interval,
    )


def make_state(tree: BudgetTree, hosts: Iterable[Host], start: float = 0.0) -> ClusterState:
    return ClusterState(tree, list(hosts), start=start)


def run_on(
    state: ClusterState, spec: WorkloadSpec, t: float, *slices: tuple[str, int]
) -> Running:
    """Submit ``spec`` and start it at ``t`` on the given ``(host, gpus)`` slices."""
    state.submit(spec, t)
    return state.start(spec.id, tuple(Slice(h, g) for h, g in slices), t)


# ---- per-pass invariants -----------------------------------------------------------------
def shape_ok(state: ClusterState, gpus: int, placement: Sequence[Slice]) -> bool:
    """Up to one host's GPUs: exactly that many on one host. More: whole hosts only."""
    max_size = max(h.gpus for h in state.hosts.values())
    if gpus <= max_size:
        return len(placement) == 1 and placement[0].gpus == gpus
    names = [s.host for s in placement]
    return (
        len(set(names)) == len(names)
        and all(s.gpus == state.hosts[s.host].gpus for s in placement)
        and sum(s.gpus for s in placement) >= gpus
    )


def check_pass(
    state: ClusterState, now: float, d: Decisions, config: PolicyConfig | None = None
) -> None:
    """Invariants every single pass must satisfy, judged on the state it was given (and, with
    ``config``, the restart protection it sets)."""
    pre_ids = [p.workload for p in d.preemptions]
    assert len(pre_ids) == len(set(pre_ids)), f"a workload preempted twice: {pre_ids}"
    start_ids = [s.workload for s in d.starts]
    assert len(start_ids) == len(set(start_ids)), f"a workload started twice: {start_ids}"
    assert not set(pre_ids) & set(start_ids), "a workload both started and preempted"
    for p in d.preemptions:
        r = state.running.get(p.workload)
        assert r is not None, f"preempted {p.workload} is not running"
        assert not r.stopping, f"preempted {p.workload} is already stopping"
        if r.spec.allocated:
            assert now >= r.started_at + r.spec.min_runtime - EPS, (
                f"{p.workload} preempted at {now}, protected until {r.protected_until()}"
            )
        assert p.requeue == r.spec.resumable, f"{p.workload}: requeue must follow resumable"
        if config is not None and r.restarted and p.reason is PreemptReason.REBALANCE:
            assert now >= r.started_at + config.restart_protection - EPS, (
                f"{p.workload} restarted at {r.started_at}, rebalanced again at {now}"
            )
        if p.by is not None:
            by = state.pending.get(p.by)
            assert by is not None, f"preemptor {p.by} of {p.workload} is not pending"
            assert by.spec.allocated, f"unallocated {p.by} preempted {p.workload}"
    # starts only on free GPUs (victims may still be holding theirs), healthy hosts, right shape
    extra: dict[str, int] = {}
    for s in d.starts:
        queued = state.pending.get(s.workload)
        assert queued is not None, f"started {s.workload} is not pending"
        assert shape_ok(state, queued.spec.gpus, s.placement), (
            f"{s.workload} ({queued.spec.gpus} GPUs) badly shaped: {s.placement}"
        )
        for sl in s.placement:
            assert state.hosts[sl.host].state is HostState.HEALTHY, (
                f"{s.workload} started on {sl.host} ({state.hosts[sl.host].state.value})"
            )
            extra[sl.host] = extra.get(sl.host, 0) + sl.gpus
    for host, g in extra.items():
        assert state.used[host] + g <= state.hosts[host].gpus, f"host {host} over-committed"
    # order: all allocated pending considered before any unallocated
    kinds = [state.pending[w].spec.allocated for w in d.order]
    assert kinds == sorted(kinds, reverse=True), "unallocated work considered before allocated"
    assert len(d.order) == len(set(d.order)), "a workload considered twice"
    for c in d.host_changes:
        assert state.hosts[c.host].state is HostState.DRAINING and c.to is HostState.REPAIR
        assert not state.on_host[c.host], f"host {c.host} sent to repair while busy"
    # a rebalance put off for checkpoints: within the bound and the share guarantee's, its
    # victims running, unprotected, not preempted by this pass
    for w in d.checkpoint_waits:
        queued = state.pending.get(w.workload)
        assert queued is not None, f"{w.workload} waits for checkpoints but is not pending"
        assert w.workload not in start_ids, f"{w.workload} both started and waiting"
        assert now < w.until, f"{w.workload}: a checkpoint wait until {w.until} at {now}"
        if config is not None:
            assert w.until <= now + config.checkpoint_wait + EPS, f"{w.workload}: wait too long"
            assert w.until <= queued.queued_at + config.max_min_runtime + EPS, (
                f"{w.workload}: its wait ends after the share guarantee's bound"
            )
        for v in w.victims:
            r = state.running.get(v)
            assert r is not None and not r.stopping, f"{w.workload} waits for {v}, not running"
            assert v not in pre_ids, f"{v} both preempted and waited for"
            assert now >= r.protected_until() - EPS, f"{w.workload} waits for protected {v}"


# ---- the driver ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    spec: WorkloadSpec
    duration: float  # true running time, unknown to the policy


@dataclass(frozen=True)
class HostEvent:
    time: float
    host: str
    kind: str  # "drain" | "fail" | "repair"


@dataclass
class RunRecord:
    """One run of one workload: what the ledger should have charged for it."""

    id: str
    budget: str
    gpus: int
    allocated: bool
    start: float
    end: float | None = None


Policy = Callable[[ClusterState, float, PolicyConfig], Decisions]


@dataclass
class Driver:
    """Replays jobs and host events against ``decide``; a tiny copy of the simulator loop."""

    state: ClusterState
    config: PolicyConfig = field(default_factory=PolicyConfig)
    max_rounds: int = 50
    on_pass: Callable[[ClusterState, float, Decisions], None] | None = None
    policy: Policy = decide
    check_indexes: bool = True  # the index oracle after every event
    # how long after the moment a pass asked for (Decisions.recheck_at) the next one comes:
    # 0 as in the simulator; more as in the service, whose passes follow the wall clock
    recheck_late: float = 0.0

    def __post_init__(self) -> None:
        self.durations: dict[str, float] = {}
        self.ends: dict[str, float] = {}  # running id -> true end of its current run
        self.runs: list[RunRecord] = []
        self.open: dict[str, RunRecord] = {}
        self.passes: list[tuple[float, Decisions]] = []
        self.preempted: list[tuple[float, Preempt]] = []
        self.rounds_at: dict[float, int] = {}
        self.rechecks: list[float] = []  # moments passes asked for (checkpoint waits)
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = 0

    # -- input
    def add_jobs(self, jobs: Iterable[Job]) -> None:
        for j in jobs:
            self._push(j.spec.submit_time, 1, j)

    def add_host_events(self, events: Iterable[HostEvent]) -> None:
        for e in events:
            self._push(e.time, 0, e)

    def _push(self, t: float, kind: int, item: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, kind, self._seq, item))

    def _checked(self, event: str) -> None:
        if self.check_indexes:
            check_indexes(self.state, event)

    # -- applying decisions (as the simulator does: victims exit at once)
    def apply(self, d: Decisions, now: float) -> None:
        st = self.state
        for c in d.host_changes:
            st.set_host_state(c.host, c.to, now)
            self._checked(f"host {c.host} -> {c.to.value} at {now}")
        for w in d.timeouts:  # stopped at its time limit: it ends, never requeued
            st.mark_stopping(w)
            self._checked(f"marking {w} stopping at its time limit at {now}")
            self._stop(w, now, requeue=False)
        for p in d.preemptions:
            st.mark_stopping(p.workload)
            self._checked(f"marking {p.workload} stopping at {now}")
            self.preempted.append((now, p))
            self._stop(p.workload, now, p.requeue)
        for res in d.reservations:
            st.reserve(res.workload, res.hosts)
            self._checked(f"reserving {res.hosts} for {res.workload} at {now}")
        for s in d.starts:
            r = st.start(s.workload, s.placement, now)
            self._checked(f"starting {s.workload} on {s.placement} at {now}")
            rec = RunRecord(s.workload, r.spec.budget, r.gpus_held, r.spec.allocated, now)
            self.runs.append(rec)
            self.open[s.workload] = rec
            self.ends[s.workload] = now + self.durations.get(s.workload, 10 * HOUR)

    def _stop(self, wid: str, now: float, requeue: bool) -> None:
        rec = self.open.pop(wid, None)  # work started before the driver took over has none
        if rec is not None:
            rec.end = now
        self.ends.pop(wid, None)
        if requeue:
            self.state.requeue(wid, now)
        else:
            self.state.finish(wid, now)
        self._checked(f"{'requeueing' if requeue else 'finishing'} {wid} at {now}")

    def settle(self, now: float) -> int:
        """Decide and apply at ``now`` until a pass is quiet; returns the rounds it took."""
        for i in range(self.max_rounds):
            d = self.policy(self.state, now, self.config)
            check_pass(self.state, now, d, self.config)
            if self.on_pass is not None:
                self.on_pass(self.state, now, d)
            if d.recheck_at is not None:  # a pass is due then, as in the simulator
                self.rechecks.append(d.recheck_at + self.recheck_late)
            for w in d.checkpoint_waits:  # recorded as the simulator does, even alone
                self.state.await_checkpoints(w.workload, w.until, w.victims)
            if d.empty():
                self.rounds_at[now] = i
                return i
            self.passes.append((now, d))
            self.apply(d, now)
        raise AssertionError(f"no quiet pass at {now} after {self.max_rounds} rounds")

    # -- time
    def next_time(self, now: float) -> float | None:
        cands = [t for t in self.ends.values()]
        cands += self.rechecks
        cands += self.state.deadlines.values()  # time limits end runs with no other event
        cands += [
            r.protected_until()
            for r in self.state.running.values()
            if r.spec.allocated and r.protected_until() > now
        ]
        if self._events:
            cands.append(self._events[0][0])
        # hourly accounting boundaries, as in the simulator: usage ratios move with time
        # alone, so a swap the rules refused may become allowed with no other event
        cands.append((math.floor(now / HOUR) + 1) * HOUR)
        later = [t for t in cands if t > now]
        return min(later) if later else None

    def step_to(self, now: float) -> None:
        """Fold every event at ``now`` into the state, then settle."""
        st = self.state
        for wid in sorted(w for w, t in self.ends.items() if t <= now):
            self._stop(wid, now, requeue=False)
        while self._events and self._events[0][0] <= now:
            _, _, _, item = heapq.heappop(self._events)
            if isinstance(item, Job):
                self.durations[item.spec.id] = item.duration
                st.submit(item.spec, now)
                self._checked(f"submitting {item.spec.id} at {now}")
            elif isinstance(item, HostEvent):
                self._host_event(item, now)
        self.settle(now)

    def _host_event(self, e: HostEvent, now: float) -> None:
        st = self.state
        state = st.hosts[e.host].state
        if e.kind == "drain" and state is HostState.HEALTHY:
            st.set_host_state(e.host, HostState.DRAINING, now)
            self._checked(f"draining {e.host} at {now}")
        elif e.kind == "fail" and state is not HostState.DOWN:
            for wid in sorted(st.on_host[e.host]):
                self._stop(wid, now, st.running[wid].spec.resumable)
            st.set_host_state(e.host, HostState.DOWN, now)
            self._checked(f"{e.host} failing at {now}")
        elif e.kind == "repair" and state in (HostState.DOWN, HostState.REPAIR):
            st.set_host_state(e.host, HostState.HEALTHY, now)
            self._checked(f"repairing {e.host} at {now}")

    def run(self, until: float, start: float | None = None) -> float:
        """Advance from event to event up to ``until`` (inclusive); returns the last time."""
        now = self.state.time if start is None else start
        self.step_to(now)
        while True:
            nxt = self.next_time(now)
            if nxt is None or nxt > until:
                return now
            now = nxt
            self.step_to(now)

    def close_runs(self, now: float) -> list[RunRecord]:
        """All runs, the open ones cut at ``now``."""
        return [RunRecord(r.id, r.budget, r.gpus, r.allocated, r.start,
                          now if r.end is None else r.end) for r in self.runs]


def held_by(state: ClusterState, budget: str) -> int:
    """GPUs held right now by allocated work of ``budget``'s subtree."""
    return sum(
        r.gpus_held
        for r in state.running.values()
        if r.spec.allocated and (r.spec.budget == budget or r.spec.budget.startswith(budget + "/"))
    )
