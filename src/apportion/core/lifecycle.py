"""Workload and host lifecycles as transition tables; an illegal transition raises."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from .types import CoreError, HostState


class Status(enum.Enum):
    """A workload's lifecycle. Final states have no way out."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"  # preemption issued, waiting for the process to exit
    COMPLETED = "completed"
    FAILED = "failed"
    PREEMPTED = "preempted"  # non-resumable and preempted: ends here
    CANCELLED = "cancelled"
    LOST = "lost"  # non-resumable on a host that died
    TIMEOUT = "timeout"  # stopped at its time limit


WORKLOAD_TRANSITIONS: Mapping[Status, Mapping[Status, str]] = {
    Status.PENDING: {
        Status.RUNNING: "placed by the policy",
        Status.CANCELLED: "cancelled by its owner or a manager",
    },
    Status.RUNNING: {
        Status.COMPLETED: "exited 0",
        Status.FAILED: "exited non-zero",
        Status.STOPPING: "preemption issued: SIGTERM sent, grace period running",
        Status.CANCELLED: "cancelled while running",
        Status.PENDING: "host died and the workload is resumable: requeued",
        Status.LOST: "host died and the workload is not resumable",
        Status.TIMEOUT: "ended by its executor at the executor's own time limit (Slurm's "
                        "TIMEOUT)",
    },
    Status.STOPPING: {
        Status.PENDING: "resumable: requeued, keeps its place",
        Status.PREEMPTED: "not resumable: ends",
        Status.COMPLETED: "finished during the grace period",
        Status.FAILED: "failed during the grace period",
        Status.CANCELLED: "cancelled while stopping",
        Status.LOST: "host died while stopping",
        Status.TIMEOUT: "stopped at its time limit",
    },
    Status.COMPLETED: {},
    Status.FAILED: {},
    Status.PREEMPTED: {},
    Status.CANCELLED: {},
    Status.LOST: {},
    Status.TIMEOUT: {},
}

FINAL = frozenset(s for s, out in WORKLOAD_TRANSITIONS.items() if not out)

HOST_TRANSITIONS: Mapping[HostState, Mapping[HostState, str]] = {
    HostState.HEALTHY: {
        HostState.DRAINING: "marked unhealthy: takes no new work, emptied as protections end",
        HostState.DOWN: "died: its workloads end at once",
    },
    HostState.DRAINING: {
        HostState.REPAIR: "empty: goes to repair with no human",
        HostState.HEALTHY: "drain called off",
        HostState.DOWN: "died while draining",
    },
    HostState.REPAIR: {
        HostState.HEALTHY: "repaired",
        HostState.DOWN: "died in repair",
    },
    HostState.DOWN: {
        HostState.REPAIR: "back up, needs repair before work",
        HostState.HEALTHY: "back up and checked",
    },
}


def check_transition(
    table: Mapping[enum.Enum, Mapping[enum.Enum, str]] | Mapping[HostState, Mapping[HostState, str]]
    | Mapping[Status, Mapping[Status, str]],
    kind: str,
    name: str,
    old: enum.Enum,
    new: enum.Enum,
) -> str:
    """Return why ``old -> new`` is allowed, or raise :class:`CoreError` naming the item."""
    if old == new:
        return "unchanged"
    edges: Mapping[enum.Enum, str] = table.get(old, {})  # type: ignore[call-overload]
    if new not in edges:
        raise CoreError(f"{kind} {name}: state: cannot go from {old.value} to {new.value}")
    return edges[new]
