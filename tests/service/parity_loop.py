"""The live scheduler stepped at exactly the moments the simulator's engine handles, for the
parity tests (test_parity.py, test_parity_generated.py, test_parity_pools.py).

The engine passes at submissions, host events, exits, ends of minimum runtimes and of
time limits, hour boundaries, repairs and the moments a pass asked for
(``Decisions.recheck_at``: a checkpoint waited for). :class:`Moments` finds the next of
them in the service's own state, sets the fake clock there and hands back what is due;
each test applies it to the service as its case needs (restarts, host failures, arrays),
then calls :meth:`Moments.step`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apportion.core import WorkloadSpec
from apportion.service.clock import FakeClock
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.sim.model import HostEvent

HOUR = 3600.0


@dataclass
class Moments:
    clock: FakeClock
    executor: MemoryExecutor
    end: float
    repair_time: float
    submissions: list[tuple[WorkloadSpec, float]]  # (spec, true duration)
    host_events: list[HostEvent]
    # host -> (when its repair ends, who brings it back: "admin" or "executor")
    repairs: dict[str, tuple[float, str]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    t: float = -1.0
    _rechecks: set[float] = field(default_factory=set)
    _hours: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.submissions = sorted(self.submissions, key=lambda sd: sd[0].submit_time)
        self.host_events = sorted(self.host_events, key=lambda e: e.time)
        self._hours = [HOUR * k for k in range(1, int(self.end // HOUR) + 1)
                       if HOUR * k < self.end]

    def advance(self, sched: Scheduler) -> bool:
        """Set the clock to the next moment the simulator would handle; False at the end."""
        st = sched.state
        assert st is not None
        t = self.t
        protections = [r.protected_until() for r in st.running.values()
                       if r.spec.allocated and r.protected_until() > t]
        candidates = [
            *(s.submit_time for s, _ in self.submissions[:1]),
            *(e.time for e in self.host_events[:1]),
            *(h for h in self._hours if h > t),
            *(x for x in [self.executor.next_exit()] if x is not None),
            *protections,
            *(d for d in st.deadlines.values() if d > t),
            *(at for at, _ in self.repairs.values()),
            *(r for r in self._rechecks if r > t),
        ]
        self.t = min(candidates, default=self.end)
        if self.t >= self.end:
            return False
        self.clock.set(self.t)
        return True

    def due_host_events(self) -> list[HostEvent]:
        due: list[HostEvent] = []
        while self.host_events and self.host_events[0].time == self.t:
            due.append(self.host_events.pop(0))
        return due

    def due_repairs(self) -> list[tuple[str, str]]:
        """The hosts whose repair ends now, and who brings each back."""
        due = [(name, who) for name, (at, who) in self.repairs.items() if at == self.t]
        for name, _ in due:
            del self.repairs[name]
        return due

    def due_submissions(self) -> list[tuple[WorkloadSpec, float]]:
        due: list[tuple[WorkloadSpec, float]] = []
        while self.submissions and self.submissions[0][0].submit_time == self.t:
            due.append(self.submissions.pop(0))
        return due

    def step(self, sched: Scheduler) -> list[str]:
        """One pass now: its decision log lines are kept, a recheck it asks for becomes a
        moment, and a host it sends to repair comes back ``repair_time`` later (by the
        admin, as the simulator's model has it)."""
        lines = sched.step(self.t)
        if sched.recheck_at is not None:
            self._rechecks.add(sched.recheck_at)
        for line in lines:
            parts = line.split()
            if parts[1] == "host" and parts[4] == "repair":
                self.repairs[parts[2]] = (self.t + self.repair_time, "admin")
        self.log += lines
        return lines
