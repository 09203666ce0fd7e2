"""What the scheduler's readers may use of it: :class:`SchedulerPort`.

The API, the dashboard, the metrics and ``why`` are typed against this protocol, never
against :class:`~apportion.service.scheduler.Scheduler` itself, and use nothing else of it
(tests/service/test_port.py checks both: that a ``Scheduler`` has every name, and that the
readers name no other attribute). Everything here is safe to call from an API handler
while the scheduler's thread runs passes: the state is read only under :attr:`lock`, and
what is read often (the queue, the dashboard's state and usage, the metrics' gauges) from
:meth:`SchedulerPort.published`, made at the end of each pass and read without the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from apportion.core import Decisions, HostState, PolicyConfig
from apportion.core.fleet import FleetState

from .clock import Clock
from .replies import QueueView


@dataclass(frozen=True, slots=True)
class Published:
    """What readers use without the scheduler's lock: made under it at the end of each pass
    (and after a start or a host change), never changed after. ``covers``: every write
    whose ``wake`` came before the pass began (its generation) is in it; ``view``: the
    queue view then (treat it as read-only); ``extras``: what each publisher
    (:meth:`SchedulerPort.add_publisher`) made of the state then; ``recent``: the latest
    decision log lines."""

    covers: int
    view: QueueView
    extras: Mapping[str, object]
    recent: tuple[str, ...]


class PassListener(Protocol):
    """A read-only observer of the loop (metrics, dashboard): called under the scheduler's
    lock, must be quick and must not change the state."""

    def decided(self, now: float, decisions: Decisions, state: FleetState) -> None:
        """A round decided something; called before it is applied."""

    def passed(self, now: float, seconds: float, state: FleetState) -> None:
        """A pass ended (``seconds``: its wall time)."""


@runtime_checkable
class SchedulerPort(Protocol):
    """The scheduler as its readers see it. Read-only members are properties here so that
    a plain attribute of the scheduler satisfies them."""

    @property
    def lock(self) -> threading.RLock:
        """Held while reading :attr:`state` (the scheduler's thread holds it for a pass)."""
        ...

    @property
    def state(self) -> FleetState | None:
        """The live state, one pool per cluster and GPU kind (None before the first
        start); read it only under :attr:`lock`."""
        ...

    @property
    def config(self) -> PolicyConfig:
        """The policy the scheduler decides with."""
        ...

    @property
    def clock(self) -> Clock:
        """The scheduler's only source of time; readers tell time by it too."""
        ...

    @property
    def passes(self) -> int:
        """Passes completed."""
        ...

    @property
    def errors(self) -> int:
        """Passes abandoned on an error, ever."""
        ...

    @property
    def passes_skipped(self) -> int:
        """Passes that decided nothing because the executor did not answer, ever."""
        ...

    @property
    def launches_deferred(self) -> int:
        """Launches the server's own trouble deferred (``LaunchDeferred``), ever."""
        ...

    @property
    def executor_down_since(self) -> float | None:
        """When the executor stopped answering (None: the last pass reached it)."""
        ...

    @property
    def executor_problem(self) -> str | None:
        """The executor's last error while it does not answer (None: it answers)."""
        ...

    @property
    def clock_behind_s(self) -> float:
        """How far the wall clock is behind the latest time recorded, when it was set back
        by more than a few seconds (else 0): the scheduler's time stands still meanwhile."""
        ...

    @property
    def recent(self) -> Sequence[str]:
        """The latest decision log lines, oldest first."""
        ...

    @property
    def listeners(self) -> list[PassListener]:
        """Observers called on every pass; a reader registers itself by appending."""
        ...

    def wake(self, by: str | None = None) -> None:
        """Something changed in the store (submission, cancel, budgets): run a pass soon.
        ``by``: who wrote it; that caller's reads of :meth:`published` wait for the pass
        that takes it in."""
        ...

    def published(self, reader: str | None = None) -> Published | None:
        """The latest publication (None before the first start), without waiting for a
        pass in progress; but if ``reader`` wrote something it does not cover yet, after
        the pass that takes it in (a bounded wait, none while passes fail)."""
        ...

    def add_publisher(self, name: str, make: Callable[[FleetState, QueueView], object]
                      ) -> None:
        """Have ``make(state, view)`` run under the lock at each publication, its result
        in :attr:`Published.extras` under ``name``."""
        ...

    def set_host_state(self, name: str, state: HostState, reason: str, actor: str) -> None:
        """Change a host's state in the scheduler's state and in the store (audited).
        Raises the store's NotFound for an unknown host, CoreError for a change the
        host's state does not allow."""
        ...

    def queue_view(self, reader: str | None = None) -> QueueView:
        """The queue as the last pass saw it (``GET /v1/queue``; docs/api.md): the view
        of :meth:`published` for ``reader``."""
        ...

    def hold_reason(self, workload_id: str) -> str | None:
        """What keeps a held workload out of the queue, as the queue view's ``hold`` says
        it (None: it is not held)."""
        ...

    def launch_failing(self, workload_id: str) -> tuple[str, float] | None:
        """The error of the failed launch a workload is set aside after, and when it is
        tried again (None: it is not set aside)."""
        ...

    def grace_ends(self) -> dict[str, float]:
        """Stopping work -> when it is killed if it has not exited: its stop's time plus
        the grace period."""
        ...


__all__ = ["PassListener", "Published", "SchedulerPort"]
