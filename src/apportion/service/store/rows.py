"""Plain, frozen rows the store hands out. Callers never see live ORM objects, so nothing
lazily touches the database after a transaction ended, and rows cross threads safely."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, NamedTuple

from apportion.core import (
    After,
    Hold,
    Host,
    HostState,
    Placement,
    Slice,
    Status,
    WorkloadSpec,
    allowed_hosts,
)

# one host's part of a placement: (host, gpus, GPU indexes on that host)
PlacementEntry = tuple[str, int, tuple[int, ...]]


DEFAULT_UMASK = 0o022
"""The umask of work whose submitter sent none (the executors': _wrapper.CHILD_UMASK, the
Slurm backend's JOB_UMASK): stored as NULL, answered as what the work runs with."""

class StoreError(Exception):
    """Base of the store's errors; the message names the row and the problem."""


class NotFound(StoreError):
    """No such workload, attempt, budget, host or user."""


class UnknownParent(NotFound):
    """A new budget's parent does not exist (a typo of an existing one, as a rule): bad
    input naming a budget that is not there, not a state that forbids the change. The
    message says which parent and the closest existing names. Nothing was created."""


class Conflict(StoreError):
    """The change does not apply to the row's current state (compare-and-set failed,
    illegal lifecycle transition, duplicate name, ...). Nothing was changed."""


class NotALeaf(Conflict):
    """A submission's budget has children (it got them after the caller checked the tree):
    work draws on leaves only. Nothing was stored."""


class AlreadySubmitted(Conflict):
    """A submission with this user's idempotency key exists: ``row`` is that workload and
    ``digest`` the digest of the request that stored it. Nothing was changed."""

    def __init__(self, row: WorkloadRow, digest: str | None) -> None:
        super().__init__(f"workload {row.id}: Idempotency-Key: already used")
        self.row = row
        self.digest = digest


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One run of a workload. ``ended_at`` is None while it runs; ``handle`` is None until
    the executor launched it; ``gpu_seconds`` is set once, when it ends; ``stop_reason``
    and ``stop_issued_at`` say why and when the scheduler told it to stop (None: never, or
    before the store kept it)."""

    workload_id: str
    n: int
    placement: tuple[PlacementEntry, ...]
    gpus_held: int
    started_at: float
    ended_at: float | None = None
    handle: str | None = None
    exit_code: int | None = None
    end_reason: str | None = None
    gpu_seconds: float | None = None
    log_path: str | None = None
    stop_reason: str | None = None
    stop_issued_at: float | None = None
    signal_sent_at: float | None = None  # when its --signal was sent (None: not yet)

    def core_placement(self) -> Placement:
        """The placement as the policy core knows it (host and GPU count per slice)."""
        return tuple(Slice(host, gpus) for host, gpus, _ in self.placement)

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "placement": [[h, g, list(ix)] for h, g, ix in self.placement],
            "gpus_held": self.gpus_held,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "handle": self.handle,
            "exit_code": self.exit_code,
            "end_reason": self.end_reason,
            "gpu_seconds": self.gpu_seconds,
            "signal_sent_at": self.signal_sent_at,
        }


@dataclass(frozen=True, slots=True)
class WorkloadRow:
    """A workload. ``attempt`` is its open attempt (None if none is running);
    ``attempts`` lists every attempt, oldest first, when the query asked for them
    (:meth:`Store.get_workload`), and is empty otherwise."""

    id: str
    budget: str
    user: str
    gpus: int
    min_runtime: float
    resumable: bool
    priority: int
    checkpoint_interval: float
    command: tuple[str, ...]
    submit_time: float
    queued_at: float
    status: Status
    cancel_requested: bool
    attempts_count: int
    exit_code: int | None
    end_reason: str | None
    created_at: float
    chdir: str | None = None
    env: dict[str, str] | None = None
    umask: int | None = None  # the submitter's; None: the executors' default (DEFAULT_UMASK)
    name: str | None = None
    time_limit: float = 0.0
    array_id: str | None = None
    array_index: int | None = None
    array_throttle: int = 0
    dependencies: tuple[tuple[str, str], ...] = ()
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    checkpoint_on_term: bool = False
    gpu_kinds: tuple[str, ...] = ()  # accepted, in its owner's order; empty: any
    cluster: str = ""  # "": any
    signal: str | None = None  # --signal, canonical ("B:USR1@120"); None: none
    released_at: float | None = None  # held work: when it joined the queue
    attempt: AttemptRow | None = None
    attempts: tuple[AttemptRow, ...] = field(default=())

    def as_submitted(self) -> WorkloadRow:
        """The row as it was when it was stored (what the submission answered): pending,
        no attempts. A retried submission with the same idempotency key answers this."""
        return replace(
            self, queued_at=self.submit_time, released_at=None, status=Status.PENDING,
            cancel_requested=False,
            attempts_count=0, exit_code=None, end_reason=None, attempt=None, attempts=(),
        )

    def spec(self, hosts: Iterable[str] | None = None) -> WorkloadSpec:
        """What the policy sees of this workload. With ``hosts`` (the cluster's), the hosts
        it may use are worked out from its ``nodelist`` and ``exclude``
        (``core.allowed_hosts``, which raises if they leave none); without, any host."""
        return WorkloadSpec(
            hosts=allowed_hosts(hosts, self.nodelist, self.exclude) if hosts is not None else (),
            id=self.id,
            budget=self.budget,
            gpus=self.gpus,
            min_runtime=self.min_runtime,
            submit_time=self.submit_time,
            user=self.user,
            resumable=self.resumable,
            priority=self.priority,
            checkpoint_interval=self.checkpoint_interval,
            time_limit=self.time_limit,
            checkpoint_on_term=self.checkpoint_on_term,
            gpu_kinds=self.gpu_kinds,
            cluster=self.cluster,
        )

    def hold(self) -> Hold:
        """What may keep it out of the queue: its dependencies and its array's throttle."""
        return Hold(
            workload=self.id,
            after=tuple((After(kind), dep) for kind, dep in self.dependencies),
            array=self.array_id,
            index=self.array_index or 0,
            throttle=self.array_throttle,
        )

    def as_dict(self, with_attempts: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "budget": self.budget,
            "user": self.user,
            "gpus": self.gpus,
            "min_runtime": self.min_runtime,
            "resumable": self.resumable,
            "priority": self.priority,
            "checkpoint_interval": self.checkpoint_interval,
            "checkpoint_on_term": self.checkpoint_on_term,
            "command": list(self.command),
            "chdir": self.chdir,
            "env": dict(self.env) if self.env is not None else None,
            "umask": DEFAULT_UMASK if self.umask is None else self.umask,  # what it runs with
            "name": self.name,
            "time_limit": self.time_limit,
            "array_id": self.array_id,
            "array_index": self.array_index,
            "array_throttle": self.array_throttle,
            "dependencies": [list(d) for d in self.dependencies],
            "nodelist": list(self.nodelist),
            "exclude": list(self.exclude),
            "gpu_kinds": list(self.gpu_kinds),
            "cluster": self.cluster,
            "signal": self.signal,
            "submit_time": self.submit_time,
            "queued_at": self.queued_at,
            "status": self.status.value,
            "cancel_requested": self.cancel_requested,
            "attempts_count": self.attempts_count,
            "exit_code": self.exit_code,
            "end_reason": self.end_reason,
            "created_at": self.created_at,
            "attempt": self.attempt.as_dict() if self.attempt else None,
        }
        if with_attempts:
            out["attempts"] = [a.as_dict() for a in self.attempts]
        return out


@dataclass(frozen=True, slots=True)
class HostRow:
    name: str
    gpus: int
    state: HostState
    reason: str
    changed_at: float
    cluster: str = ""  # "": the config's default cluster ([pools] cluster)
    kind: str = ""  # "": the config's default GPU kind

    def host(self) -> Host:
        return Host(self.name, self.gpus, self.state)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "state": self.state.value,
            "reason": self.reason,
            "changed_at": self.changed_at,
        }


@dataclass(frozen=True, slots=True)
class BudgetRow:
    path: str
    parent: str | None
    weight: float
    managers: tuple[str, ...]
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UserRow:
    name: str
    admin: bool
    unix_user: str | None = None  # None: the Unix account of the same name

    @property
    def account(self) -> str:
        """The Unix account this user's work runs as."""
        return self.unix_user or self.name


TOKEN_KINDS = ("user", "scrape")  # scrape: may read (Prometheus, dashboards), never write


@dataclass(frozen=True, slots=True)
class TokenRow:
    """A token as its owner and admins see it: never the token or its hash."""

    id: str
    user: str
    kind: str
    label: str
    created_at: float
    revoked_at: float | None = None
    expires_at: float | None = None  # None: never expires

    def expired(self, now: float) -> bool:
        """Past its lifetime at ``now`` (the service's clock): refused from then on."""
        return self.expires_at is not None and now >= self.expires_at

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "user": self.user, "kind": self.kind, "label": self.label,
                "created_at": self.created_at, "revoked_at": self.revoked_at,
                "expires_at": self.expires_at}


class CancelResult(StrEnum):
    """What a bulk cancel did to one workload."""

    CANCELLED = "cancelled"  # it was pending: it ended at once
    CANCEL_REQUESTED = "cancel_requested"  # it runs: the scheduler stops it
    ENDED = "ended"  # it had ended already: nothing to do
    NOT_FOUND = "not_found"
    NOT_ALLOWED = "not_allowed"  # the caller may not cancel it: left as it is


@dataclass(frozen=True, slots=True)
class CancelRow:
    """One workload's outcome of :meth:`Store.cancel_workloads`: ``status`` after it and
    ``owner`` (both None for a workload that does not exist)."""

    id: str
    result: CancelResult
    status: Status | None = None
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at: float
    actor: str
    action: str
    target: str
    old: Any
    new: Any

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "old": self.old,
            "new": self.new,
        }


class UsageInterval(NamedTuple):
    """GPUs one attempt held from ``started_at`` to ``ended_at`` (None: still running)."""

    budget: str
    gpus_held: int
    allocated: bool
    started_at: float
    ended_at: float | None
    host: str = ""  # the first host of its placement: its pool, for the billing weight
    workload_id: str = ""  # whose attempt (named when a stored time cannot be replayed)
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class UsedAttempt:
    """What a usage report reads of an attempt: the GPUs it held, where and when (``ended_at``
    None: still running)."""

    placement: tuple[PlacementEntry, ...]
    gpus_held: int
    started_at: float
    ended_at: float | None


@dataclass(frozen=True, slots=True)
class UsedWorkload:
    """What a usage report reads of a workload (:meth:`Store.usage_history`): ``held`` if it
    had dependencies or was in a throttled array (it asks for GPUs from ``released_at``);
    ``cancelled_at`` its ``workload.cancel`` audit entry (None: none in the period read);
    ``attempts`` all of them, oldest first."""

    id: str
    budget: str
    user: str
    gpus: int
    min_runtime: float
    status: Status
    submit_time: float
    released_at: float | None
    held: bool
    cancelled_at: float | None
    attempts: tuple[UsedAttempt, ...]
