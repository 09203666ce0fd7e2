"""The live scheduler: reconcile -> decide -> apply, around the same policy as the simulator.

One :class:`Scheduler` owns the service's :class:`~apportion.core.fleet.FleetState` (it is
its only writer: one pool per cluster and GPU kind of the hosts, one pool by default) and
drives it from three inputs: the store (submissions, cancellations, budget
changes), the executor (exits, host deaths) and the clock. Each pass (:meth:`Scheduler.step`)

1. loads what changed in the store (new pending work, cancellations, the budget tree);
2. folds the executor's observations into the store and the state (exits, dead hosts);
3. calls ``decide_fleet`` (with one pool: ``decide`` itself) and applies its decisions,
   again at the same instant while a pass preempts or moves hosts (a preemptor starts once
   its victims have exited), until one settles it (``Decisions.settles``): the simulator's rule too.

Rules that make a crash at any point safe (see docs/operations.md):

* the store is written first, then the executor is told: ``begin_attempt`` before
  ``launch``, ``mark_stopping`` before ``stop``;
* ``Store.end_attempt`` is the only place GPU-seconds are charged and it is idempotent, so
  an exit observed twice (before and after a restart) is charged once;
* on start the state is rebuilt from the store alone, then reconciled with the executor.

Errors from the store or the executor never kill the loop: the pass is abandoned, logged,
and the next pass rebuilds the state from the store and retries.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from apportion.core import (
    FINAL,
    CoreError,
    Decisions,
    Host,
    HostState,
    PolicyConfig,
    Start,
    Status,
    ancestors,
    decision_log,
    dependency_state,
    format_duration,
    release,
    usage_ratio,
)
from apportion.core.consequences import on_host_death, on_stopped
from apportion.core.fleet import FleetState, decide_fleet
from apportion.core.preemption import rebalance_protected_until
from apportion.core.types import WorkloadSpec
from apportion.service import warn_signal
from apportion.service.clock import Clock
from apportion.service.config import PoolsConfig
from apportion.service.executor import (
    AttemptState,
    Executor,
    ExecutorUnavailable,
    HostSlots,
    InventoryHost,
    Launch,
    LaunchDeferred,
    LaunchRefused,
    Observation,
)
from apportion.service.pools import fleet_of
from apportion.service.pools import validate as _validate
from apportion.service.port import PassListener, Published
from apportion.service.replies import (
    QueueBudget,
    QueuedPending,
    QueuedRunning,
    QueueHost,
    QueueView,
)
from apportion.service.store import (
    Conflict,
    LockLost,
    NotFound,
    Store,
    UsageInterval,
    WorkloadRow,
)
from apportion.service.store.seed import SEED_ACTOR
from apportion.service.warn_signal import WarnSignal

log = logging.getLogger("apportion.scheduler")

ACTOR = "scheduler"
BULK_LOAD = 200  # more new submissions than this in one pass: load them in one query
# a hold's dependencies listed in full up to this many; more: the first three, and a count
_WAITS_LISTED = 5
MAX_ROUNDS = 50  # decide/apply rounds at one instant (the simulator's default cap too)
DAY = 86400.0
EXECUTOR_DOWN = "executor: "  # reason prefix of hosts the executor reported down
RESIZING = EXECUTOR_DOWN + "resizing: "  # a host drained until it can take its new size
# reason of hosts drained because the executor no longer reports them; stored with the host
# (a repair keeps it as its prefix), so a restart knows that its coming back ends the drain
GONE = EXECUTOR_DOWN + "not among the executor's hosts any more"
TIMEOUT = "timeout"  # stop reason prefix of work stopped at its time limit
BACKOFF_FIRST_S = 1.0  # a launch that raised an unexpected error waits this long first,
BACKOFF_MAX_S = 60.0  # doubling on each failure in a row, up to this
CLOCK_BEHIND_S = 5.0  # a wall clock further behind the times recorded was set back: said
READ_WAIT_S = 10.0  # a reader waits at most this long for the pass that takes in its writes


@dataclass(slots=True)
class _Attempt:
    """The open attempt of a running workload, as the scheduler tracks it."""

    n: int
    slots: tuple[HostSlots, ...]
    started_at: float
    handle: str | None = None
    stop_reason: str | None = None  # set once a stop was decided: "preempted: ...", "cancelled"
    requeue: bool = False  # when it has stopped: back to the queue (else a final status)
    stop_sent: bool = False  # the executor accepted the stop
    stop_issued_at: float | None = None  # when the stop was decided: SIGKILL at this + grace
    signal_sent_at: float | None = None  # when its workload's --signal was sent to it


@dataclass(slots=True)
class _Backoff:
    """A workload set aside after a failed launch: out of the policy's state until
    ``until`` (then queued again), ``delay`` the last wait (doubled on the next failure);
    ``error``, ``spec`` and ``queued_at`` for the views, which list it meanwhile."""

    until: float
    delay: float
    error: str
    spec: WorkloadSpec
    queued_at: float


class Scheduler:
    """The scheduling loop of one service. Thread-safe: API handlers may call
    :meth:`wake`, :meth:`set_host_state`, :meth:`validate` and the read views while a
    background thread runs :meth:`run_forever`. What the API, dashboard and metrics may use
    of it is :class:`~apportion.service.port.SchedulerPort`."""

    def __init__(
        self,
        store: Store,
        executor: Executor,
        config: PolicyConfig,
        clock: Clock,
        grace_s: float = 10.0,
        pools: PoolsConfig | None = None,
    ) -> None:
        self.store = store
        self.pools = pools or PoolsConfig()
        self.executor = executor
        self.config = config
        self.clock = clock
        self.grace_s = grace_s
        self.lock = threading.RLock()
        self._wake = threading.Event()
        self.state: FleetState | None = None
        self._open: dict[str, _Attempt] = {}
        self._commands: dict[str, tuple[str, ...]] = {}
        self._names: dict[str, str] = {}  # id -> its name (--job-name), for the queue view
        # submitted work kept out of the queue (dependencies, array throttle; core.gating)
        self._held: dict[str, WorkloadRow] = {}
        self._hold_reason: dict[str, str] = {}  # held id -> what it waits for, for views
        self._array_of: dict[str, str] = {}  # released array element -> its array id
        self._env: dict[str, dict[str, str]] = {}  # id -> variables the scheduler sets
        self._warn: dict[str, WarnSignal] = {}  # id -> its --signal, if it has one
        # when the next --signal is due (None: none is): the loop passes then (run_forever)
        self.signal_due_at: float | None = None
        self._array_span: dict[str, tuple[int, int, int]] = {}  # array id -> count, min, max
        self._free: dict[str, list[int]] = {}  # host -> free GPU indexes, ascending
        self._host_reason: dict[str, str] = {}
        self._unsaved: dict[tuple[str, int], str] = {}  # launched, handle not yet in the store
        self._unmirrored: dict[str, tuple[bool, str]] = {}  # host -> drain not yet in executor
        self._seen_drained: set[str] = set()  # hosts the executor last reported draining
        self._reported: set[str] | None = None  # hosts the executor last reported (None: yet)
        # workload -> when it is tried again, and why: set aside after a failed launch
        self._backoff: dict[str, _Backoff] = {}
        self._last = Decisions()
        # when the last pass asked for the next (a rebalance waiting for its victims'
        # checkpoints, Decisions.recheck_at); run_forever passes every interval_s anyway
        self.recheck_at: float | None = None
        self._last_pass_at: float | None = None
        self._started = False
        self.recent: deque[str] = deque(maxlen=2000)  # recent decision log lines
        self.passes = 0
        self.errors = 0  # failed passes, ever
        self.failing = 0  # failed passes in a row
        self._failing_since = 0.0  # when the first of them failed (the clock's time)
        self.listeners: list[PassListener] = []
        # what readers use without the lock (docs/operations.md, "Reads during a pass"):
        # the latest Published, made by _publish; the generation of wake calls (writes)
        # and, per caller, that of its latest write; publishers: name -> what it makes of
        # the state and the view at each publication (the dashboard's and the metrics')
        self.publishers: dict[str, Callable[[FleetState, QueueView], object]] = {}
        self._reads = threading.Condition()  # guards the four below; not the state's lock
        self._published: Published | None = None
        self._asked = 0
        self._wrote: dict[str, int] = {}
        self._looping = False  # run_forever runs: a pass follows every wake
        self._said_empty = False  # logged once that there are no budgets yet
        # the executor's silence, for the readers: since when (None: it answered last
        # pass), why, and the passes that decided nothing because of it
        self.executor_down_since: float | None = None
        self.executor_problem: str | None = None
        self.passes_skipped = 0
        # launches the server's own trouble deferred (LaunchDeferred), ever (/metrics), and
        # the one under way: (its message, since when, how many more after the first)
        self.launches_deferred = 0
        self._deferred: tuple[str, float, int] | None = None
        # the latest time recorded (the store's at start, then each pass's), and how far
        # the wall clock is behind it (0: it is not, or by less than CLOCK_BEHIND_S): a
        # clock set back, which holds the scheduler's time still
        self._recorded: float | None = None
        self.clock_behind_s = 0.0

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Rebuild the state from the store and reconcile it with the executor: attempts
        that ended while the server was down are ended with their observed exit, vanished
        ones as lost, and ones that never got a handle (a crash between ``begin_attempt``
        and the launch) are found by the executor or ended with nothing charged; work the
        executor runs for no open attempt (a restored backup's lost future) is stopped."""
        with self.lock:
            self._started = False
            covers = self._asked_now()  # before the state is read from the store
            if not self.store.budgets():  # nothing can be submitted yet: wait, quietly
                if not self._said_empty:
                    self._said_empty = True
                    log.info("no budgets yet: scheduling starts once one exists; create one "
                             "with `apportion budgets create PATH --weight 1 --member USER` "
                             "as an admin (or list [[budgets]] in the config before the "
                             "first start)")
                return
            now = self.clock.now()
            self._settle_unlaunched(now)
            self._rebuild(now)
            self._record_billing()
            # work no open attempt names (a restored backup's lost future) holds GPUs the
            # state just rebuilt counts as free: stopped before anything is placed on them
            self.executor.stop_unknown(
                {a.handle for a in self._open.values() if a.handle is not None}, self.grace_s)
            self._started = True
            self._recorded = max(self.store.latest_time() or now, self._st().time,
                                 self._recorded or now)
            self._check_clock(now)
            self._fold(now)
            self._publish(covers)

    def step(self, now: float | None = None) -> list[str]:
        """One pass at ``now`` (default: the clock). Returns the decision log lines."""
        with self.lock:
            lines: list[str] = []
            wall = time.perf_counter()
            covers = self._asked_now()  # the writes this pass's store sync will see
            try:
                if not self._started:
                    self.start()
                    if not self._started:  # no budgets yet
                        return lines
                st = self._st()
                clock_now = self.clock.now()
                # the scheduler's time never goes back, from its state nor from its last
                # pass (a wall clock set back holds it still until it catches up)
                last = st.time if self._last_pass_at is None else self._last_pass_at
                t = max(clock_now if now is None else now, st.time, last)
                self._recorded = max(self._recorded or t, t)
                self._check_clock(clock_now)
                self._sync_store(t)
                self.signal_due_at = None  # worked out again below, once the executor answers
                reachable = self._sync_inventory(t)
                if reachable:  # else: decide nothing until the executor answers again
                    self._retry(t)
                    self._fold(t, strays=True)
                    self._send_signals(t)
                self.recheck_at = None
                for _ in range(MAX_ROUNDS if reachable else 0):
                    self._release_held(t)
                    d = self._decide(st, t)
                    self._last = d
                    if d.recheck_at is not None:  # a rebalance waits for a checkpoint
                        self.recheck_at = min(self.recheck_at or d.recheck_at, d.recheck_at)
                    # kept in memory only, as reservations: after a restart the first pass
                    # past a wait may wait once more for the same checkpoints
                    for wait in d.checkpoint_waits:
                        st.await_checkpoints(wait.workload, wait.until, wait.victims)
                    if d.empty():
                        break
                    self._notify("decided", t, d, st)
                    new = decision_log(t, d)
                    lines += new
                    self.recent.extend(new)
                    launched = self._apply(d, t)
                    self._fold(t)  # exits that happened at once (memory executor, grace 0)
                    if not launched:
                        break  # the executor refused a launch: try again next pass
                    if d.settles():
                        break
                else:
                    if reachable:
                        log.warning("pass at %.3f: still deciding after %d rounds", t, MAX_ROUNDS)
            except Exception:
                self._count_failure()
                raise
            if self.failing:  # an operator who read the failures learns they are over
                log.info("scheduling passes succeed again, after %d failed in a row over %s",
                         self.failing, format_duration(max(0.0, t - self._failing_since)))
            self.failing = 0
            self.passes += 1
            self._last_pass_at = t
            seconds = time.perf_counter() - wall
            self._notify("passed", t, seconds, st)
            self._publish(covers)
            return lines

    def _count_failure(self) -> None:
        """A pass failed: counted (``/metrics``, the dashboard), and the state is rebuilt
        from the store before the next one."""
        self.errors += 1
        if not self.failing:
            self._failing_since = self.clock.now()
        self.failing += 1
        self._started = False
        with self._reads:  # readers waiting for a pass take the last good publication
            self._reads.notify_all()

    def _check_clock(self, wall: float) -> None:
        """Say once (a warning) when the wall clock ``wall`` is more than ``CLOCK_BEHIND_S``
        behind the latest time recorded: it was set back, and the scheduler's time, which
        never goes back, stands still until the clock catches up with it. Kept in
        :attr:`clock_behind_s` (``/v1/health``, ``/metrics``)."""
        behind = (wall if self._recorded is None else self._recorded) - wall
        if behind > CLOCK_BEHIND_S:
            if not self.clock_behind_s:
                log.warning(
                    "the wall clock is %s behind the latest time this server recorded (it "
                    "was set back): the scheduler's time does not go back, it stands still "
                    "until the clock catches up (running work is not charged, protections "
                    "and time limits do not run down); keep the clock from stepping "
                    "(docs/operations.md, \"The clock\")",
                    format_duration(behind))
            self.clock_behind_s = behind
        elif self.clock_behind_s:
            log.info("the wall clock is back at the latest time recorded: the scheduler's "
                     "time moves again")
            self.clock_behind_s = 0.0

    def _decide(self, st: FleetState, t: float) -> Decisions:
        """``decide_fleet``, and if the policy raises: find the pending workloads it fails on
        (bisecting the queue; ``decide`` leaves the state unchanged), set them aside with
        the error as their end reason, log it, and decide for everyone else. If the
        policy fails with no pending work at all, the pass fails as before."""
        try:
            return decide_fleet(st, t, self.config)
        except Exception as first:
            bad = self._culprits(st, t, sorted(st.pending))
            if not bad:
                raise
            for wid in bad:
                log.error("%s: set aside: the policy fails on it: %r", wid, first)
                st.unqueue(wid)
                self._commands.pop(wid, None)
                self._names.pop(wid, None)
                self.store.set_aside(wid, f"set aside: the policy fails on it ({first!r})",
                                     ACTOR)
            return decide_fleet(st, t, self.config)

    def _culprits(self, st: FleetState, t: float, ids: list[str]) -> list[str]:
        """The pending workloads without which ``decide`` succeeds, found one at a time by
        binary search over ``ids`` (about log2(n) calls each). Every workload taken out is
        put back, with its reservation. Empty if taking them all out does not help."""
        def fails_without(out: list[str]) -> bool:
            kept = {w: st.reservations.get(w) for w in out}
            taken = [st.unqueue(w) for w in out]
            try:
                decide_fleet(st, t, self.config, reasons=False)
                return False
            except Exception:
                return True
            finally:
                for p in taken:
                    st.submit(p.spec, t, queued_at=p.queued_at)
                    hosts = kept[p.spec.id]
                    if hosts is not None:
                        st.reserve(p.spec.id, hosts)

        if not ids or fails_without(ids):
            return []
        bad: list[str] = []
        while fails_without(bad):
            rest = [w for w in ids if w not in bad]
            lo, hi = 1, len(rest)  # without bad + rest[:hi] it succeeds
            while lo < hi:
                mid = (lo + hi) // 2
                if fails_without(bad + rest[:mid]):
                    lo = mid + 1
                else:
                    hi = mid
            bad.append(rest[lo - 1])
        return sorted(bad)

    def _notify(self, event: str, *args: Any) -> None:
        for fn in self.listeners:
            try:
                getattr(fn, event)(*args)
            except Exception:  # an observer's bug must never stop scheduling
                log.exception("pass listener failed")

    def wake(self, by: str | None = None) -> None:
        """Ask the background loop for a pass now (after a submission, a cancel, ...).
        ``by``: who wrote (the caller's name): its reads wait for the pass that takes the
        write in (:meth:`published`)."""
        with self._reads:
            self._asked += 1
            if by is not None:
                self._wrote[by] = self._asked
        self._wake.set()

    def _asked_now(self) -> int:
        with self._reads:
            return self._asked

    def add_publisher(self, name: str, make: Callable[[FleetState, QueueView], object]
                      ) -> None:
        """Have ``make(state, view)`` called under the lock at each publication, its result
        in :attr:`Published.extras` under ``name``; published again at once if the state
        exists."""
        with self.lock:
            self.publishers[name] = make
            if self._published is not None:
                self._publish(self._published.covers)

    def _publish(self, covers: int) -> None:
        """Make what readers use without the lock (called under it, the state settled)."""
        st = self.state
        if st is None:
            return
        try:
            view = self._view()
        except Exception:  # a reader's bug must never stop scheduling: the last one stays
            log.exception("queue view failed: readers see the previous pass's")
            return
        extras: dict[str, object] = {}
        for name, make in self.publishers.items():
            try:
                extras[name] = make(st, view)
            except Exception:  # a reader's bug must never stop scheduling
                log.exception("publisher %s failed", name)
        p = Published(covers, view, extras, tuple(self.recent)[-20:])
        with self._reads:
            self._published = p
            self._reads.notify_all()

    def published(self, reader: str | None = None, wait_s: float = READ_WAIT_S
                  ) -> Published | None:
        """The latest publication, without the scheduler's lock (None before the first
        start). If ``reader`` wrote something (``wake(by=reader)``) that it does not cover
        yet, wait (up to ``wait_s``) for the pass that takes it in: a researcher who
        submitted sees the work in their next read. No wait when no loop runs passes (the
        scheduler driven by :meth:`step`) or while passes fail (the last good one then)."""
        deadline = time.monotonic() + wait_s
        with self._reads:
            need = self._wrote.get(reader, 0) if reader is not None else 0
            while (self._published is None or self._published.covers < need) \
                    and self._looping and not self.failing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._reads.wait(left)
            return self._published

    def run_forever(self, interval_s: float, stop_event: threading.Event,
                    guard: Callable[[], None] | None = None) -> None:
        """Pass on every :meth:`wake` and at least every ``interval_s`` until
        ``stop_event`` is set (set it, then :meth:`wake`, to stop promptly). ``guard`` runs
        before each pass (the server lock's check: no pass without the lock). A failed pass
        is logged and retried, and so is a failed ``guard`` (the database is down: counted
        as a failed pass, in ``errors``); neither ends the loop, but :class:`LockLost` does
        (raised: another server schedules with the database now)."""
        with self._reads:
            self._looping = True
        try:
            self._loop(interval_s, stop_event, guard)
        finally:
            with self._reads:
                self._looping = False
                self._reads.notify_all()

    def _loop(self, interval_s: float, stop_event: threading.Event,
              guard: Callable[[], None] | None) -> None:
        while not stop_event.is_set():
            self._wake.clear()
            try:
                if guard is not None:
                    try:
                        guard()
                    except LockLost:
                        raise
                    except Exception:
                        with self.lock:
                            self._count_failure()
                        raise
                self.step()
            except LockLost:
                raise
            except Exception as e:
                if self.failing <= 1:
                    log.exception("scheduling pass failed; retrying on every pass")
                else:
                    log.warning("scheduling pass failed again (%d in a row): %s", self.failing, e)
            if stop_event.is_set():
                break
            wait = interval_s
            due = self.signal_due_at
            if due is not None:  # a --signal is due before the next timer pass: pass then
                wait = min(wait, max(0.0, due - self.clock.now()))
            self._wake.wait(wait)

    # ---- commands from the API -------------------------------------------------------
    def set_host_state(self, name: str, state: HostState, reason: str, actor: str) -> None:
        """Drain, repair, undrain or mark down a host (audited in the store). A host marked
        down ends its workloads at once; a drain is mirrored to the executor. A host the
        executor did not report last pass cannot be made healthy (CoreError): the next
        pass would drain it again, and work placed there could not launch."""
        with self.lock:
            if not self._started:
                self.start()
            st = self._st()
            now = max(self.clock.now(), st.time)
            if name not in st.hosts:
                raise NotFound(f"host {name}: not found")
            if (state is HostState.HEALTHY and self._reported is not None
                    and name not in self._reported):
                raise CoreError(f"host {name}: not among the executor's hosts (removed from "
                                "the config, or from Slurm's partition?): it cannot be "
                                "repaired until the executor reports it again")
            if state is HostState.DOWN:
                self._end_host_work(name, now)
            self.store.set_host_state(name, state, reason, actor, at=now)
            st.set_host_state(name, state, now)
            self._host_reason[name] = reason
            self._mirror_drain(name, state, reason)
            self._publish(self._published.covers if self._published else 0)
        self.wake()

    def validate(self, spec: WorkloadSpec) -> None:
        """Raise :class:`CoreError` naming the field if the policy could never run ``spec``."""
        with self.lock:
            if not self._started:
                self.start()
            _validate(self._st(), spec, self.config)

    # ---- read views ------------------------------------------------------------------
    def _pool_orders(self, st: FleetState) -> list[tuple[str, list[str | None]]]:
        """Each pool (in name order) with its pending work in the order the queue lists it
        and numbers it: the last pass's order of that pool, the work it did not consider
        (submitted since) after the pass's of its kind (allocated work first, as in a pass).
        Work that waits in several pools is listed under the first (the one ``why``
        explains) and is None in the others' lists: it holds a place there too."""
        orders = self._last.pool_orders or {p: self._last.order for p in st.pools}
        out = []
        for pool, state in st.pools.items():
            waiting = state.pending
            order = [w for w in dict.fromkeys(orders.get(pool, ())) if w in waiting]
            listed = set(order)
            order += sorted((w for w in waiting if w not in listed), key=lambda w: (
                -waiting[w].spec.priority, waiting[w].spec.submit_time, w))
            order.sort(key=lambda w: not waiting[w].spec.allocated)
            out.append((pool, [w if st.waits_in(w)[0] == pool else None for w in order]))
        return out

    def queue_view(self, reader: str | None = None) -> QueueView:
        """The queue view of the latest publication (:meth:`published`: without waiting
        for a pass in progress, but for the one that takes in ``reader``'s own writes).
        When no pass holds the lock, its ``now`` and budgets are counted again at the
        clock (as :meth:`_view` counts them; a few milliseconds); during a pass it is as
        published. Made now under the lock before the first publication."""
        if self.published(reader) is None:
            return self._view()
        if not self.lock.acquire(blocking=False):
            p = self.published()  # a pass in progress: as the last one published it
            assert p is not None
            return p.view
        try:
            p, st = self.published(), self.state
            assert p is not None
            view = p.view
            if st is None:
                return view
            now = max(self.clock.now(), st.time, self._last_pass_at or st.time)
            if view.now == now:
                return view
            budgets, capacity = self._budgets(st, now)
            return view.model_copy(update={"now": now, "budgets": budgets,
                                           "capacity_gpu_s": capacity})
        finally:
            self.lock.release()

    def _view(self) -> QueueView:
        """The queue as the policy sees it, for the API and the dashboard, as of the
        scheduler's clock (``now``; ``last_pass_at``: when the order and the wait reasons
        were decided):

        * ``pending``: in the order of the last pass, each with its ``wait_reason``
          (``no_capacity``, ``waiting_for_preemption``, ``waiting_for_checkpoint``,
          ``too_large``, or None if the pass
          did not reach it); then the work held out of the queue (``wait_reason`` ``held``,
          no ``position``, ``hold`` says what it waits for: a dependency, its array's
          throttle); then the work set aside after a failed launch (``wait_reason``
          ``launch_failing``, no ``position``, ``hold`` ``launch failing: <error>``,
          ``retry_at`` when it is tried again);
        * ``running``: with placement, ``protected_until`` (no rebalance victim before:
          its minimum runtime and, for a resumed run, its restart protection) and
          ``stopping``;
        * ``hosts``: state, GPUs used and free; ``budgets``: share and usage ratio.
        """
        with self.lock:
            st = self.state
            if st is None:
                return QueueView(now=None, last_pass_at=None, pending=[], running=[], hosts=[],
                                 budgets=[])
            # the clock, as why, the dashboard and /metrics count: the state's own time
            # moves only when the cluster changes, and elapsed times, protection left and
            # charged GPU-seconds would stand still between changes; never before the last
            # pass (a clock set back holds the scheduler still)
            now = max(self.clock.now(), st.time, self._last_pass_at or st.time)
            several = len(st.pools) > 1  # pools are shown only when there are several
            names = self._names
            pending = []
            queued = st.pending  # with several pools, made at each reading
            for pool, order in self._pool_orders(st):
                for i, wid in enumerate(order):
                    if wid is None:  # listed under another pool it waits in
                        continue
                    p = queued[wid]
                    reason = self._last.waiting.get(wid)
                    pending.append(QueuedPending(
                        **_spec_fields(p.spec), name=names.get(wid), position=i + 1,
                        queued_at=p.queued_at,
                        wait_reason=reason.value if reason else None,
                        pool=pool if several else None,
                    ))
            for wid, row in self._held.items():  # after all queued work, in id order
                pending.append(QueuedPending(
                    **_spec_fields(row.spec()), name=row.name, position=None,
                    queued_at=row.queued_at,
                    wait_reason="held", hold=self._hold_reason.get(wid, "held"),
                ))
            for wid, b in sorted(self._backoff.items()):  # set aside after a failed launch
                if wid in queued or wid in st.running:  # tried again already
                    continue
                pending.append(QueuedPending(
                    **_spec_fields(b.spec), name=names.get(wid), position=None,
                    queued_at=b.queued_at,
                    wait_reason="launch_failing", hold=f"launch failing: {b.error}",
                    retry_at=b.until,
                ))
            running = []
            for wid, r in sorted(st.running.items(), key=lambda kv: (kv[1].started_at, kv[0])):
                a = self._open.get(wid)
                running.append(QueuedRunning(
                    **_spec_fields(r.spec), name=names.get(wid),
                    attempt=a.n if a else None,
                    placement=[(s.host, len(s.gpu_indexes), list(s.gpu_indexes))
                               for s in (a.slots if a else ())],
                    started_at=r.started_at,
                    # as a rebalance victim, restart protection included: what why says
                    protected_until=rebalance_protected_until(r, self.config),
                    stopping=r.stopping,
                    stop_reason=a.stop_reason if a else None,
                    pool=st.runs_in(wid) if several else None,
                ))
            used = st.used
            hosts = []
            for h in sorted(st.hosts.values(), key=lambda h: h.name):
                qh = QueueHost(name=h.name, gpus=h.gpus, state=h.state.value,
                               reason=self._host_reason.get(h.name, ""), used=used[h.name],
                               free=h.gpus - used[h.name])
                if several:
                    qh.pool = st.pool_of(h.name)
                    qh.cluster, qh.kind = st.where(qh.pool)
                hosts.append(qh)
            budgets, capacity = self._budgets(st, now)
            return QueueView(now=now, last_pass_at=self._last_pass_at, pending=pending,
                             running=running, hosts=hosts, budgets=budgets,
                             capacity_gpu_s=capacity,
                             executor_down_since=self.executor_down_since,
                             executor_problem=self.executor_problem)

    def _budgets(self, st: FleetState, now: float) -> tuple[list[QueueBudget], float]:
        """The queue view's budgets, counted at ``now``, and the window's capacity (under
        the lock)."""
        lookback = self.config.lookback
        capacity = st.ledger.capacity(now, lookback)
        # GPUs held per node and allocated or not: in GPUs, whatever the billing weights
        # (the ledger's rates are in billed units)
        held: dict[tuple[str, bool], int] = {}
        for r in st.running.values():
            for node in ancestors(r.spec.budget):
                key = (node, r.spec.allocated)
                held[key] = held.get(key, 0) + r.gpus_held
        budgets = []
        for node in st.tree.nodes():
            charged = st.ledger.charged(node, now, lookback)
            share = st.tree.share(node)
            budgets.append(QueueBudget(
                path=node, share=share, charged_gpu_s=charged,
                usage_ratio=usage_ratio(charged, share, capacity) if capacity > 0 else None,
                gpus_charged_now=float(held.get((node, True), 0)),
                gpus_free_now=float(held.get((node, False), 0)),
                units_charged_now=st.ledger.rate(node),
            ))
        return budgets, capacity

    def hold_reason(self, workload_id: str) -> str | None:
        """What keeps a held workload out of the queue (None: it is not held)."""
        with self.lock:
            if workload_id not in self._held:
                return None
            return self._hold_reason.get(workload_id, "held")

    def launch_failing(self, workload_id: str) -> tuple[str, float] | None:
        """Why the last launch of a workload set aside after it failed failed, and when it
        is tried again (None: it is not set aside)."""
        with self.lock:
            b = self._backoff.get(workload_id)
            st = self.state
            if b is None or st is None or workload_id in st.pending \
                    or workload_id in st.running:
                return None
            return b.error, b.until

    def grace_ends(self) -> dict[str, float]:
        """Stopping work -> when it is killed if it has not exited (SIGKILL at its stop's
        time plus the grace period, as :meth:`_send_stop` sends it)."""
        with self.lock:
            return {w: a.stop_issued_at + self.grace_s for w, a in self._open.items()
                    if a.stop_issued_at is not None}

    def why(self, workload_id: str) -> dict[str, Any] | None:
        """Why a workload waits, or until when it is protected; None if not active."""
        view = self.queue_view()
        for p in view.pending:
            if p.id == workload_id:
                return {"status": "pending", **p.model_dump()}
        for r in view.running:
            if r.id == workload_id:
                return {"status": "stopping" if r.stopping else "running", **r.model_dump()}
        return None

    # ---- rebuild and reconcile -------------------------------------------------------
    def _st(self) -> FleetState:
        assert self.state is not None, "scheduler: not started"
        return self.state

    def _settle_unlaunched(self, now: float) -> None:
        """Attempts begun but never given a handle: adopt the executor's if it launched
        them, else end them at their start (nothing charged) and requeue."""
        for row in self.store.active_workloads():
            a = row.attempt
            if a is None or a.handle is not None:
                continue
            handle = self._unsaved.pop((row.id, a.n), None)
            if handle is None:
                handle = self.executor.find(row.id, a.n)
            if handle is not None:
                self.store.set_attempt_handle(row.id, a.n, handle)
                continue
            log.warning("%s attempt %d: never launched; requeued, nothing charged", row.id, a.n)
            self.store.end_attempt(row.id, a.n, a.started_at, None, "never launched",
                                   Status.PENDING)

    def _record_billing(self) -> None:
        """Audit (``pool.billing``, by ``config``) the billing weight of each GPU kind of
        the fleet the first time it is seen and whenever the config changed it since, and
        warn of a change: the ledger was just rebuilt from the attempts at the weights in
        force now, so a change reprices all work in the lookback window, and reports of
        past periods charge at the new weight too."""
        st = self._st()
        recorded = {a.target: a.new["billing"] for a in self.store.audit_of("pool.billing")}
        for kind in sorted({st.where(p)[1] for p in st.pools}):
            weight, old = st.config.weight(kind), recorded.get(kind)
            if weight == old:
                continue
            self.store.append_audit(SEED_ACTOR, "pool.billing", kind,
                                    None if old is None else {"billing": old},
                                    {"billing": weight})
            if old is not None:
                log.warning("billing of %s changed from %g to %g units per GPU-second: the "
                            "charges of all its work in the lookback window, and of reports "
                            "of past periods, are now counted at %g", kind, old, weight,
                            weight)

    def _rebuild(self, now: float) -> None:
        """The state from the store: hosts, tree, usage over the lookback, running attempts
        (with their real start times and GPU indexes) and the queue."""
        tree = self.store.load_tree()
        hosts = self.store.hosts()
        rows = self.store.active_workloads()
        lookback = self.config.lookback
        history = self.store.host_history()
        registered: dict[str, float] = {}
        for at, name, _ in history:
            registered.setdefault(name, at)
        # the cluster's history starts no earlier than its hosts were registered (not when
        # they last changed state: that would forget the usage before it)
        t0 = now - lookback
        if hosts:
            t0 = max(t0, min(registered.get(h.name, h.changed_at) for h in hosts))
        running = [r for r in rows if r.attempt is not None]
        t0 = min([t0, now, *(r.attempt.started_at for r in running if r.attempt)])
        # hosts join healthy at t0 and replay their recorded states (those before t0 at t0),
        # so the ledger's capacity follows their history; one without a record takes its
        # current state when it was set
        st = fleet_of(tree, self.pools, ((Host(h.name, h.gpus), h.cluster, h.kind)
                                         for h in hosts), t0, max(30 * DAY, 2 * lookback))
        unknown = sorted({f"{p}: {b}" for p, ws in self.pools.overrides.items() for b in ws
                          if b not in tree})
        if unknown:
            log.warning("per-pool weights of budgets that do not exist, left out: %s",
                        "; ".join(unknown))
        # the config checks the pools of its own [[hosts]]; an executor's hosts (Slurm's)
        # are known only here, and a mistyped pool would silently fund nothing
        absent = sorted(set(self.pools.overrides) - set(st.pools))
        if absent and st.pools:
            log.warning("per-pool weights of pools no host is in, without effect: %s (the "
                        "hosts' pools: %s)", ", ".join(absent), ", ".join(sorted(st.pools)))
        # the hosts have today's GPU counts: one resized since counts, while healthy, the
        # difference to the count it had then on top (from t0: the count before its first
        # resize), so the capacity follows the count in force at each moment
        resizes = self.store.host_resizes()
        size_off: dict[str, int] = {}
        for _, name, old, _ in reversed(resizes):
            if name in st.hosts:
                size_off[name] = old - st.hosts[name].gpus
        for name, off in size_off.items():
            _count_gpus(st, name, off, t0)  # every host joined healthy at t0
        events: list[tuple[float, int, int, Callable[[float], None]]] = []
        running_ids = {r.id for r in running}
        for i, iv in enumerate(self.store.usage_intervals(t0)):
            ended_at = _replayable_end(iv, running_ids, now)
            if ended_at is None:
                continue  # a running attempt: replayed below through state.start
            # charged in billed units, at the weight of the pool it ran in
            b, alloc = iv.budget, iv.allocated
            g = iv.gpus_held * (st.pools[st.pool_of(iv.host)].billing
                                if iv.host in st.hosts else 1.0)
            start_t = max(iv.started_at, t0)
            events.append((start_t, 0, i, _ledger_change(st, b, g, alloc)))
            events.append((max(ended_at, start_t), 0, i, _ledger_change(st, b, -g, alloc)))
        for i, row in enumerate(running):
            events.append((row.attempt.started_at, 2, i, _replay_start(st, row)))  # type: ignore[union-attr]
        # at one instant a host came back before work started on it, and work running on a
        # host started before it was drained or marked down; a record from a clock ahead of
        # the scheduler's (a host registered by wall clock, a fake scheduler clock) counts now
        # several records of a host moved to one instant (all those before t0, all those
        # after now) would be replayed in the order of the priorities, not their own: only
        # the last of them is its state from that instant
        last: dict[tuple[str, float], int] = {}
        for i, (at, name, _) in enumerate(history):
            last[name, max(min(at, now), t0)] = i
        for (name, t), i in last.items():
            if name in st.hosts:
                state = history[i][2]
                prio = 1 if state is HostState.HEALTHY else 3
                events.append((t, prio, i, _replay_host(st, name, state, size_off)))
        for i, h in enumerate(hosts, len(history)):
            if h.name not in registered and h.state is not HostState.HEALTHY:
                events.append((max(h.changed_at, t0), 3, i,
                               _replay_host(st, h.name, h.state, size_off)))
        for i, (at, name, _, new) in enumerate(resizes):
            if name in st.hosts:  # last at its instant (in any order it counts the same)
                events.append((max(min(at, now), t0), 4, i,
                               _replay_resize(st, name, new, size_off)))
        events.sort(key=lambda e: e[:3])
        for t, _, _, apply in events:
            apply(t)
        if events:  # a clock set back before a restart: its passes start at the latest of
            # them, which the ledger cannot go back from (each failed with "time went back")
            st.advance(max(st.time, events[-1][0]))
        self.state = st
        self._host_reason = {h.name: h.reason for h in hosts}
        self._free = {h.name: list(range(h.gpus)) for h in hosts}
        self._open = {}
        self._commands, self._names = {}, {}
        self._warn = {}
        self._held, self._hold_reason, self._array_of, self._env = {}, {}, {}, {}
        self._array_span = {}
        for row in running:
            a = row.attempt
            assert a is not None
            slots = tuple(HostSlots(h, tuple(ix)) for h, _, ix in a.placement)
            self._take(slots)
            stop_reason = a.stop_reason  # the stop as it was issued, if it was
            if row.cancel_requested:
                stop_reason = "cancelled"
            elif row.status is Status.STOPPING and stop_reason is None:
                # stopped by a server whose store kept no reason (before migration 0009)
                stop_reason = "preempted"
                if row.time_limit and a.started_at + row.time_limit <= now:
                    stop_reason = f"{TIMEOUT}: reached its time limit"
            self._open[row.id] = _Attempt(
                a.n, slots, a.started_at, a.handle, stop_reason, row.resumable, False,
                a.stop_issued_at, a.signal_sent_at,
            )
            self._commands[row.id] = row.command
            self._keep_warning(row)
            if row.name:
                self._names[row.id] = row.name
            if row.array_id is not None:
                self._array_of[row.id] = row.array_id
        t = max(now, st.time)
        for row in rows:
            if row.status is Status.PENDING and not self._backing_off(row.id, t):
                self._queue(row, t)

    def _queue(self, row: WorkloadRow, t: float, held: bool = True) -> None:
        """Queue a pending workload, or hold it while a dependency or its array's throttle
        keeps it out (``held=False``: it was just released). Work released before stays in
        the queue, as in the simulator (after a restart too: ``released_at`` is stored)."""
        if held and (row.dependencies or row.array_throttle) and row.released_at is None:
            self._held[row.id] = row
            return
        st = self._st()
        try:
            spec = row.spec(st.hosts)  # the hosts it may use, of those known now
            _validate(st, spec, self.config)
            # work that ran before resumes: the restart protection applies to its next run
            st.submit(spec, t, queued_at=row.queued_at, restarted=row.attempts_count > 0)
        except CoreError as e:
            # the policy can never run it (e.g. its budget stopped being a leaf): end it
            log.warning("%s: refused: %s", row.id, e)
            reason = f"refused by the scheduler: {e}"  # as its end reason: why and show say it
            self.store.refuse(row.id, reason, ACTOR)  # False: cancelled meanwhile, as well
            return
        self._commands[row.id] = row.command
        self._keep_warning(row)
        if row.name:
            self._names[row.id] = row.name
        env = {"APPORTION_JOB_NAME": row.name} if row.name else {}
        if row.array_id is not None:
            self._array_of[row.id] = row.array_id
            env["APPORTION_ARRAY_ID"] = row.array_id
            env["APPORTION_ARRAY_INDEX"] = str(row.array_index)
            # what a Slurm array script indexes its work by; each element runs as a job of
            # its own, so Slurm itself never sets them
            env["SLURM_ARRAY_JOB_ID"] = row.array_id
            env["SLURM_ARRAY_TASK_ID"] = str(row.array_index)
            span = self._array_span.get(row.array_id)
            if span is None:  # every element is stored with the submission: fixed from then
                span = self._array_span[row.array_id] = self.store.array_span(row.array_id)
            count, low, high = span
            env["SLURM_ARRAY_TASK_COUNT"] = str(count)
            env["SLURM_ARRAY_TASK_MIN"] = str(low)
            env["SLURM_ARRAY_TASK_MAX"] = str(high)
        if env:
            self._env[row.id] = env

    def _release_held(self, now: float) -> None:
        """Held work whose dependencies are met (and whose array has room) joins the queue;
        work whose dependency can no longer be met ends, with the reason (core.gating)."""
        if not self._held:
            return
        st = self._st()
        holds = [row.hold() for row in self._held.values()]
        statuses = self.store.statuses(d for h in holds for _, d in h.after)
        active: dict[str, int] = {}
        for wid, array in list(self._array_of.items()):
            if wid in st.pending or wid in st.running:
                active[array] = active.get(array, 0) + 1
            else:  # ended (or cancelled): no longer counted
                del self._array_of[wid]
        ready, ended = release(holds, statuses.get, active)
        for wid, reason in ended:
            del self._held[wid]
            self._hold_reason.pop(wid, None)
            if self.store.end_held(wid, reason, ACTOR):
                log.info("%s: ended: %s", wid, reason)
        for wid in ready:
            self._hold_reason.pop(wid, None)
            row = self._held.pop(wid)
            queued_at = self.store.release_held(wid, now)  # from now, as in the simulator
            if queued_at is not None:
                row = replace(row, queued_at=queued_at, released_at=now)
            self._queue(row, now, held=False)
        for wid, row in self._held.items():  # what the rest waits for, for the views
            met, _ = dependency_state(row.hold(), statuses.get)
            if not met:
                waits = [d for _, d in row.dependencies if statuses.get(d) not in FINAL]
                # a whole array's elements, hundreds perhaps: a few and how many more, so
                # the queue's row stays a line (show lists every dependency)
                listed = (", ".join(waits) if len(waits) <= _WAITS_LISTED else
                          f"{', '.join(waits[:_WAITS_LISTED - 2])} and "
                          f"{len(waits) - _WAITS_LISTED + 2} more")
                self._hold_reason[wid] = "dependency: waiting for " + listed
            else:
                self._hold_reason[wid] = (
                    f"array throttle: {row.array_throttle} of array {row.array_id} at once"
                )

    # ---- pass phases -----------------------------------------------------------------
    def _sync_store(self, now: float) -> None:
        """New submissions, cancellations and budget changes from the store."""
        st = self._st()
        tree = self.store.load_tree()
        if tree.as_dict() != st.tree.as_dict():
            try:
                st.set_tree(tree)
            except CoreError as e:
                if self.pools.fleet(tree).overrides != st.config.overrides:
                    # a per-pool weight names a budget that is gone: a fleet's overrides are
                    # fixed when it is made, so make it again (from the store, next pass)
                    log.warning("budget tree change: rebuilding the pools (%s)", e)
                    self._started = False
                else:
                    log.error("budget tree change not applied: %s", e)
        index = self.store.active_index()  # narrow: ids, statuses, cancel flags
        pending = Status.PENDING.value
        for wid in [w for w in self._backoff if w not in index]:
            del self._backoff[wid]  # cancelled while set aside
            self._names.pop(wid, None)
        queued, running = st.pending, st.running
        new = [wid for wid, (status, _) in index.items()
               if status == pending and wid not in queued and wid not in running
               and wid not in self._held and not self._backing_off(wid, now)]
        if len(new) > BULK_LOAD:
            wanted = set(new)
            rows = {r.id: r for r in self.store.active_workloads() if r.id in wanted}
        else:
            rows = {wid: self.store.get_workload(wid) for wid in new}
        for wid in new:
            row = rows.get(wid)
            if row is not None and row.status is Status.PENDING:
                self._queue(row, now)
        for wid, (status, cancel) in index.items():
            if cancel and status != pending and wid in self._open:
                a = self._open[wid]
                if a.stop_reason is None:
                    self._stop(wid, "cancelled", False, now)
                elif a.stop_reason != "cancelled":
                    a.stop_reason, a.requeue = "cancelled", False  # already stopping: end it
        for wid in [w for w in queued if index.get(w, ("", False))[0] != pending]:
            st.unqueue(wid)  # cancelled while pending
            self._commands.pop(wid, None)
            self._warn.pop(wid, None)
            self._names.pop(wid, None)
            self._env.pop(wid, None)
        for wid in [w for w in self._held if index.get(w, ("", False))[0] != pending]:
            del self._held[wid]  # cancelled while held
            self._hold_reason.pop(wid, None)

    def _sync_inventory(self, now: float) -> bool:
        """Host deaths, returns and drains as the executor reports them. False when the
        executor's backend did not answer (:class:`ExecutorUnavailable`) or the inventory
        failed otherwise (an executor's bug, logged with its traceback): the pass then
        leaves the executor alone and decides nothing, since hosts it cannot see may have
        died."""
        st = self._st()
        try:
            inventory = self.executor.inventory()
        except ExecutorUnavailable as e:
            log.warning("executor unavailable, nothing decided this pass: %s", e)
            self._executor_silent(now, str(e))
            return False
        except Exception as e:
            log.exception("executor inventory failed, nothing decided this pass")
            self._executor_silent(now, f"inventory failed: {e}")
            return False
        self.executor_down_since = self.executor_problem = None
        known = st.hosts
        moved = False
        for ih in inventory:
            pool = self.pools.of(ih.cluster, ih.kind)
            if ih.name not in known:
                self.store.add_host(ih.name, ih.gpus, ACTOR, at=now, cluster=ih.cluster,
                                    kind=ih.kind)
                st.add_host(Host(ih.name, ih.gpus), *pool, now)
                self._free[ih.name] = list(range(ih.gpus))
                self._host_reason[ih.name] = ""
            elif st.where(st.pool_of(ih.name)) != pool:
                # the executor now says another cluster or kind (e.g. Slurm's gres type of a
                # host stored before it had one): stored, and the pools made again
                log.warning("host %s: now in pool %s/%s (was %s)", ih.name, *pool,
                            st.pool_of(ih.name))
                self.store.set_host_pool(ih.name, ih.cluster, ih.kind, ACTOR)
                moved = True
                continue
            elif ih.gpus != known[ih.name].gpus and ih.gpus >= 1 and self._resize(ih, now):
                moved = True
                continue
            if ih.name in self._unmirrored:
                # the executor has not seen our own drain (or its end) yet: tell it again, and
                # follow its view only from the next pass
                self._mirror(ih.name, *self._unmirrored[ih.name])
                continue
            self._follow_host(ih, now)
        reported = self._reported = {ih.name for ih in inventory}
        for name in sorted(set(known) - reported):
            # gone from the executor (from the config's hosts, or Slurm's partition): work
            # placed there could never launch, so it is drained (its running work, which may
            # well go on, is moved off as a drain moves it, not ended as lost) until the
            # executor has it again. A host an admin drained or took out already is left
            # as it is, so that its coming back does not undo that.
            if known[name].state is not HostState.HEALTHY:
                continue
            self._follow_host(InventoryHost(
                name, known[name].gpus, "draining", GONE.removeprefix(EXECUTOR_DOWN)), now)
        if moved:
            self._started = False  # rebuilt from the store on the next pass
            return False
        return True

    def _executor_silent(self, now: float, problem: str) -> None:
        """A pass that could not reach the executor: what queue, why and /metrics show."""
        if self.executor_down_since is None:
            self.executor_down_since = now
        self.executor_problem = problem
        self.passes_skipped += 1

    def _resize(self, ih: InventoryHost, now: float) -> bool:
        """The executor reports another GPU count for a known host (the config's hosts
        edited, a node replaced): stored once no work runs there, and True (the state is
        then rebuilt). Until then a host that shrank is drained, so that nothing is placed
        on GPUs it no longer has."""
        st = self._st()
        name, stored = ih.name, st.hosts[ih.name].gpus
        if st.on_host.get(name):
            if ih.gpus < stored and st.hosts[name].state is HostState.HEALTHY:
                log.warning("host %s: the executor reports %d GPUs where %d are known: "
                            "drained, resized once empty", name, ih.gpus, stored)
                self._host_to(name, HostState.DRAINING,
                              f"{RESIZING}{stored} -> {ih.gpus} GPUs, once empty", now)
            return False
        log.warning("host %s: resized from %d to %d GPUs, as the executor reports", name,
                    stored, ih.gpus)
        self.store.set_host_gpus(name, ih.gpus, ACTOR)
        if self._host_reason.get(name, "").startswith(RESIZING):  # our own drain: over
            self.store.set_host_state(name, HostState.HEALTHY, EXECUTOR_DOWN + "resized",
                                      ACTOR, at=now)
        return True

    def _follow_host(self, ih: InventoryHost, now: float) -> None:
        """Take one host's state from the executor (e.g. Slurm's DOWN, DRAIN, RESUME).

        down -> down (its work ends); draining -> draining (or repair if it was down);
        back to healthy -> healthy, from down only if the executor put it there, and from
        draining/repair only once the executor was seen draining it (an operator resumed
        it there). So an executor without drains (local) never undoes apportion's own."""
        st = self._st()
        name = ih.name
        cur = st.hosts[name].state
        by_executor = self._host_reason.get(name, "").startswith(EXECUTOR_DOWN)
        # drained by the executor: seen draining in this run, or (across a restart, the only
        # way the local executor's hosts change) drained for being gone, as its reason says
        was_drained = (name in self._seen_drained
                       or self._host_reason.get(name, "").startswith(GONE))
        if ih.state == "draining":
            self._seen_drained.add(name)
        else:
            self._seen_drained.discard(name)
        if ih.state == "down" and cur is not HostState.DOWN:
            self._end_host_work(name, now)
            self._host_to(name, HostState.DOWN, EXECUTOR_DOWN + (ih.reason or "down"), now)
        elif ih.state == "draining" and cur is HostState.HEALTHY:
            self._host_to(name, HostState.DRAINING, EXECUTOR_DOWN + (ih.reason or "drained"),
                          now)
        elif ih.state == "draining" and cur is HostState.DOWN and by_executor:
            self._host_to(name, HostState.REPAIR,
                          EXECUTOR_DOWN + "back up, drained: " + (ih.reason or ""), now)
        elif ih.state == "healthy" and (
            (cur is HostState.DOWN and by_executor)
            or (cur in (HostState.DRAINING, HostState.REPAIR) and was_drained)
        ):
            # what happened, as its reason until the next change: back up after it was down,
            # reported again after it was gone, else resumed after the executor's drain
            back = ("back up" if cur is HostState.DOWN
                    else "reported again" if self._host_reason.get(name, "").startswith(GONE)
                    else "resumed")
            self._host_to(name, HostState.HEALTHY, EXECUTOR_DOWN + back, now)

    def _host_to(self, name: str, state: HostState, reason: str, now: float) -> None:
        self.store.set_host_state(name, state, reason, ACTOR, at=now)
        self._st().set_host_state(name, state, now)
        self._host_reason[name] = reason

    def _retry(self, now: float) -> None:
        """Finish what an earlier pass could not: handles not yet stored, stops not sent."""
        for (wid, n), handle in list(self._unsaved.items()):
            self.store.set_attempt_handle(wid, n, handle)
            del self._unsaved[(wid, n)]
        for wid, a in list(self._open.items()):
            if a.handle is None:
                try:
                    self._find_launched(wid, a)
                except ExecutorUnavailable as e:
                    log.warning("%s: launch still unconfirmed: %s", wid, e)
                    return
            if wid in self._open and a.stop_reason is not None and not a.stop_sent:
                self._send_stop(wid, a, now)

    def _find_launched(self, wid: str, a: _Attempt) -> None:
        """An attempt whose launch got no answer: adopt the executor's job if the launch
        went through after all, else end the attempt at its start (nothing charged)."""
        handle = self.executor.find(wid, a.n)
        if handle is not None:
            log.info("%s attempt %d: launched after all as %s; adopted", wid, a.n, handle)
            a.handle = handle
            self.store.set_attempt_handle(wid, a.n, handle)
            return
        log.warning("%s attempt %d: never launched; requeued, nothing charged", wid, a.n)
        if a.stop_reason is not None:
            status = on_stopped(a.requeue, cancelling=a.stop_reason == "cancelled")
        else:
            status = Status.PENDING
        self._end(wid, a.started_at, None, "never launched", status)

    def _fold(self, now: float, strays: bool = False) -> None:
        """Exits and vanished attempts, from the executor into the store, then the state;
        checkpoints that running attempts reported, into the state. With ``strays``
        (once a pass), then the executor's work of no open attempt is stopped
        (:meth:`_stop_strays`), and the executor is asked even with no open handle."""
        handles = {a.handle: wid for wid, a in self._open.items() if a.handle is not None}
        if not handles and not strays:
            return
        try:
            seen = self.executor.observe(list(handles))
        except Exception as e:
            log.warning("executor observe failed: %s", e)
            return
        for handle, wid in handles.items():
            o = seen.get(handle)
            if o is not None and o.state is not AttemptState.RUNNING:
                if o.ended_at is not None and now < o.ended_at <= self.clock.now():
                    # it ended during this pass, after the pass's instant, which the state
                    # cannot end it at yet: the next pass, asked for now, ends it on time
                    self.wake()
                    continue
                self._ended(wid, o, now)
            elif o is not None and o.checkpoint_at is not None:
                self._checkpointed(wid, o.checkpoint_at, now)
        if strays:
            self._stop_strays()

    def _stop_strays(self) -> None:
        """Have the executor stop its work of no open attempt (e.g. a Slurm job whose
        ``sbatch`` timed out, went through only after ``find`` found nothing, and so runs
        for an attempt ended ``never launched``). What is open is read after the observe
        just before (whose listing the executor reuses): every launch that returned by
        then has its handle here, and the attempts whose launch got no answer are passed
        as ``launching``, since ``find`` may still adopt their job."""
        known = {a.handle for a in self._open.values() if a.handle is not None}
        launching = {(wid, a.n) for wid, a in self._open.items() if a.handle is None}
        try:
            self.executor.stop_strays(known, launching, self.grace_s)
        except Exception as e:
            log.warning("executor: work of no open attempt not stopped (looked for again "
                        "next pass): %s", e)

    def _keep_warning(self, row: WorkloadRow) -> None:
        """Keep ``row``'s ``--signal``, read from its stored text; one that no longer reads
        (stored by another system, whose signal numbers differ) is logged and not sent."""
        if not row.signal:
            return
        try:
            self._warn[row.id] = warn_signal.parse(row.signal)
        except ValueError as e:
            log.warning("%s: --signal %r not sent: %s", row.id, row.signal, e)

    def _send_signals(self, t: float) -> None:
        """Send each running attempt's ``--signal`` once it is due (its time before the
        time limit, the attempt's start if the limit is shorter), once per attempt: its
        time is stored, so a restart does not send it again. Work told to stop gets none.
        One the executor could not send is tried again on the next pass. Sets
        :attr:`signal_due_at` to the next one due."""
        next_due: float | None = None
        for wid, a in self._open.items():
            warn = self._warn.get(wid)
            r = self._st().running.get(wid)
            if (warn is None or r is None or a.handle is None or a.signal_sent_at is not None
                    or a.stop_reason is not None):
                continue
            due = warn_signal.due_at(a.started_at, r.spec.time_limit, warn)
            if due is None:
                continue
            if due > t:
                next_due = due if next_due is None else min(next_due, due)
                continue
            try:
                self.executor.signal(a.handle, warn.number, warn.batch)
            except Exception as e:
                log.warning("%s: --signal %s not sent (tried again next pass): %s",
                            wid, warn.text, e)
                continue
            a.signal_sent_at = t
            log.info("%s attempt %d: sent SIG%s, %d s before its time limit%s", wid, a.n,
                     warn.name, warn.time, " (to the batch script)" if warn.batch else "")
            try:
                self.store.mark_signalled(wid, a.n, t)
            except Exception as e:  # sent all the same: a restart may send it once more
                log.warning("%s: --signal sent, its time not stored: %s", wid, e)
        self.signal_due_at = next_due

    def _checkpointed(self, wid: str, t: float, now: float) -> None:
        """A checkpoint reported at ``t``. Only a time within the run (from its start to
        ``now``) and later than the one already known counts: one in the future (a clock
        ahead, ``touch -d``) is ignored until it has passed, and a job cannot move its last
        checkpoint back (while this scheduler runs). Not stored: the executor reports it
        again after a restart."""
        r = self._st().running.get(wid)
        if r is None or not r.started_at <= t <= now:
            return
        if r.checkpointed_at is None or t > r.checkpointed_at:
            self._st().checkpoint(wid, t)

    def _ended(self, wid: str, o: Observation, now: float) -> None:
        a = self._open[wid]
        spec = self._st().running[wid].spec
        t = self._end_time(wid, a, o, now)
        finished_alone = o.state is AttemptState.EXITED and o.exit_code == 0 and not o.signalled
        timed_out = a.stop_reason is not None and a.stop_reason.startswith(TIMEOUT)
        if a.stop_reason is not None and (timed_out or not finished_alone):
            # we asked it to stop: the outcome is the stop's, whatever the exit code (work
            # stopped at its time limit ends as timeout even if it exits 0 on SIGTERM)
            status = on_stopped(a.requeue, cancelling=a.stop_reason == "cancelled",
                                timed_out=timed_out)
            reason = a.stop_reason
        elif o.state is AttemptState.GONE:
            status = on_host_death(spec.resumable)
            reason = "lost: the executor has no trace of it"
        elif o.host_died:  # e.g. Slurm ended it NODE_FAIL: as if its host was seen down
            status = on_host_death(spec.resumable)
            reason = f"host_failure: {o.reason}" if o.reason else "host_failure"
        elif o.timed_out:  # the executor's own time limit (Slurm's TIMEOUT): as ours
            status, reason = Status.TIMEOUT, f"{TIMEOUT}: {o.reason or 'reached its time limit'}"
        elif o.refused is not None:  # it could never start (e.g. its directory): not retried
            status, reason = Status.FAILED, f"launch refused: {o.refused}"
        else:
            status = Status.COMPLETED if o.exit_code == 0 else Status.FAILED
            reason = _exit_reason(o)
        if o.log_note is not None:  # e.g. its output may be cut short: shown by show, why
            reason = f"{reason}; {o.log_note}"
        self._end(wid, t, o.exit_code, reason, status)

    def _end_time(self, wid: str, a: _Attempt, o: Observation, now: float) -> float:
        """When an observed attempt ended: the executor's time (the real exit), kept within
        [its start, the pass's time] (an exit after the pass's time but not after the clock,
        while the pass ran, is left to the next pass: see :meth:`_fold`). A time that is not
        a number, infinite or in the future is an executor's error or a job's forgery:
        stored, it would be charged, and a time the ledger cannot replay would halt every
        pass after a restart. Such a time counts as now (when the end was seen), and is
        logged."""
        if o.ended_at is None:
            return now
        latest = max(now, self.clock.now())
        if math.isfinite(o.ended_at) and o.ended_at <= latest:
            # Slurm's whole seconds may round below its start
            return min(max(o.ended_at, a.started_at), now)
        log.warning("%s attempt %d: the executor reported an end time of %r, not between its "
                    "start (%.3f) and now (%.3f): ended now instead", wid, a.n, o.ended_at,
                    a.started_at, now)
        return now

    def _end(self, wid: str, t: float, code: int | None, reason: str, status: Status) -> None:
        """End the open attempt at ``t`` (no later than the pass's time): store first (the
        one place charging happens), then the state. The state's time never goes back, so
        an exit read after it moved on (a later pass, a submission's pass) ends there, but
        charged up to ``t`` as the store charges it: the live ledger is what a restart
        rebuilds from the attempts."""
        st = self._st()
        a = self._open[wid]
        self.store.end_attempt(wid, a.n, t, code, reason, status)
        ts = max(t, st.time)
        if status is Status.PENDING:
            st.requeue(wid, ts, ended_at=t)
        else:
            st.finish(wid, ts, ended_at=t)
            self._commands.pop(wid, None)
            self._warn.pop(wid, None)
            self._names.pop(wid, None)
            self._env.pop(wid, None)
            self._array_of.pop(wid, None)
        del self._open[wid]
        self._release(a.slots)

    def _end_host_work(self, host: str, now: float) -> None:
        """A host died: its workloads end at once (resumable ones are requeued)."""
        st = self._st()
        for wid in sorted(st.on_host[host]):
            a = self._open[wid]
            spec = st.running[wid].spec
            if a.handle is not None:
                try:  # multi-host work may still run on its other hosts
                    self.executor.stop(a.handle, 0)
                except Exception as e:
                    log.warning("%s: stop after host %s died failed: %s", wid, host, e)
            status = on_host_death(spec.resumable, cancelling=a.stop_reason == "cancelled")
            self._end(wid, now, None, "host_failure", status)

    # ---- applying decisions ----------------------------------------------------------
    def _apply(self, d: Decisions, now: float) -> bool:
        st = self._st()
        for c in d.host_changes:
            reason = c.why
            drained_for = self._host_reason.get(c.host, "")
            if c.to is HostState.REPAIR and drained_for:
                # keep why it was drained: what the repair is for (as Slurm keeps a
                # drained node's reason)
                reason = f"{drained_for} ({c.why})"
            self.store.set_host_state(c.host, c.to, reason, ACTOR, at=now)
            st.set_host_state(c.host, c.to, now)
            self._host_reason[c.host] = reason
            self._mirror_drain(c.host, c.to, reason)
        for w in d.timeouts:
            limit = format_duration(self._st().running[w].spec.time_limit)
            self._stop(w, f"{TIMEOUT}: reached its time limit of {limit}", False, now)
        for p in d.preemptions:
            # who it was preempted for, and why: what ``apportion why`` tells its owner
            self._stop(p.workload, f"preempted: {p.reason.value}", p.requeue, now,
                       {"reason": p.reason.value, "by": p.by})
        for r in d.reservations:  # in memory only: after a restart the next pass re-plans
            st.reserve(r.workload, r.hosts)
        return all(self._launch(s, now) for s in d.starts)

    def _stop(
        self, wid: str, reason: str, requeue: bool, now: float,
        preempted: dict[str, Any] | None = None,
    ) -> None:
        """Record the stop, why and when (with a preemption's audit entry, in one
        transaction), then send it."""
        self.store.mark_stopping(wid, reason, now, preempted, ACTOR)
        self._st().mark_stopping(wid)
        a = self._open[wid]
        a.stop_reason, a.requeue, a.stop_issued_at = reason, requeue, now
        self._send_stop(wid, a, now)

    def _send_stop(self, wid: str, a: _Attempt, now: float) -> None:
        """Send the stop, with what is left of its grace period: one sent again (after a
        failure, or by a restarted server, whose executor may have forgotten the first)
        is killed when the first would have been, not a whole grace period later."""
        if a.handle is None:
            return
        grace = self.grace_s
        if a.stop_issued_at is not None:  # None: issued before the store kept its time
            grace = max(0.0, a.stop_issued_at + self.grace_s - now)
        try:
            self.executor.stop(a.handle, grace)
            a.stop_sent = True
        except Exception as e:
            log.warning("%s: stop failed (retried next pass): %s", wid, e)

    def _launch(self, s: Start, now: float) -> bool:
        """Store the attempt, then launch it. False if the executor refused (retry later)."""
        st = self._st()
        wid = s.workload
        slots = self._assign(s)
        entries = [(sl.host, len(sl.gpu_indexes), list(sl.gpu_indexes)) for sl in slots]
        try:
            # started (and charged) from the pass's time, as the state starts it: its GPUs
            # are its own from then, and a restart rebuilds the state from this time
            row = self.store.begin_attempt(wid, entries, now)
        except Conflict as e:  # no longer pending (cancelled meanwhile): drop it
            log.info("%s: not started: %s", wid, e)
            st.unqueue(wid)
            self._commands.pop(wid, None)
            self._names.pop(wid, None)
            self._env.pop(wid, None)
            return True
        self._take(slots)
        st.start(wid, s.placement, now)
        cluster, kind = st.where(st.pool_of(slots[0].host))
        a = self._open[wid] = _Attempt(row.n, slots, row.started_at)
        try:
            log_path = self.executor.log_path(wid, row.n)
            launch = Launch(
                workload_id=wid,
                attempt=row.n,
                command=self._commands[wid],
                slots=slots,
                log_path=str(log_path) if log_path is not None else "",
                whole_hosts=len(slots) > 1,
                cluster=cluster,
                kind=kind,
                batch_signal=warn.number if (warn := self._warn.get(wid)) and warn.batch
                else 0,
                **self._identity(wid),
            )
            a.handle = self.executor.launch(launch)
        except LaunchRefused as e:  # it can never run as asked: one try only
            log.warning("%s: launch refused: %s", wid, e)
            self._end(wid, now, None, f"launch refused: {e}", Status.FAILED)
            return True
        except ExecutorUnavailable as e:
            # no answer: the job may exist all the same; looked for (find) before a relaunch
            log.warning("%s: launch unconfirmed, looked for on the next pass: %s", wid, e)
            return False
        except LaunchDeferred as e:  # the server's own files: not the workload's doing
            self._defer(wid, now, e)
            return False  # the next launches would meet the same trouble: next pass
        except Exception as e:  # not an answer (docs of service.executor): an executor bug
            log.exception("%s: launch raised an unexpected error", wid)
            self._back_off(wid, now, e)
            return True
        self._backoff.pop(wid, None)
        if self._deferred is not None:
            log.info("launches go again, after %s (%d more deferred after the first)",
                     format_duration(now - self._deferred[1]), self._deferred[2])
            self._deferred = None
        try:
            self.store.set_attempt_handle(wid, row.n, a.handle, launch.log_path)
        except Exception as e:
            log.warning("%s: handle not stored yet (retried): %s", wid, e)
            self._unsaved[(wid, row.n)] = a.handle
        return True

    def _identity(self, wid: str) -> dict[str, Any]:
        """Whose the workload is and where and with what it runs (read at launch only: the
        exported environment is not kept in memory while it waits)."""
        w = self.store.get_workload(wid)
        try:
            account = self.store.get_user(w.user).account
        except NotFound:
            account = w.user
        own = self._env.get(wid)  # the scheduler's variables (name, array) over the exported
        env = w.env if not own else {**(w.env or {}), **own}
        return {"user": w.user, "account": account, "chdir": w.chdir, "env": env,
                "umask": w.umask}

    def _backing_off(self, wid: str, now: float) -> bool:
        held = self._backoff.get(wid)
        return held is not None and held.until > now

    def _back_off(self, wid: str, now: float, e: Exception) -> None:
        """A launch that raised an unexpected error (an executor's bug, not an answer): back
        to pending, set aside (exponential backoff, capped) so that it neither spins nor
        blocks the work behind it."""
        delay = min(BACKOFF_MAX_S, 2 * self._backoff[wid].delay) if wid in self._backoff \
            else BACKOFF_FIRST_S
        log.warning("%s: launch failed, retried in %.0f s: %s", wid, delay, e)
        self._end(wid, now, None, "launch failed", Status.PENDING)
        self._set_aside(wid, now, delay, e)

    def _defer(self, wid: str, now: float, e: LaunchDeferred) -> None:
        """A launch the server's own trouble prevented (LaunchDeferred: its directory
        missing, refused, read-only or full): the attempt is taken back from the store, not
        ended (it was never the workload's: its history shows none of these tries), and the
        workload is set aside with the same backoff as after a failed launch, listed with
        the error. Said once, with its detail (and again if the trouble changes); the
        others are counted, and the count said when launches go again."""
        a = self._open[wid]
        delay = min(BACKOFF_MAX_S, 2 * self._backoff[wid].delay) if wid in self._backoff \
            else BACKOFF_FIRST_S
        problem = str(e)
        if self._deferred is None or self._deferred[0] != problem:
            log.error("launches wait: %s (retried with a backoff; said again when it changes, "
                      "and when launches go again)", problem)
            self._deferred = (problem, now, 0)
        else:
            self._deferred = (problem, self._deferred[1], self._deferred[2] + 1)
        self.launches_deferred += 1
        try:
            self.store.undo_attempt(wid, a.n)
        except Conflict:  # e.g. cancelled meanwhile: ended as any failed launch
            self._end(wid, now, None, "launch failed", Status.PENDING)
        else:
            st = self._st()
            st.requeue(wid, max(now, st.time), ended_at=a.started_at)
            del self._open[wid]
            self._release(a.slots)
        self._set_aside(wid, now, delay, e)

    def _set_aside(self, wid: str, now: float, delay: float, e: Exception) -> None:
        """Back to pending after a failed launch and out of the policy's state for
        ``delay``; kept for the views (queue, why) with the error ``e``."""
        p = self._st().unqueue(wid)
        self._commands.pop(wid, None)
        self._backoff[wid] = _Backoff(now + delay, delay, str(e) or type(e).__name__, p.spec,
                                      p.queued_at)

    def _mirror_drain(self, host: str, state: HostState, reason: str) -> None:
        if state not in (HostState.DRAINING, HostState.HEALTHY):
            return
        self._mirror(host, state is HostState.DRAINING, reason)

    def _mirror(self, host: str, drain: bool, reason: str) -> None:
        """Tell the executor of a drain (or its end); kept and retried each pass if it fails."""
        try:
            self.executor.set_host_drain(host, drain, reason)
        except Exception as e:
            log.warning("host %s: drain not mirrored to the executor (retried): %s", host, e)
            self._unmirrored[host] = (drain, reason)
            return
        self._unmirrored.pop(host, None)

    # ---- GPU indexes -------------------------------------------------------------------
    def _assign(self, s: Start) -> tuple[HostSlots, ...]:
        """The lowest free GPU indexes of each host of the placement."""
        out = []
        for sl in s.placement:
            free = self._free[sl.host]
            if len(free) < sl.gpus:
                raise CoreError(f"host {sl.host}: GPU indexes: {len(free)} free, {sl.gpus} asked")
            out.append(HostSlots(sl.host, tuple(free[: sl.gpus])))
        return tuple(out)

    def _take(self, slots: Sequence[HostSlots]) -> None:
        for sl in slots:
            free = self._free.setdefault(sl.host, [])
            taken = set(sl.gpu_indexes)
            free[:] = [i for i in free if i not in taken]

    def _release(self, slots: Sequence[HostSlots]) -> None:
        for sl in slots:
            free = self._free.setdefault(sl.host, [])
            free.extend(sl.gpu_indexes)
            free.sort()


# ---- helpers ---------------------------------------------------------------------------
def _spec_fields(spec: WorkloadSpec) -> dict[str, Any]:
    return {
        "id": spec.id,
        "budget": spec.budget,
        "user": spec.user,
        "gpus": spec.gpus,
        "min_runtime": spec.min_runtime,
        "allocated": spec.allocated,
        "resumable": spec.resumable,
        "priority": spec.priority,
        "submit_time": spec.submit_time,
        "time_limit": spec.time_limit,
        "gpu_kinds": list(spec.gpu_kinds) or None,
        "cluster": spec.cluster or None,
    }


def _exit_reason(o: Observation) -> str:
    if o.reason is not None:  # the executor knows better than the code (cancelled in Slurm)
        return o.reason
    if o.exit_code is None:  # e.g. its Slurm job cancelled in Slurm before it ran
        return "ended without an exit status: stopped outside apportion"
    if o.exit_code < 0:
        return f"killed by signal {-o.exit_code}"
    return f"exited {o.exit_code}"


def _replayable_end(iv: UsageInterval, running: set[str], now: float) -> float | None:
    """The end of a stored attempt as the ledger can replay it (None: it runs). Ends written
    before the scheduler refused impossible times are read with an error naming the
    attempt, until its row is corrected: an infinite or future end (which would halt every
    pass: the ledger's time cannot go back from it) counts as ``now``; an ended attempt
    without one (NaN, which the database keeps as NULL) as not charged."""
    if iv.ended_at is None and iv.workload_id not in running:
        log.error("%s attempt %d: ended, but no end time is stored: not charged; set its "
                  "ended_at (and gpu_seconds) in the attempts table", iv.workload_id,
                  iv.attempt)
        return iv.started_at
    if iv.ended_at is None or (math.isfinite(iv.ended_at) and iv.ended_at <= now):
        return iv.ended_at
    log.error("%s attempt %d: stored end time %r is not a time up to now: counted as ending "
              "now; set its ended_at (and gpu_seconds) in the attempts table to when it "
              "ended", iv.workload_id, iv.attempt, iv.ended_at)
    return now


def _ledger_change(
    st: FleetState, budget: str, gpus: float, alloc: bool
) -> Callable[[float], None]:
    def apply(t: float) -> None:
        st.ledger.change(budget, gpus, t, charged=alloc)

    return apply


def _replay_start(st: FleetState, row: WorkloadRow) -> Callable[[float], None]:
    def apply(t: float) -> None:
        a = row.attempt
        assert a is not None
        try:  # a requeue keeps its hosts
            spec = row.spec(st.hosts)
        except CoreError:
            spec = row.spec()
        st.submit(spec, t, queued_at=row.queued_at, restarted=a.n > 1)
        st.start(row.id, a.core_placement(), t)
        if row.status is Status.STOPPING:
            st.mark_stopping(row.id)

    return apply


def _count_gpus(st: FleetState, host: str, gpus: int, t: float) -> None:
    """From ``t`` on, the capacity counts ``gpus`` more GPUs of ``host`` (negative: fewer),
    in its pool's billed units."""
    if gpus:
        st.ledger.change_capacity(gpus * st.pools[st.pool_of(host)].billing, t)


def _replay_host(st: FleetState, name: str, state: HostState,
                 size_off: dict[str, int]) -> Callable[[float], None]:
    """Replay a host's state change; ``size_off``: GPUs it had then minus its GPUs now,
    counted while it is healthy (the state counts its GPUs now)."""
    def apply(t: float) -> None:
        was = st.hosts[name].state is HostState.HEALTHY
        if state is HostState.REPAIR and was:
            st.set_host_state(name, HostState.DRAINING, t)
        st.set_host_state(name, state, t)
        if was != (state is HostState.HEALTHY):
            off = size_off.get(name, 0)
            _count_gpus(st, name, -off if was else off, t)

    return apply


def _replay_resize(st: FleetState, name: str, gpus: int,
                   size_off: dict[str, int]) -> Callable[[float], None]:
    """Replay a host's resize to ``gpus`` GPUs: counted from then while it is healthy."""
    def apply(t: float) -> None:
        off = gpus - st.hosts[name].gpus
        if st.hosts[name].state is HostState.HEALTHY:
            _count_gpus(st, name, off - size_off.get(name, 0), t)
        size_off[name] = off

    return apply


__all__ = ["ACTOR", "PassListener", "Published", "Scheduler"]
