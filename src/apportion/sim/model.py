"""What the simulator replays: jobs with their hidden true durations, host events, scenarios."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from apportion.core import BudgetTree, Hold, Host, WorkloadSpec
from apportion.core.fleet import FleetConfig


class LegacyPriority(enum.IntEnum):
    """The old scheduler's priority levels (higher value wins)."""

    LOW = 0
    NORMAL = 1
    HIGH = 2
    URGENT = 3


@dataclass(frozen=True, slots=True)
class SimJob:
    """One workload of a trace or scenario.

    ``spec`` is all the policy sees. ``duration`` is the true run time needed to finish
    (hidden from the policy). The ``legacy_*`` fields and ``squat`` drive the old scheduler:
    its priority, whether the job opted out of preemption, and whether it is an idle
    placeholder that holds GPUs without doing work (squatting). ``patience`` is how long
    (seconds after submission) its owner waits for it to start before withdrawing it
    (``None``: waits forever); like ``duration`` the policy never sees it. ``hold``: its
    dependencies and array throttle (``core.gating``), as the service keeps them."""

    spec: WorkloadSpec
    duration: float
    legacy_priority: LegacyPriority = LegacyPriority.NORMAL
    legacy_preemptible: bool = True
    squat: bool = False
    patience: float | None = None
    hold: Hold | None = None

    def __post_init__(self) -> None:
        if self.patience is not None and not self.patience > 0:
            raise ValueError(
                f"workload {self.spec.id}: patience: must be > 0 seconds or None, "
                f"got {self.patience}"
            )


class HostEventKind(enum.Enum):
    FAIL = "fail"  # the host dies: its work ends at once
    UNHEALTHY = "unhealthy"  # marked unhealthy: the policy drains it
    REPAIRED = "repaired"  # back to healthy


@dataclass(frozen=True, slots=True)
class HostEvent:
    time: float
    host: str
    kind: HostEventKind


@dataclass(frozen=True, slots=True)
class Pools:
    """A fleet: the cluster and GPU kind of every host, and how kinds are billed."""

    of_host: Mapping[str, tuple[str, str]]  # host -> (cluster, kind)
    config: FleetConfig = field(default_factory=FleetConfig)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A complete input to one simulation run: same for every policy compared."""

    name: str
    tree: BudgetTree
    hosts: tuple[Host, ...]
    jobs: tuple[SimJob, ...]
    host_events: tuple[HostEvent, ...] = ()
    days: float = 30.0
    # seconds a failed host needs to come back, and a drained host spends in repair
    repair_time: float = 4 * 3600.0
    meta: dict[str, object] = field(default_factory=dict)
    # several clusters and GPU kinds (None: one pool, a plain ClusterState): see sim/fleet.py
    pools: Pools | None = None
    # workloads whose min_runtime the trace import lowered to the cap: counted in the
    # summary's clamped_min_runtime as the engine's own lowering is
    min_runtime_lowered: tuple[str, ...] = ()
    # host events left out with their hosts when the cluster was replaced (simulate
    # --cluster): counted in the summary's ignored_host_events
    dropped_host_events: int = 0
    # a trace of wall-clock times (ISO 8601): the time its 0 is, in seconds since the Unix
    # epoch (Trace.time_origin); None for a built-in scenario or a trace in seconds. The
    # outputs name it (summary.json's time_origin), so that result hours map back to dates
    time_origin: float | None = None
