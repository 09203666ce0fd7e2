"""The discrete-event simulator: a simulated clock, an in-memory executor and a policy.

The kernel is a heap of ``(time, priority, sequence, kind, arg, generation)`` entries, as in
SimPy: the clock jumps from one schedulable moment to the next and the sequence number
breaks ties, so a run is deterministic. At each moment the engine folds every due event into
the :class:`~apportion.core.ClusterState`, then loops ``policy(state, now, config)`` and
applies its decisions until a pass settles the instant (``Decisions.settles``: it decided
nothing, or only starts), as the live scheduler does. The policy sees only
``WorkloadSpec``s; true durations, checkpoints and squatting live here. Event table, cost
model and metric formulas: docs/simulator.md.
"""

from __future__ import annotations

import dataclasses
import heapq
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from apportion import core_build
from apportion.core import (
    SIZE_CLASSES,
    WORKLOAD_TRANSITIONS,
    ClusterState,
    CoreError,
    Decisions,
    Hold,
    HostState,
    PolicyConfig,
    PreemptReason,
    Status,
    WorkloadSpec,
    check_transition,
    decision_log,
    is_debug,
    release,
    size_class,
    validate_spec,
)
from apportion.core.consequences import on_host_death, on_stopped, preemption_cost
from apportion.core.fleet import FleetState

from .metrics import HOUR, Recorder, p90, percentiles, ratio, team_of
from .model import HostEventKind, LegacyPriority, Scenario, SimJob

# a policy reads a ClusterState, or a FleetState for a scenario with pools (sim/fleet.py)
Policy = Callable[[Any, float, PolicyConfig], Decisions]

# event kinds; the value is also the priority among events due at the same instant
FAIL, UNHEALTHY, REPAIRED, HUMAN_KILL, COMPLETE, SUBMIT, MIN_RUNTIME_END, HOUR_END, ABANDON = (
    range(9)
)
TIME_LIMIT = 9  # a run reaches its time limit: a moment for the policy to stop it
RECHECK = 10  # a rebalance put off until its victims' checkpoints is due (Decisions.recheck_at)
# What the outputs call three situations core's lifecycle names otherwise: work held out of
# the queue (core: pending), a submission refused by validate_spec (it never entered the
# lifecycle) and work withdrawn when its owner's patience ran out (core: cancelled).
HELD, REJECTED, ABANDONED = "held", "rejected", "abandoned"
_ACTIVE = (Status.PENDING, Status.RUNNING)
_EPS = 1e-6


class Observer(Protocol):
    """Optional extra of a policy object: told of queue changes so it can keep an index.

    ``kind`` is ``queued`` (submitted or requeued), ``started``, ``ended`` (stopped running),
    ``unqueued`` (left the queue without starting: abandoned) for workload ``name``, or
    ``host`` for host ``name``."""

    def observe(self, kind: str, name: str, state: Any) -> None: ...


SIM_NUMBER_KNOBS: Final = frozenset({"legacy_cap_factor"})
"""The float settings of :class:`SimConfig` that are plain numbers, not durations (as
``apportion.core.NUMBER_KNOBS`` for the policy's)."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Engine settings (not policy): the cost model and the human in the loop."""

    # s, the true checkpoint interval of resumable work that declares none (None: the policy's
    # own assumption, PolicyConfig.default_checkpoint_interval)
    checkpoint_default: float | None = None
    restart_overhead: float = 120.0  # s of set-up added to every resumed run
    human_kill_after: float = 86400.0  # s after a drain began, what is left is killed by hand
    decide_rounds: int = 50  # cap on decide/apply rounds at one instant
    legacy_team_depth: int = 2  # path levels naming a team
    legacy_cap_factor: float = 1.0  # legacy non-preemptible cap = factor x team share x GPUs
    # a min_runtime over PolicyConfig.max_min_runtime is lowered to it (as users would under
    # that cap) instead of the submission being refused: what sweeps over the cap need
    clamp_min_runtime: bool = True

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if value < 0 or (f.name in ("decide_rounds", "legacy_team_depth") and value < 1):
                raise ValueError(f"{f.name}: must be {'>= 1' if value < 1 else '>= 0'}")


class _Job:
    """What the engine knows about one workload (its in-memory executor record)."""

    __slots__ = (
        "budget", "debug", "end", "first_start", "first_wait", "held", "job", "label", "lost_s",
        "overhead", "preemptions", "queued_at", "remaining", "run_no", "run_s", "run_start",
        "runs", "spec", "status", "team", "wait_s",
    )

    def __init__(self, job: SimJob, team: str, debug: bool) -> None:
        self.job = job
        self.spec = job.spec  # as submitted (min_runtime may be lowered to the cap)
        self.budget = job.spec.budget
        self.team = team
        self.debug = debug
        self.remaining = job.duration  # work (s) left to do
        self.overhead = 0.0  # set-up seconds at the start of the current/next run
        # core's lifecycle status; None until submitted, and for a refused submission
        self.status: Status | None = None
        self.label: str | None = None  # HELD, REJECTED or ABANDONED: the outputs' name
        self.queued_at = job.spec.submit_time
        self.first_start: float | None = None
        self.first_wait: float | None = None
        self.end: float | None = None
        self.run_start = 0.0
        self.held = 0  # GPUs of the current placement
        self.run_no = 0
        self.runs = 0
        self.preemptions = 0
        self.wait_s = 0.0
        self.run_s = 0.0  # GPU-seconds held
        self.lost_s = 0.0  # GPU-seconds of progress lost

    def move(self, to: Status) -> None:
        """Change status along core's transition table (an illegal move raises)."""
        old = self.status
        if old is None:
            raise CoreError(f"workload {self.spec.id}: state: not submitted, cannot go to "
                            f"{to.value}")
        check_transition(WORKLOAD_TRANSITIONS, "workload", self.spec.id, old, to)
        self.status = to

    def shown(self) -> str:
        """The status as the outputs name it (workloads-P.csv)."""
        if self.label is not None:
            return self.label
        return self.status.value if self.status is not None else Status.PENDING.value


@dataclass(slots=True)
class _Drain:
    host: str
    start: float
    end: float | None = None
    human: bool = False
    failed: bool = False


@dataclass(slots=True)
class RunResult:
    """Everything one run produced: the summary and the tables (see docs/simulator.md)."""

    policy: str
    summary: dict[str, Any]
    workloads: list[dict[str, object]]
    budget_hours: list[tuple[object, ...]]
    cluster_hours: list[tuple[object, ...]]
    log: list[str] | None = None


@dataclass
class Engine:
    """One run of one policy on one scenario. Call :meth:`run` once."""

    scenario: Scenario
    policy: Policy
    config: PolicyConfig
    name: str = "fairshare"
    sim: SimConfig = field(default_factory=SimConfig)
    seed: int = 0
    progress: bool = False
    keep_log: bool = False
    validate: Callable[[WorkloadSpec, Any, PolicyConfig], None] = validate_spec

    def __post_init__(self) -> None:
        sc = self.scenario
        self.end = sc.days * 86400.0
        keep = max(30 * 86400.0, 2 * float(self.config.lookback))
        # a FleetState has every method and view of ClusterState the engine uses
        self.state: ClusterState | FleetState
        if sc.pools is not None:  # several clusters and kinds: see sim/fleet.py
            from .fleet import fleet_state, fleet_validate

            self.state = fleet_state(sc, keep)
            if self.validate is validate_spec:
                self.validate = fleet_validate
        else:
            self.state = ClusterState(sc.tree, sc.hosts, start=0.0, ledger_keep=keep)
        self.total_gpus = sum(h.gpus for h in sc.hosts)
        lookback = float(self.config.lookback)
        ledger = self.state.ledger
        self.rec = Recorder(
            sc.tree, self.total_gpus, self.state.healthy_gpus(),
            charged=lambda t, node: ledger.charged(node, t, lookback),
            capacity=lambda t: ledger.capacity(t, lookback),
        )
        self.jobs: dict[str, _Job] = {}
        self._heap: list[tuple[float, int, int, int, Any, int]] = []
        self._seq = 0
        self._host_gen = {h.name: 0 for h in sc.hosts}
        self._drains: dict[str, _Drain] = {}
        self.drains: list[_Drain] = []
        # wait, debug, team, leaf, size class
        self.waits: list[tuple[float, bool, str, str, str]] = []
        self.preempt_counts = {r.value: 0 for r in PreemptReason}
        self.lost_by_reason = {r.value: 0.0 for r in PreemptReason}  # GPU-seconds
        self.protected = 0
        self.rejected = 0
        # why submissions were refused: core's reason -> (count, first workload refused)
        self.rejected_why: dict[str, tuple[int, str]] = {}
        self.clamped = 0
        self._lowered_at_import = frozenset(sc.min_runtime_lowered)
        self.abandoned: list[_Job] = []
        # submitted work held out of the queue (core.gating), and released array elements
        self._holds: dict[str, Hold] = {}
        self._array_of: dict[str, str] = {}
        self.host_failures = 0
        self.ignored_host_events = sc.dropped_host_events
        self.events = 0
        self.moments = 0
        self.calls = 0
        self.capped = 0
        self.restart_s = 0.0
        self.log: list[str] | None = [] if self.keep_log else None
        self._checkpoint_default = (
            self.sim.checkpoint_default if self.sim.checkpoint_default is not None
            else float(self.config.default_checkpoint_interval)
        )
        self._observe: Callable[[str, str, Any], None] | None = getattr(
            self.policy, "observe", None
        )
        if self._observe is not None:
            for name in self.state.hosts:
                self._observe("host", name, self.state)
        # told of each preemption before its "ended" (the fleet's per-pool figures count them)
        self._preempted: Callable[[str], None] | None = getattr(self.policy, "preempted", None)

    # ---- kernel ----------------------------------------------------------------------
    def schedule(self, t: float, kind: int, arg: Any, gen: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, kind, arg, gen))

    def run(self) -> RunResult:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        sc = self.scenario
        entries: list[tuple[float, int, int, int, Any, int]] = []
        for job in sc.jobs:
            if job.spec.id in self.jobs:
                raise CoreError(f"workload {job.spec.id}: id: duplicate in scenario {sc.name}")
            team = team_of(job.spec.budget, self.sim.legacy_team_depth)
            self.jobs[job.spec.id] = _Job(job, team, is_debug(job.spec, self.config))
            if job.spec.submit_time < self.end:
                self._seq += 1
                entries.append((job.spec.submit_time, SUBMIT, self._seq, SUBMIT, job.spec.id, 0))
        kinds = {HostEventKind.FAIL: FAIL, HostEventKind.UNHEALTHY: UNHEALTHY,
                 HostEventKind.REPAIRED: REPAIRED}
        for ev in sc.host_events:
            if ev.host not in self._host_gen:
                raise CoreError(f"host event at {ev.time}: host: unknown host {ev.host!r}")
            self._seq += 1
            entries.append((ev.time, kinds[ev.kind], self._seq, kinds[ev.kind], ev.host, -1))
        self._heap = entries
        heapq.heapify(self._heap)
        if self.end > HOUR:
            self.schedule(HOUR, HOUR_END, None)
        bar = self._progress_bar()
        heap = self._heap
        handlers = {
            FAIL: self._on_fail, UNHEALTHY: self._on_unhealthy, REPAIRED: self._on_repaired,
            HUMAN_KILL: self._on_human_kill, COMPLETE: self._on_complete,
            SUBMIT: self._on_submit, MIN_RUNTIME_END: self._on_min_runtime_end,
            HOUR_END: self._on_hour, ABANDON: self._on_abandon,
            TIME_LIMIT: self._on_time_limit, RECHECK: self._on_recheck,
        }
        while heap and heap[0][0] < self.end:
            now = heap[0][0]
            self.rec.advance(now)
            changed = False
            while heap and heap[0][0] == now:
                _, _, _, kind, arg, gen = heapq.heappop(heap)
                self.events += 1
                changed |= handlers[kind](arg, gen, now)
                if kind == HOUR_END and bar is not None:
                    bar.update(1)
            if changed:
                self.moments += 1
                self._decide_loop(now)
        self.rec.close_hour(self.end)
        if bar is not None:
            bar.close()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        summary = self._summary(wall, cpu)
        pools = getattr(self.policy, "pool_summary", None)
        if pools is not None:  # a fleet: figures per pool and for the whole fleet
            summary["pools"] = pools(self.end)
        return RunResult(
            self.name, summary, self._workload_rows(),
            self.rec.budget_rows, self.rec.cluster_rows, self.log,
        )

    def _progress_bar(self) -> Any:
        if not self.progress or not sys.stderr.isatty():
            return None
        from tqdm import tqdm

        return tqdm(total=int(self.end // HOUR), desc=f"{self.name}", unit="h", file=sys.stderr,
                    leave=False)

    # ---- the policy loop -------------------------------------------------------------
    def _decide_loop(self, now: float) -> None:
        for _ in range(self.sim.decide_rounds):
            self._release_held(now)
            self.calls += 1
            d = self.policy(self.state, now, self.config)
            recheck = d.recheck_at
            if recheck is not None and recheck < self.end:
                self.schedule(recheck, RECHECK, None)
            for wait in d.checkpoint_waits:  # before the return: a pass may decide only this
                self.state.await_checkpoints(wait.workload, wait.until, wait.victims)
            if d.empty():
                return
            if self.log is not None:
                self.log.extend(decision_log(now, d))
            self._apply(d, now)
            if d.settles():
                return
        self.capped += 1

    def _apply(self, d: Decisions, now: float) -> None:
        for c in d.host_changes:
            self._set_host(c.host, c.to, now)
        for w in d.timeouts:
            self._timeout(w, now)
        for p in d.preemptions:
            self._stop(p.workload, now, p.reason, on_stopped(p.requeue))
        for r in d.reservations:
            self.state.reserve(r.workload, r.hosts)
        for s in d.starts:
            self._start(s.workload, s.placement, now)

    # ---- the in-memory executor ------------------------------------------------------
    def _start(self, wid: str, placement: Any, now: float) -> None:
        j = self.jobs[wid]
        spec = j.spec
        self.state.start(wid, placement, now)
        wait = now - j.queued_at
        j.wait_s += wait
        if j.first_start is None:
            j.first_start = now
            j.first_wait = wait
        self.waits.append((wait, j.debug, j.team, j.budget, size_class(spec.gpus)))
        j.move(Status.RUNNING)
        j.run_start = now
        j.held = sum(s.gpus for s in placement)
        j.runs += 1
        j.run_no += 1
        self.rec.started(spec.budget, j.held, spec.allocated, j.job.squat, now)
        if self._observe is not None:
            self._observe("started", wid, self.state)
        done = now + j.overhead + j.remaining
        self.schedule(done, COMPLETE, wid, j.run_no)
        if spec.allocated and now + spec.min_runtime < done:
            self.schedule(now + spec.min_runtime, MIN_RUNTIME_END, wid, j.run_no)
        if spec.time_limit > 0 and now + spec.time_limit < done:
            self.schedule(now + spec.time_limit, TIME_LIMIT, wid, j.run_no)

    def _timeout(self, wid: str, now: float) -> None:
        """Stop a run at its time limit (at once: the simulator has no grace period); it
        ends as ``timeout``, never requeued, not counted as a preemption."""
        j = self.jobs[wid]
        spec = j.spec
        self.state.finish(wid, now)
        j.run_s += (now - j.run_start) * j.held
        j.move(Status.STOPPING)  # a stop, instant here
        j.move(on_stopped(False, timed_out=True))
        j.end = now
        j.run_no += 1  # its completion event is stale now
        self.rec.stopped(spec.budget, j.held, spec.gpus, spec.allocated, j.job.squat, now,
                         requeued=False, reason=None)
        if self._observe is not None:
            self._observe("ended", wid, self.state)

    def _stop(self, wid: str, now: float, reason: PreemptReason, outcome: Status) -> None:
        """Preempt or kill a running workload at once, with the checkpoint loss; it ends in
        ``outcome`` (``PENDING``: requeued)."""
        j = self.jobs[wid]
        r = self.state.running.get(wid)
        if r is None:
            raise CoreError(f"workload {wid}: preempted but not running (at {now})")
        spec = r.spec
        if (reason is not PreemptReason.HOST_FAILURE and spec.allocated
                and now < r.started_at + spec.min_runtime - _EPS):
            self.protected += 1
        self.preempt_counts[reason.value] += 1
        j.preemptions += 1
        if self._preempted is not None:
            self._preempted(wid)
        elapsed = now - j.run_start
        gpus = j.held
        j.run_s += elapsed * gpus
        requeue = outcome is Status.PENDING
        if reason is not PreemptReason.HOST_FAILURE:
            j.move(Status.STOPPING)  # a stop, instant here; a host's death ends it directly
        cost = preemption_cost(elapsed, j.overhead, j.remaining,
                               spec.checkpoint_interval or self._checkpoint_default,
                               resumes=requeue and spec.resumable,
                               on_term=spec.checkpoint_on_term
                               and reason is not PreemptReason.HOST_FAILURE)
        if not j.job.squat:
            j.lost_s += cost.lost * gpus
            self.lost_by_reason[reason.value] += cost.lost * gpus
        j.remaining -= cost.kept
        j.run_no += 1  # its completion and min-runtime events are stale now
        self.rec.stopped(spec.budget, gpus, spec.gpus, spec.allocated, j.job.squat, now,
                         requeued=requeue, reason=reason)
        if requeue:
            j.overhead = self.sim.restart_overhead
            self.restart_s += j.overhead * gpus
            self.state.requeue(wid, now)
            j.move(Status.PENDING)
            j.queued_at = now
        else:
            self.state.finish(wid, now)
            j.move(outcome)
            j.end = now
        if self._observe is not None:
            self._observe("ended", wid, self.state)
            if requeue:
                self._observe("queued", wid, self.state)

    def _set_host(self, name: str, to: HostState, now: float) -> None:
        old = self.state.hosts[name].state
        if old is to:
            return
        host = self.state.set_host_state(name, to, now)
        self._host_gen[name] += 1
        gen = self._host_gen[name]
        if self._observe is not None:
            self._observe("host", name, self.state)
        if (old is HostState.HEALTHY) != (to is HostState.HEALTHY):
            self.rec.change_healthy(host.gpus if to is HostState.HEALTHY else -host.gpus, now)
        drain = self._drains.pop(name, None) if old is HostState.DRAINING else None
        if drain is not None:
            if to is HostState.REPAIR:
                drain.end = now
            elif to is HostState.DOWN:
                drain.failed = True
        if to is HostState.DRAINING:
            self._drains[name] = d = _Drain(name, now)
            self.drains.append(d)
            self.schedule(now + self.sim.human_kill_after, HUMAN_KILL, name, gen)
        elif to in (HostState.REPAIR, HostState.DOWN):
            self.schedule(now + self.scenario.repair_time, REPAIRED, name, gen)

    # ---- event handlers: each returns whether the state changed ----------------------
    def _on_submit(self, wid: str, gen: int, now: float) -> bool:
        j = self.jobs[wid]
        cap = float(self.config.max_min_runtime)
        lowered = self.sim.clamp_min_runtime and j.spec.min_runtime > cap
        if lowered:
            j.spec = dataclasses.replace(j.spec, min_runtime=cap)
            j.debug = is_debug(j.spec, self.config)
        if lowered or wid in self._lowered_at_import:
            self.clamped += 1
        try:
            self.validate(j.spec, self.state, self.config)
        except CoreError as e:
            self.rejected += 1
            reason = str(e).removeprefix(f"workload {wid}: ")
            count, first = self.rejected_why.get(reason, (0, wid))
            self.rejected_why[reason] = (count + 1, first)
            j.label = REJECTED
            return False
        hold = j.job.hold
        if hold is not None and (hold.after or hold.throttle):
            self._holds[wid] = hold
            j.status, j.label = Status.PENDING, HELD  # pending to the store, out of the queue
            return True  # released (or ended) by the passes at this moment
        self._enqueue(wid, now)
        return True

    def _enqueue(self, wid: str, now: float) -> None:
        j = self.jobs[wid]
        spec = j.spec
        hold = j.job.hold
        if hold is not None and hold.array is not None:
            self._array_of[wid] = hold.array
        j.status, j.label = Status.PENDING, None
        self.state.submit(spec, now)
        self.rec.queued(spec.budget, spec.gpus, spec.allocated, now)
        if self._observe is not None:
            self._observe("queued", wid, self.state)
        patience = j.job.patience
        if patience is not None and now + patience < self.end:
            self.schedule(now + patience, ABANDON, wid)

    def _release_held(self, now: float) -> None:
        """Held work whose dependencies are met (and whose array has room) joins the queue;
        work whose dependency can no longer be met ends (``core.gating``, as the service)."""
        if not self._holds:
            return
        active: dict[str, int] = {}
        for wid, array in list(self._array_of.items()):
            if self.jobs[wid].status in _ACTIVE:
                active[array] = active.get(array, 0) + 1
            else:
                del self._array_of[wid]
        ready, ended = release(list(self._holds.values()), self._status_of, active)
        for wid, _ in ended:
            del self._holds[wid]
            j = self.jobs[wid]
            j.move(Status.CANCELLED)
            j.label = None
            j.end = now
        for wid in ready:
            del self._holds[wid]
            self._enqueue(wid, now)

    def _status_of(self, wid: str) -> Status | None:
        """A workload's status as the service's store would give it."""
        j = self.jobs.get(wid)
        if j is None or j.spec.submit_time > self.state.time or j.label == REJECTED:
            return None
        return j.status if j.status is not None else Status.PENDING

    def _on_abandon(self, wid: str, gen: int, now: float) -> bool:
        """Its owner's patience ran out: a workload that never started is withdrawn (one
        that ran and was requeued keeps waiting, its owner has seen it make progress).
        Withdrawing work that holds nothing frees nothing, so this is no moment to decide at,
        unless GPUs were being freed for it (a reservation: they go to someone else now)."""
        j = self.jobs[wid]
        if j.status is not Status.PENDING or j.label is not None or j.first_start is not None:
            return False
        spec = j.spec
        freed = wid in self.state.reservations
        self.state.unqueue(wid)
        j.move(Status.CANCELLED)  # by its owner
        j.label = ABANDONED
        j.end = now
        self.abandoned.append(j)
        self.rec.withdrawn(spec.budget, spec.gpus, spec.allocated, now)
        if self._observe is not None:
            self._observe("unqueued", wid, self.state)
        return freed

    def _on_complete(self, wid: str, gen: int, now: float) -> bool:
        j = self.jobs[wid]
        if gen != j.run_no or j.status is not Status.RUNNING:
            return False
        spec = j.spec
        self.state.finish(wid, now)
        j.run_s += (now - j.run_start) * j.held
        j.remaining = 0.0
        j.move(Status.COMPLETED)
        j.end = now
        j.run_no += 1
        self.rec.stopped(spec.budget, j.held, spec.gpus, spec.allocated, j.job.squat, now,
                         requeued=False, reason=None)
        if self._observe is not None:
            self._observe("ended", wid, self.state)
        return True

    def _on_min_runtime_end(self, wid: str, gen: int, now: float) -> bool:
        j = self.jobs[wid]
        return gen == j.run_no and j.status is Status.RUNNING

    def _on_time_limit(self, wid: str, gen: int, now: float) -> bool:
        j = self.jobs[wid]
        return gen == j.run_no and j.status is Status.RUNNING

    def _on_recheck(self, arg: Any, gen: int, now: float) -> bool:
        return True  # a moment for the policy, nothing changed by itself

    def _on_hour(self, arg: Any, gen: int, now: float) -> bool:
        self.rec.close_hour(now)
        if now + HOUR < self.end:
            self.schedule(now + HOUR, HOUR_END, None)
        return True

    def _kill_all(self, host: str, now: float, reason: PreemptReason) -> None:
        """Everything on ``host`` ends at once: its death, or a human emptying a drain
        (a drain preemption: resumable work is requeued, as the policy's own)."""
        for wid in sorted(self.state.on_host[host]):
            resumable = self.state.running[wid].spec.resumable
            dies = reason is PreemptReason.HOST_FAILURE
            outcome = on_host_death(resumable) if dies else on_stopped(resumable)
            self._stop(wid, now, reason, outcome)

    def _on_fail(self, host: str, gen: int, now: float) -> bool:
        if self.state.hosts[host].state is HostState.DOWN:
            self.ignored_host_events += 1
            return False
        self.host_failures += 1
        self._kill_all(host, now, PreemptReason.HOST_FAILURE)
        self._set_host(host, HostState.DOWN, now)
        return True

    def _on_unhealthy(self, host: str, gen: int, now: float) -> bool:
        if self.state.hosts[host].state is not HostState.HEALTHY:
            self.ignored_host_events += 1
            return False
        self._set_host(host, HostState.DRAINING, now)
        return True

    def _on_repaired(self, host: str, gen: int, now: float) -> bool:
        state = self.state.hosts[host].state
        if gen >= 0 and gen != self._host_gen[host]:
            return False  # the host changed state since this repair was scheduled
        if state is HostState.HEALTHY:
            if gen < 0:
                self.ignored_host_events += 1
            return False
        if state is HostState.DRAINING and gen >= 0:
            return False
        self._set_host(host, HostState.HEALTHY, now)
        return True

    def _on_human_kill(self, host: str, gen: int, now: float) -> bool:
        drain = self._drains.get(host)
        if gen != self._host_gen[host] or drain is None or not self.state.on_host[host]:
            return False
        drain.human = True
        self._kill_all(host, now, PreemptReason.DRAIN)
        return True

    # ---- results ---------------------------------------------------------------------
    def _summary(self, wall: float, cpu: float) -> dict[str, Any]:
        rec, sc = self.rec, self.scenario
        tot = rec.totals
        jobs = list(self.jobs.values())
        submitted = [j for j in jobs if j.job.spec.submit_time < self.end]
        all_waits = [w for w, _, _, _, _ in self.waits]
        debug_waits = [w for w, dbg, _, _, _ in self.waits if dbg]
        by_size: dict[str, list[float]] = {c: [] for c in SIZE_CLASSES}
        first_by_size: dict[str, list[float]] = {c: [] for c in SIZE_CLASSES}
        abandoned_by_size = dict.fromkeys(SIZE_CLASSES, 0)
        for w, _, _, _, cls in self.waits:
            by_size[cls].append(w)
        for j in submitted:
            if j.first_wait is not None:
                first_by_size[size_class(j.spec.gpus)].append(j.first_wait)
        for j in self.abandoned:
            abandoned_by_size[size_class(j.spec.gpus)] += 1
        per_budget: dict[str, list[float]] = {}
        for w, _, team, leaf, _ in self.waits:
            per_budget.setdefault(team, []).append(w)
            if leaf != team:
                per_budget.setdefault(leaf, []).append(w)
        finished = [d for d in self.drains if d.end is not None]
        times = [d.end - d.start for d in finished if d.end is not None]
        automated = [
            d for d in finished
            if not d.human and d.end is not None
            and d.end - d.start <= float(self.config.max_min_runtime) + _EPS
        ]
        high = [j for j in submitted if j.job.legacy_priority >= LegacyPriority.HIGH]
        running = Status.RUNNING
        run_total = sum((j.run_s for j in submitted), 0.0) + sum(
            ((self.end - j.run_start) * j.held for j in submitted if j.status is running), 0.0
        )
        run_high = sum((j.run_s for j in high), 0.0) + sum(
            ((self.end - j.run_start) * j.held for j in high if j.status is running), 0.0
        )
        preempts = dict(self.preempt_counts)
        preempts["total"] = sum(self.preempt_counts.values())
        times_p90 = p90(times)
        abandoned_per: dict[str, int] = {}
        for j in self.abandoned:
            abandoned_per[j.team] = abandoned_per.get(j.team, 0) + 1
            if j.budget != j.team:
                abandoned_per[j.budget] = abandoned_per.get(j.budget, 0) + 1
        return {
            "policy": self.name,
            "scenario": sc.name,
            "seed": self.seed,
            "sim_days": self.end / 86400.0,
            "hosts": len(sc.hosts),
            "gpus": self.total_gpus,
            "workloads": len(submitted),
            "rejected": self.rejected,
            "rejected_reasons": [
                {"reason": reason, "count": count, "first": first}
                for reason, (count, first) in self.rejected_why.items()
            ],
            "clamped_min_runtime": self.clamped,
            "completed": sum(1 for j in submitted if j.status is Status.COMPLETED),
            "unfinished": {
                "pending": sum(1 for j in submitted
                               if j.status is Status.PENDING and j.label is None),
                "running": sum(1 for j in submitted if j.status is Status.RUNNING),
            },
            "abandoned": {
                "count": len(self.abandoned),
                "gpu_hours_requested": sum(
                    j.spec.gpus * j.job.duration for j in self.abandoned) / HOUR,
                "debug": sum(1 for j in self.abandoned if j.debug),
                "by_size": abandoned_by_size,
                "per_budget": dict(sorted(abandoned_per.items())),
            },
            "outstanding_ratio": rec.outstanding_ratio(),
            "occupancy": ratio(tot.assigned, tot.healthy),
            "unallocated_fraction": ratio(tot.unallocated, tot.assigned),
            "availability": ratio(tot.healthy, self.total_gpus * self.end),
            "attainment": rec.attainment(self.sim.legacy_team_depth),
            "wait_s": {
                "all": percentiles(all_waits),
                "debug": percentiles(debug_waits),
                "by_size": {c: percentiles(ws) for c, ws in by_size.items()},
                "first_by_size": {c: percentiles(ws) for c, ws in first_by_size.items()},
                "per_budget": {b: percentiles(ws) for b, ws in sorted(per_budget.items())},
            },
            "preemptions": preempts,
            "preemptions_per_1000_gpu_hours": ratio(
                1000.0 * preempts["total"], tot.assigned / HOUR
            ),
            "protected_preemptions": self.protected,
            "lost_gpu_hours": sum((j.lost_s for j in jobs), 0.0) / HOUR,
            "lost_gpu_hours_by_reason": {
                k: v / HOUR for k, v in self.lost_by_reason.items()
            },
            "restart_overhead_gpu_hours": self.restart_s / HOUR,
            "squat_gpu_hours": tot.squat / HOUR,
            "gpu_hours": {
                "total": self.total_gpus * self.end / HOUR,
                "healthy": tot.healthy / HOUR,
                "assigned": tot.assigned / HOUR,
                "allocated": (tot.assigned - tot.unallocated) / HOUR,
                "unallocated": tot.unallocated / HOUR,
                "squat": tot.squat / HOUR,
            },
            "drains": {
                "count": len(self.drains),
                "finished": len(finished),
                "p90_time_to_drain_s": times_p90,
                "automated_fraction": ratio(len(automated), len(finished)),
                "human_kills": sum(1 for d in self.drains if d.human),
            },
            "host_failures": self.host_failures,
            "ignored_host_events": self.ignored_host_events,
            "priority_inflation": {
                "high_or_urgent_share": ratio(len(high), len(submitted)),
                "high_or_urgent_gpu_hour_share": ratio(run_high, run_total),
            },
            "decide": {"calls": self.calls, "moments": self.moments,
                       "rounds_capped": self.capped},
            "events": self.events,
            "wall_s": wall,
            "cpu_s": cpu,
            "core_build": core_build(),
            "events_per_s": self.events / wall if wall > 0 else None,
            # the process's peak so far; run_policies with out= makes it the whole call's,
            # outputs included (docs/simulator.md)
            "peak_memory_mb": peak_memory_mb(),
            "config": _plain(dataclasses.asdict(self.config)),
            "sim_config": dataclasses.asdict(self.sim),
        }

    def _workload_rows(self) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        for wid, j in self.jobs.items():
            spec, job = j.spec, j.job
            run_s = j.run_s
            if j.status is Status.RUNNING:
                run_s += (self.end - j.run_start) * j.held
            if spec.submit_time >= self.end:
                continue
            rows.append({
                "id": wid, "budget": spec.budget, "team": j.team, "user": spec.user,
                "gpus": spec.gpus, "min_runtime": spec.min_runtime,
                "allocated": int(spec.allocated), "debug": int(j.debug),
                "resumable": int(spec.resumable), "priority": spec.priority,
                "legacy_priority": job.legacy_priority.name.lower(),
                "legacy_preemptible": int(job.legacy_preemptible), "squat": int(job.squat),
                "submit_time": spec.submit_time, "duration": job.duration,
                "first_start": j.first_start, "end_time": j.end, "status": j.shown(),
                "runs": j.runs, "preemptions": j.preemptions, "wait_s": j.wait_s,
                "first_wait_s": j.first_wait, "run_gpu_hours": run_s / HOUR,
                "lost_gpu_hours": j.lost_s / HOUR,
            })
        return rows


WORKLOAD_COLUMNS = (
    "id", "budget", "team", "user", "gpus", "min_runtime", "allocated", "debug", "resumable",
    "priority", "legacy_priority", "legacy_preemptible", "squat", "submit_time", "duration",
    "first_start", "end_time", "status", "runs", "preemptions", "wait_s", "first_wait_s",
    "run_gpu_hours", "lost_gpu_hours",
)


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.value if hasattr(v, "value") else v) for k, v in d.items()}
