"""An in-process executor: attempts are records, time is the injected clock.

Used by fast scheduler tests and by the parity test, where it must end work exactly when the
simulator would. A workload given a true duration exits 0 once it has run its remaining work;
one without runs until stopped. The cost of a preemption is the simulator's
(``apportion.core.consequences.preemption_cost``; docs/simulator.md, "Cost model"): a stopped
run keeps its progress up to its last checkpoint, and every run after the first starts with
``restart_overhead`` seconds of set-up added to the remaining work.

Checkpoint reports (:attr:`Observation.checkpoint_at`) come from ``checkpoint()`` (a job
touching its checkpoint file) and, with ``report_checkpoints``, from the cost model itself:
each checkpoint it keeps progress at is reported once written.
"""

from __future__ import annotations

import dataclasses
import math
import signal
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from apportion.core.consequences import preemption_cost
from apportion.service.clock import Clock
from apportion.service.executor import (
    AttemptState,
    ExecutorUnavailable,
    InventoryHost,
    Launch,
    LaunchRefused,
    Observation,
)


@dataclass(slots=True)
class _InMemoryRun:
    """An attempt as this executor runs it: on the clock, ending when its work is done or
    when it is stopped (the scheduler's own record of an attempt is its ``_Attempt``)."""

    workload_id: str
    attempt: int
    hosts: tuple[str, ...]
    started_at: float
    remaining: float | None  # work left when it started (None: runs until stopped)
    launch: Launch
    ended_at: float | None = None
    exit_code: int | None = None
    signalled: bool = False
    gone: bool = False
    term_at: float | None = None
    kill_at: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    checkpointed_at: float | None = None  # the last checkpoint it reported (checkpoint())


class MemoryExecutor:
    """Runs nothing: keeps attempts in memory and ends them on the clock.

    ``durations`` maps workload id -> true run time (absent: runs until stopped).
    ``checkpoints`` maps workload id -> checkpoint interval (0 or absent:
    ``checkpoint_default``). ``term_delays`` maps workload id -> seconds it takes to exit
    after SIGTERM (absent: exits at once); one slower than the grace period is killed.
    ``on_term`` lists the workloads that checkpoint on SIGTERM: stopped in time, they keep
    all their progress (killed, or on a host that died, they keep their interval's).
    ``report_checkpoints``: running attempts report the last checkpoint the cost model says
    they wrote (after the restart overhead, every interval of work), as a job touching its
    ``APPORTION_CHECKPOINT_FILE`` would.
    """

    name = "memory"

    def __init__(
        self,
        hosts: Iterable[InventoryHost | tuple[str, int]],
        clock: Clock,
        durations: Mapping[str, float] | None = None,
        checkpoints: Mapping[str, float] | None = None,
        checkpoint_default: float = 1800.0,
        restart_overhead: float = 0.0,
        term_delays: Mapping[str, float] | None = None,
        on_term: Iterable[str] = (),
        report_checkpoints: bool = False,
    ) -> None:
        self.clock = clock
        self._hosts: dict[str, InventoryHost] = {}
        for h in hosts:
            ih = h if isinstance(h, InventoryHost) else InventoryHost(h[0], h[1], "healthy")
            self._hosts[ih.name] = ih
        self.durations = dict(durations or {})
        self.checkpoints = dict(checkpoints or {})
        self.checkpoint_default = checkpoint_default
        self.restart_overhead = restart_overhead
        self.term_delays = dict(term_delays or {})
        self.on_term = set(on_term)
        self.report_checkpoints = report_checkpoints
        self.progress: dict[str, float] = {}  # workload -> seconds of work kept so far
        self.overhead: dict[str, float] = {}  # workload -> set-up seconds of its next run
        self.runs: dict[str, int] = {}  # workload -> runs launched
        self.attempts: dict[str, _InMemoryRun] = {}  # handle -> attempt
        self.drained: dict[str, str] = {}  # host -> reason, as mirrored by the scheduler
        # when True every call raises ExecutorUnavailable, like an unreachable backend
        self.broken = False
        self.launches: list[Launch] = []
        # (handle, signal, batch only, when) of each signal sent to a running attempt
        self.signals: list[tuple[str, int, bool, float]] = []

    # ---- the Executor protocol -------------------------------------------------------
    def describe(self) -> str:
        return "memory executor: nothing runs; attempts end on the clock"

    def inventory(self) -> list[InventoryHost]:
        self._check()
        return list(self._hosts.values())

    def launch(self, launch: Launch) -> str:
        self._check()
        for s in launch.slots:
            if s.host not in self._hosts:
                raise LaunchRefused(f"memory executor: host {s.host!r}: unknown host")
        wid = launch.workload_id
        handle = f"mem:{wid}:{launch.attempt}"
        if handle in self.attempts:
            raise LaunchRefused(f"memory executor: {handle}: launched twice")
        remaining: float | None = None
        if wid in self.durations:
            work = self.durations[wid] - self.progress.get(wid, 0.0)
            remaining = self.overhead.get(wid, 0.0) + work
        self.runs[wid] = self.runs.get(wid, 0) + 1
        self.attempts[handle] = _InMemoryRun(
            wid,
            launch.attempt,
            tuple(s.host for s in launch.slots),
            self.clock.now(),
            remaining,
            launch,
            env=dict(launch.env or {}),
        )
        self.launches.append(launch)
        return handle

    def stop(self, handle: str, grace_s: float) -> None:
        self._check()
        a = self.attempts.get(handle)
        if a is None or a.gone:
            return  # vanished with its host: its progress was settled then, once
        now = self.clock.now()
        self._advance(a, now)
        if a.ended_at is not None or a.term_at is not None:
            return
        a.term_at = now
        delay = self.term_delays.get(a.workload_id, 0.0)
        if delay <= grace_s:
            a.kill_at = now + delay
            code = -signal.SIGTERM
        else:
            a.kill_at = now + grace_s
            code = -signal.SIGKILL
        if a.kill_at <= now:
            self._end(a, now, code, signalled=True)
        else:
            a.exit_code = code  # applied when the clock reaches kill_at

    def signal(self, handle: str, signum: int, batch: bool) -> None:
        """Recorded in :attr:`signals` (the work runs on, as a trapped signal leaves it)."""
        self._check()
        a = self.attempts.get(handle)
        now = self.clock.now()
        if a is None or a.gone:
            return
        self._advance(a, now)
        if a.ended_at is None:
            self.signals.append((handle, signum, batch, now))

    def observe(self, handles: Sequence[str]) -> dict[str, Observation]:
        self._check()
        now = self.clock.now()
        out: dict[str, Observation] = {}
        for h in handles:
            a = self.attempts.get(h)
            if a is None or a.gone:
                out[h] = Observation(h, AttemptState.GONE)
                continue
            self._advance(a, now)
            if a.ended_at is None:
                out[h] = Observation(h, AttemptState.RUNNING,
                                     checkpoint_at=self._last_checkpoint(a, now))
            else:
                out[h] = Observation(
                    h, AttemptState.EXITED, a.exit_code, a.signalled, ended_at=a.ended_at
                )
        return out

    def set_host_drain(self, host: str, drain: bool, reason: str) -> None:
        self._check()
        if drain:
            self.drained[host] = reason
        else:
            self.drained.pop(host, None)

    def close(self) -> None:
        pass

    def find(self, workload_id: str, attempt: int) -> str | None:
        """The handle of an attempt launched under this id, if any."""
        self._check()
        handle = f"mem:{workload_id}:{attempt}"
        return handle if handle in self.attempts else None

    def stop_unknown(self, known: Collection[str], grace_s: float) -> None:
        """Nothing to do: its attempts live in this process, which a restored database's
        lost future never reached."""

    def stop_strays(
        self, known: Collection[str], launching: Collection[tuple[str, int]], grace_s: float
    ) -> None:
        """Nothing to do: a launch either happened when it returned or raised, or never
        will (``find`` answers from the same process)."""

    def log_path(self, workload_id: str, attempt: int) -> None:
        """Nothing runs, so there is no output."""
        return None

    # ---- test controls ---------------------------------------------------------------
    def finish(self, workload_id: str, exit_code: int = 0) -> None:
        """Make the running attempt of ``workload_id`` exit now with ``exit_code``."""
        now = self.clock.now()
        for a in self.attempts.values():
            if a.workload_id == workload_id and a.ended_at is None and not a.gone:
                self._end(a, now, exit_code, signalled=False)

    def checkpoint(self, workload_id: str, t: float | None = None) -> None:
        """The running attempt of ``workload_id`` reports a checkpoint written at ``t``
        (default: now), as a job touching its checkpoint file does; reported as given."""
        at = self.clock.now() if t is None else t
        for a in self.attempts.values():
            if a.workload_id == workload_id and a.ended_at is None and not a.gone:
                a.checkpointed_at = at

    def fail_host(self, name: str, reason: str = "died") -> None:
        """The host dies: inventory reports it down and its attempts vanish."""
        h = self._hosts[name]
        self._hosts[name] = dataclasses.replace(h, state="down", reason=reason)
        for a in self.attempts.values():
            if name in a.hosts and a.ended_at is None and not a.gone:
                self._lose(a, self.clock.now())

    def revive_host(self, name: str) -> None:
        h = self._hosts[name]
        self._hosts[name] = dataclasses.replace(h, state="healthy", reason="")

    def running(self) -> list[str]:
        """Workload ids with a live attempt (for tests)."""
        now = self.clock.now()
        out = []
        for a in self.attempts.values():
            self._advance(a, now)
            if a.ended_at is None and not a.gone:
                out.append(a.workload_id)
        return out

    def next_exit(self) -> float | None:
        """The earliest time a live attempt will exit by itself or be killed (None: never)."""
        times = []
        for a in self.attempts.values():
            if a.ended_at is not None or a.gone:
                continue
            if a.remaining is not None:
                times.append(a.started_at + a.remaining)
            if a.kill_at is not None:
                times.append(a.kill_at)
        return min(times) if times else None

    # ---- internals -------------------------------------------------------------------
    def _check(self) -> None:
        if self.broken:
            raise ExecutorUnavailable("memory executor: backend unavailable")

    def _advance(self, a: _InMemoryRun, now: float) -> None:
        """Apply whatever happened to ``a`` up to ``now``: completion or the end of a stop."""
        if a.ended_at is not None or a.gone:
            return
        done_at = a.started_at + a.remaining if a.remaining is not None else math.inf
        stop_at = a.kill_at if a.kill_at is not None else math.inf
        if done_at <= stop_at and done_at <= now:
            self._end(a, done_at, 0, signalled=False)
        elif stop_at < done_at and stop_at <= now:
            self._end(a, stop_at, a.exit_code, signalled=True)

    def _last_checkpoint(self, a: _InMemoryRun, now: float) -> float | None:
        """What ``a`` reports: the later of its own report and, with
        ``report_checkpoints``, the cost model's last checkpoint up to ``now``."""
        modelled = None
        if self.report_checkpoints and a.remaining is not None:
            wid = a.workload_id
            setup = float(self.overhead.get(wid, 0.0))
            # the progress a stop now would keep is what its checkpoints saved (core's model)
            kept = preemption_cost(
                float(now - a.started_at), setup, math.inf,
                float(self.checkpoints.get(wid) or self.checkpoint_default),
            ).kept
            if kept > 0:
                modelled = a.started_at + setup + kept
        times = [t for t in (a.checkpointed_at, modelled) if t is not None]
        return max(times) if times else None

    def _end(self, a: _InMemoryRun, t: float, code: int | None, signalled: bool) -> None:
        a.ended_at, a.exit_code, a.signalled = t, code, signalled
        self._keep_progress(a, t)

    def _lose(self, a: _InMemoryRun, t: float) -> None:
        a.gone = True
        self._keep_progress(a, t)

    def _keep_progress(self, a: _InMemoryRun, t: float) -> None:
        """Progress kept when a run ends, as the simulator's engine computes it."""
        if a.remaining is None:
            return
        wid = a.workload_id
        if a.exit_code == 0 and not a.signalled:
            self.progress[wid] = self.durations[wid]
            return
        left = self.durations[wid] - self.progress.get(wid, 0.0)
        cost = preemption_cost(  # float(): the compiled core refuses ints
            float(t - a.started_at), float(self.overhead.get(wid, 0.0)), float(left),
            float(self.checkpoints.get(wid) or self.checkpoint_default),
            on_term=wid in self.on_term and a.exit_code == -signal.SIGTERM and not a.gone)
        self.progress[wid] = self.progress.get(wid, 0.0) + cost.kept
        self.overhead[wid] = self.restart_overhead  # a next run resumes: it pays the set-up
