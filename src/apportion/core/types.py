"""Plain value types of the policy: workloads, hosts and decisions.

Times are seconds (floats) on whatever clock the driver uses; GPUs are integers.
Everything here is frozen: the policy reads values and returns new ones.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

# A GPU count standing for "no such request or workload": more than any cluster holds, so
# that "smaller than the smallest" comparisons need no special case.
NO_SIZE: Final = 1 << 30


class CoreError(ValueError):
    """Bad input to the policy core; the message names the offending item."""


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What a researcher asked for. Never carries the true duration: the policy must not know it.

    ``min_runtime == 0`` marks the workload *unallocated*: free, never charged, preemptible
    at any moment by allocated work. ``checkpoint_interval`` (0 = unknown) only helps the
    policy estimate how much progress a preemption would lose; ``checkpoint_on_term`` says
    the workload writes a checkpoint when told to stop (SIGTERM, within the grace period),
    so preempting a resumable one loses nothing.
    """

    id: str
    budget: str
    gpus: int
    min_runtime: float
    submit_time: float
    user: str = ""
    resumable: bool = False
    priority: int = 0
    checkpoint_interval: float = 0.0
    time_limit: float = 0.0
    """Wall-time limit of one run (0: none). At ``started_at + time_limit`` the policy stops
    it (:attr:`Decisions.timeouts`) and it ends as ``timeout``."""
    hosts: tuple[str, ...] = ()
    """The hosts it may run on, sorted (empty: any). Placement, victims included, looks at
    no other host."""
    checkpoint_on_term: bool = False
    gpu_kinds: tuple[str, ...] = ()
    """The GPU kinds it accepts, in the owner's order (empty: any). Read by
    :mod:`~apportion.core.fleet` only: a single-pool state ignores it."""
    cluster: str = ""
    """The cluster it must run in (empty: any), read by :mod:`~apportion.core.fleet`."""

    def __post_init__(self) -> None:
        if not self.id:
            raise CoreError("workload: id: must not be empty")
        if self.gpus <= 0:
            raise CoreError(f"workload {self.id}: gpus: must be > 0, got {self.gpus}")
        if self.min_runtime < 0:
            raise CoreError(
                f"workload {self.id}: min_runtime: must be >= 0, got {self.min_runtime}"
            )
        if self.checkpoint_interval < 0:
            raise CoreError(f"workload {self.id}: checkpoint_interval: must be >= 0")
        if self.time_limit < 0:
            raise CoreError(f"workload {self.id}: time_limit: must be >= 0")

    @property
    def allocated(self) -> bool:
        """Charged to its budget and protected for ``min_runtime``."""
        return self.min_runtime > 0


class HostState(enum.Enum):
    HEALTHY = "healthy"
    DRAINING = "draining"  # marked unhealthy: no new work, emptied as protections end
    REPAIR = "repair"  # empty and waiting for (automated) repair
    DOWN = "down"  # dead: its workloads ended at once


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    gpus: int
    state: HostState = HostState.HEALTHY

    def __post_init__(self) -> None:
        if not self.name:
            raise CoreError("host: name: must not be empty")
        if self.gpus <= 0:
            raise CoreError(f"host {self.name}: gpus: must be > 0, got {self.gpus}")

    @property
    def schedulable(self) -> bool:
        return self.state is HostState.HEALTHY


@dataclass(frozen=True, slots=True)
class Slice:
    """GPUs of one host given to one workload."""

    host: str
    gpus: int


Placement = tuple[Slice, ...]


@dataclass(frozen=True, slots=True)
class Running:
    """A workload holding GPUs. ``stopping`` means a preemption was issued and the driver
    is waiting for it to exit: its GPUs are still held but already promised to someone."""

    spec: WorkloadSpec
    placement: Placement
    started_at: float
    stopping: bool = False
    restarted: bool = False
    """This run resumes earlier progress (the workload ran and was requeued): the
    restart protection of the rebalance rules applies to it."""
    checkpointed_at: float | None = None
    """When the workload last reported a checkpoint in this run (None: never; the policy
    then estimates it from the declared interval)."""
    gpus_held: int = field(init=False, compare=False)
    """GPUs it holds on all its hosts (whole hosts for multi-host work)."""
    hosts: tuple[str, ...] = field(init=False, compare=False)
    """The hosts it runs on, in placement order."""

    def __post_init__(self) -> None:
        # asked for on every victim search: computed once
        object.__setattr__(self, "gpus_held", sum(s.gpus for s in self.placement))
        object.__setattr__(self, "hosts", tuple(s.host for s in self.placement))

    def protected_until(self) -> float:
        """Allocated work may not be preempted before this time (only a host dying ends it)."""
        return self.started_at + self.spec.min_runtime if self.spec.allocated else self.started_at

    def at_risk(self, now: float, default_checkpoint: float) -> float:
        """Seconds of progress a preemption at ``now`` would throw away: none for resumable
        work that checkpoints when told to stop; since its last checkpoint for other
        resumable work, which its declared interval (or ``default_checkpoint``) puts at
        whole intervals from its start, or from the checkpoint it last reported; its whole
        run otherwise.

        A report moves the interval's grid, as :func:`~apportion.core.preemption.
        next_checkpoint` does, and never puts more than an interval at risk: a job that
        reported once and then stopped reporting still checkpoints every interval as far
        as the policy knows, so an old report cannot make it look dearer to stop than its
        declared interval does and shield it from victim choice."""
        spec = self.spec
        if not spec.resumable:
            return max(0.0, now - self.started_at)
        if spec.checkpoint_on_term:
            return 0.0
        since = self.started_at if self.checkpointed_at is None else max(
            self.checkpointed_at, self.started_at)
        ran = max(0.0, now - since)
        interval = spec.checkpoint_interval or default_checkpoint
        return ran % interval if interval > 0 else ran


@dataclass(frozen=True, slots=True)
class Pending:
    """A workload waiting to start. ``queued_at`` is submit or requeue time (waits count from
    it); ordering within a budget uses the original ``spec.submit_time``, so a requeued
    workload keeps its place."""

    spec: WorkloadSpec
    queued_at: float
    restarted: bool = False  # it ran before and was requeued: its next run is a restart


class PreemptReason(enum.Enum):
    UNALLOCATED = "unallocated"  # displaced by allocated work
    REBALANCE = "rebalance"  # past its minimum runtime, its budget over-used
    DRAIN = "drain"  # its host is draining
    HOST_FAILURE = "host_failure"  # its host died (issued by drivers, never by decide)


@dataclass(frozen=True, slots=True)
class Start:
    workload: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop ``workload``; a resumable one goes back to the queue, others end as preempted."""

    workload: str
    reason: PreemptReason
    requeue: bool
    by: str | None = None  # the workload the GPUs are freed for, if any


@dataclass(frozen=True, slots=True)
class HostChange:
    host: str
    to: HostState
    why: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs being freed for ``workload`` (its victims are stopping) on ``hosts``: until it
    starts, later passes offer those GPUs to it first and to nobody else."""

    workload: str
    hosts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CheckpointWait:
    """Room for ``workload`` is found, but its victims are not preempted yet: each checkpoints
    by ``until`` (within ``PolicyConfig.checkpoint_wait``), so a pass then preempts them
    losing almost nothing. Drivers record it (:meth:`ClusterState.await_checkpoints`) and
    pass again at ``until`` (:attr:`Decisions.recheck_at`): that pass, or a later one if it
    comes late, preempts them without waiting for their next checkpoint."""

    workload: str
    until: float
    victims: tuple[str, ...]


class WaitReason(enum.Enum):
    NO_CAPACITY = "no_capacity"  # does not fit, nothing it may preempt
    WAITING_FOR_PREEMPTION = "waiting_for_preemption"  # victims are stopping for it
    WAITING_FOR_CHECKPOINT = "waiting_for_checkpoint"  # its victims checkpoint soon
    TOO_LARGE = "too_large"  # more GPUs than all healthy hosts together


@dataclass(frozen=True, slots=True)
class Decisions:
    """Everything one pass decided. ``waiting`` explains, for each pending workload the pass
    looked at and did not start, why; ``order`` is the order it considered them in."""

    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    host_changes: tuple[HostChange, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    order: tuple[str, ...] = ()
    waiting: dict[str, WaitReason] = field(default_factory=dict)
    timeouts: tuple[str, ...] = ()
    """Running work past its time limit: stop it (SIGTERM, the grace period, SIGKILL); it
    ends as ``timeout``, never requeued."""
    checkpoint_waits: tuple[CheckpointWait, ...] = ()
    """Preemptions put off until the victims' checkpoints (see :class:`CheckpointWait`)."""
    recheck_at: float | None = None
    """The earliest moment a pass is due for what this pass put off (None: nothing): the
    first checkpoint waited for. Drivers pass then even if nothing else happens."""
    pool_orders: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """With several pools, each pool's ``order`` (``order`` is theirs one after the other,
    each workload once); empty with one pool. Read to tell a workload's place in its pool."""

    def empty(self) -> bool:
        return not (self.starts or self.preemptions or self.host_changes or self.timeouts)

    def settles(self) -> bool:
        """Once these decisions are applied, is the instant settled (drivers stop passing at
        it)? Yes unless work was preempted or stopped at its time limit (its GPUs may be
        free once it has exited) or a host changed state: a pass that only started
        work leaves nothing for a repeat at the same instant to place, since everything it
        did not start had been tried against at least as many free GPUs. (A repeat could only
        rebalance once the pass's provisional admission charges are gone, about one pass in
        a thousand on the seed scenario; the next pass, at the next event or within the
        hour, does that.)"""
        return not (self.preemptions or self.host_changes or self.timeouts)


def decision_log(now: float, decisions: Decisions) -> list[str]:
    """One line per decision, in a fixed order: the format both drivers log, so the simulator
    and the service can be compared line by line (the parity test)."""
    lines = [f"{now:.3f} host {c.host} -> {c.to.value} ({c.why})" for c in decisions.host_changes]
    lines += [f"{now:.3f} timeout {w}" for w in decisions.timeouts]
    lines += [
        f"{now:.3f} preempt {p.workload} {p.reason.value} requeue={p.requeue} by={p.by}"
        for p in decisions.preemptions
    ]
    lines += [
        f"{now:.3f} start {s.workload} on "
        + ",".join(f"{sl.host}:{sl.gpus}" for sl in s.placement)
        for s in decisions.starts
    ]
    return lines
