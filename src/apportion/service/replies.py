"""The API's replies as typed models, shared by the server (each route's
``response_model``), the CLI (which parses what it reads into them) and the dashboard's data.

Each reply is built in one place: from a store row by its ``of`` class method, or field by
field where the route works it out. The JSON on the wire is what docs/api.md describes; a
field listed in a model's ``omit_if_none`` is left out of the JSON rather than sent as
``null`` (``private`` on a workload shown in full, ``attempts`` outside ``GET
/v1/workloads/{id}``, ``array_ids`` outside an array's submission).

Only pydantic and the standard library are imported, so the CLI can use these models
without loading the server. A field the server adds later is ignored by an older client.
"""

# No "from __future__ import annotations": pydantic and FastAPI read these at runtime.
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    model_serializer,
)

if TYPE_CHECKING:
    from .store import AuditRow, BudgetRow, HostRow, TokenRow, UserRow


class Reply(BaseModel):
    """A reply; ``omit_if_none``: fields left out of the JSON while None."""

    omit_if_none: ClassVar[frozenset[str]] = frozenset()

    # no return annotation: with one, the OpenAPI schema would lose the model's fields
    @model_serializer(mode="wrap")
    def _omit(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        out = handler(self)
        for key in self.omit_if_none:
            if out.get(key, 0) is None:
                del out[key]
        return out


# ---- workloads ---------------------------------------------------------------------------
DEFAULT_UMASK = 0o022  # store/rows.py's: the umask of work whose submitter sent none


def _runs_with_umask(value: object) -> object:
    """A reply's ``umask``: null (a server that answered the stored NULL) is 022."""
    return DEFAULT_UMASK if value is None else value


class Attempt(Reply):
    n: int
    placement: list[tuple[str, int, list[int]]]  # [host, GPUs, GPU indexes]
    gpus_held: int
    started_at: float
    ended_at: float | None
    handle: str | None
    exit_code: int | None
    end_reason: str | None
    gpu_seconds: float | None
    signal_sent_at: float | None = None  # when its workload's --signal was sent to it


class Workload(Reply):
    """A workload as stored. ``command``, ``env`` and ``chdir`` are None, with
    ``private: true``, for a caller who may not see them."""

    omit_if_none = frozenset({"attempts", "private", "array_ids", "pool"})

    id: str
    budget: str
    user: str
    gpus: int
    min_runtime: float
    resumable: bool
    priority: int
    checkpoint_interval: float
    checkpoint_on_term: bool
    command: list[str] | None
    chdir: str | None
    env: dict[str, str] | None
    # the mask it runs with: the submitter's, or the executors' 022 when it sent none
    umask: Annotated[int, BeforeValidator(_runs_with_umask)] = DEFAULT_UMASK
    name: str | None
    time_limit: float | None
    array_id: str | None
    array_index: int | None
    array_throttle: int
    dependencies: list[tuple[str, str]]  # [kind, workload id]
    nodelist: list[str]
    exclude: list[str]
    gpu_kinds: list[str] = []  # accepted, in order of preference; empty: any
    cluster: str = ""  # "": any
    # --signal, canonical: "B:USR1@120" (USR1 to the batch shell 120 s before the time
    # limit); None: none
    signal: str | None = None
    submit_time: float
    queued_at: float
    status: str
    cancel_requested: bool
    attempts_count: int
    exit_code: int | None
    end_reason: str | None
    created_at: float
    attempt: Attempt | None
    attempts: list[Attempt] | None = None  # GET /v1/workloads/{id} only
    private: Literal[True] | None = None
    array_ids: list[str] | None = None  # the submission of an array only
    pool: str | None = None  # "cluster/kind" of the hosts it runs on (while running)


class CancelOutcome(Reply):
    """What a bulk cancel did to one workload: ``cancelled`` (it was pending),
    ``cancel_requested`` (it runs: the scheduler stops it), or it was left as it is:
    ``ended`` (already), ``not_found``, ``not_allowed`` (not the caller's to cancel), with
    ``detail`` saying so. ``status``: its status after the call (None: no such workload)."""

    id: str
    result: Literal["cancelled", "cancel_requested", "ended", "not_found", "not_allowed"]
    status: str | None
    detail: str | None = None


class BulkCancel(Reply):
    """``POST /v1/workloads/cancel``: each workload's outcome, once, in the order of the
    ids given, or for a filter the pending ones first, each group oldest first."""

    workloads: list[CancelOutcome]


# ---- budgets -----------------------------------------------------------------------------
class Budget(Reply):
    """A node of the tree (``GET /v1/budgets``)."""

    path: str
    parent: str | None
    weight: float
    share: float
    leaf: bool
    managers: list[str]
    members: list[str]


class BudgetCreated(Reply):
    path: str
    weight: float
    managers: list[str]
    members: list[str]

    @classmethod
    def of(cls, b: "BudgetRow") -> "BudgetCreated":
        return cls(path=b.path, weight=b.weight, managers=list(b.managers),
                   members=list(b.members))


# What the CLI reads of the node a change answers (a Budget): the fields it prints, which
# are also all an older server answered
class BudgetWeight(Reply):
    path: str
    weight: float


class BudgetMembers(Reply):
    path: str
    members: list[str]


class BudgetManagers(Reply):
    path: str
    managers: list[str]


class NodeUsage(Reply):
    """A node's usage. ``budget`` names it, as the usage report's rows do; ``path`` is the
    same value, kept for clients that read it by that name (docs/api.md)."""

    budget: str
    path: str
    share: float
    charged_gpu_hours: float  # GPU-hours of its allocated work in the window
    # the same in billed units (GPU-hours x the kind's billing weight): the usage ratio's
    # numerator; the GPU-hours where nothing is billed; None from the store when billed
    charged_units: float | None
    free_gpu_hours: float
    usage_ratio: float | None  # None: no capacity in the window


class BudgetUsage(Reply):
    """``GET /v1/budgets/usage``. ``source``: the scheduler's ledger while it runs, else
    the attempts in the store."""

    lookback_s: float
    capacity_gpu_hours: float
    source: Literal["scheduler", "store"]
    billed: bool  # some GPU kind is billed other than 1 unit per GPU-second
    budgets: list[NodeUsage]


# ---- the queue as the policy sees it (GET /v1/queue, the dashboard) -----------------------
class QueuedSpec(Reply):
    """What the policy sees of a workload."""

    id: str
    budget: str
    user: str
    gpus: int
    min_runtime: float
    allocated: bool
    resumable: bool
    priority: int
    submit_time: float
    time_limit: float | None
    # the GPU kinds it accepts (preferred first) and its cluster; None (left out): any
    gpu_kinds: list[str] | None = None
    cluster: str | None = None
    # its name (submit --job-name; None: none), always sent: a client that finds the key
    # missing talks to an older server (``apportion queue`` then reads GET /v1/workloads)
    name: str | None = None

    omit_if_none = frozenset({"gpu_kinds", "cluster"})


class QueuedPending(QueuedSpec):
    """Pending work: ``position`` in the order of the last pass (None: held out of the
    queue, ``hold`` says what for), with several pools in the order of ``pool``'s pass (the
    first pool it waits in, the one ``why`` explains), ``wait_reason`` (``no_capacity``,
    ``waiting_for_preemption``, ``waiting_for_checkpoint``, ``too_large``, ``held``,
    ``launch_failing``: set aside after a failed launch until ``retry_at``, ``hold`` says
    why; None: not reached)."""

    omit_if_none = frozenset({"hold", "retry_at", "gpu_kinds", "cluster", "pool"})

    position: int | None
    queued_at: float
    wait_reason: str | None
    hold: str | None = None
    retry_at: float | None = None  # launch_failing: when its launch is tried again
    pool: str | None = None  # "cluster/kind" whose order ``position`` counts, with several


class QueuedRunning(QueuedSpec):
    attempt: int | None
    placement: list[tuple[str, int, list[int]]]  # [host, GPUs, GPU indexes]
    started_at: float
    protected_until: float
    stopping: bool
    stop_reason: str | None
    pool: str | None = None  # "cluster/kind" of its hosts, with several pools

    omit_if_none = frozenset({"gpu_kinds", "cluster", "pool"})


class QueueHost(Reply):
    name: str
    gpus: int
    state: str
    reason: str
    used: int
    free: int
    # its pool, shown when the service has several (else None, left out)
    cluster: str | None = None
    kind: str | None = None  # its GPU kind
    pool: str | None = None  # "cluster/kind"

    omit_if_none = frozenset({"cluster", "kind", "pool"})


class QueueBudget(Reply):
    path: str
    share: float
    charged_gpu_s: float  # in the lookback window, in billed units (GPU-s if none billed)
    usage_ratio: float | None  # None: no capacity in the window
    gpus_charged_now: float  # GPUs held by its allocated running work
    gpus_free_now: float  # GPUs held by its unallocated running work
    units_charged_now: float  # billed units per hour it is charged now (the ledger's rate)


class QueueView(Reply):
    """The queue as the scheduler's last pass (``last_pass_at``) left it, counted at ``now``,
    the scheduler's clock when asked (usage, protection left); ``now`` None before it
    started."""

    now: float | None
    last_pass_at: float | None
    pending: list[QueuedPending]
    running: list[QueuedRunning]
    hosts: list[QueueHost]
    budgets: list[QueueBudget]
    # the healthy GPU-seconds (billed units) of the window, the ratios' denominator
    capacity_gpu_s: float | None = None
    # when the executor stopped answering (e.g. slurmctld down; None: it answers) and its
    # last error: meanwhile no pass starts, stops or ends anything
    executor_down_since: float | None = None
    executor_problem: str | None = None


# ---- the dashboard's data (GET /v1/dashboard/state) -------------------------------------
class DashboardBudget(Reply):
    """One node: share, usage ratio, and owed and delivered GPUs now and over the window."""

    path: str
    name: str
    depth: int
    leaf: bool
    weight: float
    share: float
    usage_ratio: float
    # the ledger's charge over the window, in billed units (GPU-hours x billing weight; the
    # GPU-hours where nothing is billed): /v1/budgets/usage's ``charged_units``
    charged_units: float
    asked_gpus: int
    owed_gpus: float
    delivered_gpus: float
    unallocated_gpus: float
    owed_gpu_hours: float
    delivered_gpu_hours: float
    pending: int
    running: int


class DashboardPending(QueuedPending):
    model_config = ConfigDict(populate_by_name=True)

    workload_class: str | None = Field(alias="class")  # debug, allocated, unallocated


class DashboardRunning(QueuedRunning):
    model_config = ConfigDict(populate_by_name=True)

    workload_class: str | None = Field(alias="class")


class DashboardHost(Reply):
    name: str
    gpus: int
    state: str
    reason: str
    used: int
    workloads: list[str]
    stopping: int
    last_protection_end: float | None  # None: nothing on it
    pool: str | None = None  # "cluster/kind", with several pools

    omit_if_none = frozenset({"pool"})


class ClusterCounts(Reply):
    hosts: int
    gpus: int
    healthy_gpus: int
    used_gpus: int
    pending: int  # in the queue, as the budgets' pending counts and the metrics count them
    held: int  # pending, but held out of the queue (a dependency, its array's throttle)
    running: int


class DashboardState(Reply):
    """Everything the dashboard shows, polled every 2 s (docs/dashboard.md)."""

    now: float
    last_pass_at: float | None
    passes: int
    errors: int
    lookback_s: float
    owed_since: float | None
    executor: str
    executor_down_since: float | None  # the executor has not answered since (else None)
    executor_problem: str | None  # what it answered last, while it does not answer
    clock_behind_s: float  # how far the wall clock is behind the latest time recorded
    # rows of the queue and of running work listed at most (``cluster`` counts them all);
    # ``pending`` may go on with the asking user's own work beyond them
    max_listed: int
    # the data and /metrics need no token ([server] public_read): a plain link to /metrics,
    # which cannot carry the page's token, opens it
    public_read: bool
    cluster: ClusterCounts
    budgets: list[DashboardBudget]
    pending: list[DashboardPending]
    running: list[DashboardRunning]
    hosts: list[DashboardHost]
    audit: list["AuditEntry"]
    recent: list[str]


class UsageSeries(Reply):
    """``GET /v1/dashboard/usage``: average charged GPUs per node in each hour ending at
    ``end - (hours - 1 - k) * step_s``, and each node's fair share of the healthy GPUs."""

    end: float
    step_s: float
    hours: int
    usage: dict[str, list[float]]
    fair: dict[str, list[float]]


# ---- why (GET /v1/workloads/{id}/why, /v1/dashboard/why/{id}) ----------------------------
# These mirror core's Explanation (core/explain.py) field for field; tests/service/
# test_why_reply.py fails when core's explanation has a field these lack.
class WhyRival(Reply):
    """A sibling subtree whose work the pass considers first."""

    path: str
    ratio: float
    mine: str
    mine_ratio: float
    workloads: int


class WhyVictim(Reply):
    """Running work the explained workload would need to displace."""

    id: str
    budget: str
    gpus: int
    allocated: bool
    resumable: bool
    protected_until: float
    protected: bool
    rules_allow: bool
    why_not: str = ""  # rules_allow false: what the rules refuse (servers before: none said)


class WhyAdvice(Reply):
    """A changed request (``change``: ``min_runtime`` or ``gpus``) that would start sooner."""

    change: str
    min_runtime: float
    gpus: int
    start: float
    hosts: list[str]
    preempting: list[str]


class WhyExplanation(Reply):
    """Pending or running work: core's explanation, its ``text`` with another pool that
    would start it now (``pool_advice``) and its earlier runs (how each ended), its ``pool``
    (None with one pool), owner and submit time."""

    kind: Literal["explanation"]
    workload: str
    status: str
    budget: str
    gpus: int
    allocated: bool
    now: float
    ratio: float
    position: int | None
    considered: int
    allocated_ahead: int
    same_budget_ahead: int
    rivals: list[WhyRival]
    wait_reason: str | None
    starts_now: bool
    preempting: list[str]
    freeing: list[str]  # stopped by an earlier pass, on the hosts being freed for it
    freed_by: float | None  # when the last of them is killed if it has not exited
    awaiting: list[str]  # victims it waits for to checkpoint before they are preempted
    plan_hosts: list[str]
    victims: list[WhyVictim]
    earliest_start: float | None
    lower_bound: bool
    caveats: list[str]
    started_at: float | None
    protected_until: float | None  # running work: no rebalance victim before
    min_runtime_ends: float | None  # running work: a drain of its hosts stops it from then
    restarted: bool  # running work: it resumes after a requeue (restart protection)
    placement: list[tuple[str, int]]  # [host, GPUs]
    resumable: bool  # requeued when preempted
    draining: list[str]  # running work: hosts of its placement being drained
    at_risk: float | None  # running work: progress (s) a preemption now would throw away
    checkpointed_at: float | None  # running work: its last checkpoint reported in this run
    checkpoint_on_term: bool  # running work: it checkpoints when told to stop
    checkpoint_interval: float  # running work: as declared, else the policy's default
    # running work: its time limit (0: none) and when it is stopped at it (servers before
    # these fields: none said)
    time_limit: float = 0.0
    time_limit_at: float | None = None
    # stopping work: when it is killed if it has not exited, and why it was told to stop
    # (servers before these fields: none said)
    killed_at: float | None = None
    stop_reason: str = ""
    min_runtime: float
    projected_start: float | None
    projection_end: float | None
    advice: list[WhyAdvice]
    text: list[str]
    pool_advice: list[str]
    pool: str | None
    user: str
    submit_time: float


class _WhyOfStored(Reply):
    """What a ``why`` reply that the store answers says of the workload itself."""

    workload: str
    status: str
    budget: str
    user: str
    gpus: int
    min_runtime: float
    allocated: bool
    submit_time: float


class WhyHeld(_WhyOfStored):
    """Pending work held out of the queue (a dependency, its array's throttle): ``hold``
    says what holds it, as the queue view's ``hold`` does; the policy does not consider it
    until then, so there is no explanation yet."""

    kind: Literal["held"]
    hold: str
    text: list[str]


class WhyHistory(_WhyOfStored):
    """Ended work: what happened to it (service/history.py); ``preemptions``: when, and the
    audit's record of who it was stopped for."""

    kind: Literal["history"]
    end_reason: str | None
    exit_code: int | None
    attempts: list[Attempt]
    preemptions: list[dict[str, Any]]
    text: list[str]


Why = Annotated[WhyExplanation | WhyHeld | WhyHistory, Field(discriminator="kind")]
"""The reply of ``why``: an explanation, what holds held work, or for ended work its
history."""


# ---- the usage report (GET /v1/reports/usage, service/accounting.py) ---------------------
class BudgetUsageRow(Reply):
    """A budget node's figures for the period (``(all)``: the whole cluster); ``attainment``
    None: owed nothing."""

    budget: str
    share: float
    charged_gpu_hours: float
    charged_units: float  # charged GPU-hours times their kind's billing weight
    free_gpu_hours: float
    owed_gpu_hours: float
    delivered_gpu_hours: float
    attainment: float | None


class MonthUsageRow(Reply):
    """A budget node's figures for one month (``2026-11``) of the period."""

    month: str
    budget: str
    share: float
    charged_gpu_hours: float
    charged_units: float
    free_gpu_hours: float
    owed_gpu_hours: float
    delivered_gpu_hours: float
    attainment: float | None


class UserUsageRow(Reply):
    user: str
    charged_gpu_hours: float
    charged_units: float
    free_gpu_hours: float


def _row_kind(row: Any) -> str:
    keys = row if isinstance(row, dict) else type(row).model_fields
    return "month" if "month" in keys else "user" if "user" in keys else "budget"


UsageRow = Annotated[
    Annotated[BudgetUsageRow, Tag("budget")] | Annotated[MonthUsageRow, Tag("month")]
    | Annotated[UserUsageRow, Tag("user")],
    Discriminator(_row_kind)]
"""A row of the report, as ``by`` asks: per budget node, per month and node, or per user."""


class PoolUsageRow(Reply):
    """One pool (cluster/kind): its GPUs now, healthy, charged and free GPU-hours, billed
    units and ``occupancy`` (None: never healthy in the period)."""

    pool: str
    cluster: str
    kind: str
    billing: float
    gpus: int
    healthy_gpu_hours: float
    charged_gpu_hours: float
    charged_units: float
    free_gpu_hours: float
    occupancy: float | None


class DailyUsage(Reply):
    """A top-level budget's owed and delivered GPU-hours per UTC day of ``days``."""

    owed: list[float]
    delivered: list[float]


class UsageReport(Reply):
    """``GET /v1/reports/usage`` (format json): the period ``from``-``to``, the cluster's
    figures (None: nothing healthy or assigned), ``rows`` by ``by``, every node
    (``budgets``), every pool, and owed and delivered per day and top-level budget."""

    model_config = ConfigDict(populate_by_name=True)

    start: float = Field(alias="from")
    to: float
    by: Literal["budget", "user", "month"]
    healthy_gpu_hours: float
    occupancy: float | None
    unallocated_fraction: float | None
    rows: list[UsageRow]
    budgets: list[BudgetUsageRow]
    pools: list[PoolUsageRow]
    days: list[float]
    daily: dict[str, DailyUsage]
    approximations: list[str]


# ---- what-if (POST /v1/whatif, apportion.service.whatif.compare) and the dashboard's controls ----
class WhatifPeriod(Reply):
    """The replayed history: its span, workloads, host events and what was open at its end."""

    start: float
    end: float
    days: float
    first_submission: float
    """The replay's start: the period's first submission."""
    workloads: int
    host_events: int
    running_at_end: int
    waiting_at_end: int
    cancelled_unstarted: int
    in_former_leaves: dict[str, int]
    """Workloads left out, per budget: submitted while it was a leaf, it has children now."""
    hosts: int
    pools: list[str]
    """The pools replayed (``cluster/kind``); empty when replayed as one plain cluster."""


class WhatifOverall(Reply):
    """The whole cluster in one run. Attainment owed-weighted over the leaves (per
    researcher, ``attainment``) and over the teams (``attainment_teams``), as
    summary.json's ``attainment.overall`` and ``overall_teams``."""

    attainment: float | None
    attainment_teams: float | None
    wait_p90_s: float | None
    preemptions: int
    drains: int


class WhatifFigures(Reply):
    """One budget node in one run; None: nothing owed, or no wait to measure."""

    attainment: float | None
    delivered_gpu_hours: float
    wait_p50_s: float | None
    wait_p90_s: float | None
    preemptions: int


class WhatifBudget(Reply):
    budget: str
    weight_current: float
    weight_proposed: float
    current: WhatifFigures
    proposed: WhatifFigures


class WhatifPoolFigures(Reply):
    """One pool in one run: occupancy (assigned / healthy GPU-seconds), GPU-hours delivered
    to allocated work, attainment, wait p50 of the work that started there, preemptions."""

    occupancy: float | None
    delivered_gpu_hours: float
    attainment: float | None
    wait_p50_s: float | None
    preemptions: int


class WhatifPoolBudgetFigures(Reply):
    """One budget node in one pool in one run; attainment is a team's (None for other
    nodes, or nothing owed there), waits a team's or a leaf's."""

    attainment: float | None
    delivered_gpu_hours: float
    wait_p50_s: float | None
    preemptions: int


class WhatifPoolBudget(Reply):
    budget: str
    current: WhatifPoolBudgetFigures
    proposed: WhatifPoolBudgetFigures


class WhatifPool(Reply):
    """One pool (cluster/kind) of a several-pool history, both runs side by side, and the
    budget nodes with work there."""

    pool: str
    cluster: str
    kind: str
    gpus: int
    current: WhatifPoolFigures
    proposed: WhatifPoolFigures
    budgets: list[WhatifPoolBudget]


class Whatif(Reply):
    """The period replayed with the current settings and with ``set_weight`` and ``set``
    applied, overall and per budget node (a manager sees their own subtree); ``pools`` per
    pool when the history has several (left out with one)."""

    period: WhatifPeriod
    set_weight: dict[str, float]
    set: dict[str, Any]  # the proposed settings, as the policy reads them
    overall: dict[Literal["current", "proposed"], WhatifOverall]
    budgets: list[WhatifBudget]
    pools: list[WhatifPool] | None = None

    omit_if_none = frozenset({"pools"})


class WeightControls(Reply):
    """``GET /v1/dashboard/controls``: the budget nodes whose weight the caller may set."""

    user: str
    admin: bool
    set_weight: list[str]


# ---- hosts, users, tokens, audit ---------------------------------------------------------
class Host(Reply):
    name: str
    gpus: int
    state: str
    reason: str
    changed_at: float
    # its pool, shown when the service has several (else None, left out)
    cluster: str | None = None
    kind: str | None = None  # its GPU kind
    pool: str | None = None  # "cluster/kind"

    omit_if_none = frozenset({"cluster", "kind", "pool"})

    @classmethod
    def of(cls, h: "HostRow", pool: tuple[str, str] | None = None) -> "Host":
        """``pool``: the host's (cluster, kind), given when there are several pools."""
        out = cls(name=h.name, gpus=h.gpus, state=h.state.value, reason=h.reason,
                  changed_at=h.changed_at)
        if pool is not None:
            out.cluster, out.kind, out.pool = pool[0], pool[1], f"{pool[0]}/{pool[1]}"
        return out


class HostInUse(Host):
    """A host with the GPUs its running work holds (``GET /v1/hosts``)."""

    gpus_used: int


class Me(Reply):
    name: str
    admin: bool


class User(Reply):
    name: str
    admin: bool
    unix_user: str | None  # None: the account of the same name
    account: str  # the Unix account its work runs as
    cannot_run: str | None = None
    """Why this server would refuse the user's work now (its Unix account does not exist,
    or is root and the user is not in ``allow_root_for``, ...); None: it can run."""

    @classmethod
    def of(cls, u: "UserRow", cannot_run: str | None = None) -> "User":
        return cls(name=u.name, admin=u.admin, unix_user=u.unix_user, account=u.account,
                   cannot_run=cannot_run)


class Token(Reply):
    """A token's record; never its secret."""

    id: str
    user: str
    kind: str
    label: str
    created_at: float
    revoked_at: float | None
    # when it stops being accepted (None: never), and whether that is past on the server's
    # clock; defaults: a server older than token lifetimes answers neither
    expires_at: float | None = None
    expired: bool = False

    @classmethod
    def of(cls, t: "TokenRow", now: float) -> "Token":
        """``t`` as answered at ``now``, the server's clock."""
        return cls(id=t.id, user=t.user, kind=t.kind, label=t.label, created_at=t.created_at,
                   revoked_at=t.revoked_at, expires_at=t.expires_at, expired=t.expired(now))


class NewToken(Token):
    """A token just created, with its secret (shown this once)."""

    token: str


class AuditEntry(Reply):
    id: int
    at: float
    actor: str
    action: str
    target: str
    old: Any
    new: Any

    @classmethod
    def of(cls, a: "AuditRow") -> "AuditEntry":
        return cls(id=a.id, at=a.at, actor=a.actor, action=a.action, target=a.target,
                   old=a.old, new=a.new)


class Health(Reply):
    status: Literal["ok"]
    executor: str
    # seconds the wall clock is behind the latest time recorded (set back; 0: it is not)
    clock_behind_s: float = 0.0
    # the server's release and its store's schema revision (None: a server before they
    # were said), so that a client of another release can say which it talks to
    version: str | None = None
    schema_revision: str | None = None


DashboardState.model_rebuild()


__all__ = [
    "Attempt", "AuditEntry", "Budget", "BudgetCreated", "BudgetManagers", "BudgetMembers",
    "BudgetUsage", "BudgetUsageRow", "BudgetWeight", "BulkCancel", "CancelOutcome",
    "ClusterCounts", "DailyUsage",
    "DashboardBudget", "DashboardHost", "DashboardPending", "DashboardRunning",
    "DashboardState", "Health", "Host", "HostInUse", "Me", "MonthUsageRow", "NewToken",
    "NodeUsage", "PoolUsageRow", "QueueBudget", "QueueHost", "QueueView", "QueuedPending",
    "QueuedRunning", "QueuedSpec", "Reply", "Token", "UsageReport", "UsageRow",
    "UsageSeries", "User", "UserUsageRow", "WeightControls", "Whatif", "WhatifBudget",
    "WhatifFigures", "WhatifOverall", "WhatifPeriod", "WhatifPool", "WhatifPoolBudget",
    "WhatifPoolBudgetFigures", "WhatifPoolFigures", "Why", "WhyAdvice", "WhyExplanation",
    "WhyHeld", "WhyHistory", "WhyRival", "WhyVictim", "Workload",
]
