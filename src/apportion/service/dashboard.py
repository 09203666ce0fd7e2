"""The dashboard: a web page of the live schedule, and its JSON. It reads, and changes one
thing: a budget's weight, with a what-if preview first (``POST /v1/whatif``), for those who
may set it (``PATCH /v1/budgets/{path}``).

``dashboard_router(store, scheduler, settings)`` serves

* ``/`` the dashboard and ``/sim`` the simulator-run viewer (plain HTML, CSS and JavaScript
  from ``service/static/``: no build step, nothing fetched from the internet);
* ``/v1/dashboard/state``: everything the page shows, polled every 2 s: the budget tree with
  shares, usage ratios, owed and delivered GPUs; the queue in the order the scheduler
  considers it, each with its wait reason; running work with its protection end; hosts
  with drain progress; the audit log. At most ``MAX_LISTED`` rows of the queue and of
  running work (``max_listed``; ``cluster`` counts them all), and with ``?user=NAME``
  that user's pending work beyond them, so that its owner finds it;
* ``/v1/dashboard/usage``: hourly usage per budget node from the usage ledger (sparklines),
  as published at the end of the last pass (:class:`UsagePublisher`);
* ``/v1/dashboard/why/{id}``: the explanation of one workload (``core.explain``), or for
  ended work what happened to it, its times in the zone ``?tz=`` names (the page sends the
  browser's);
* ``/v1/dashboard/controls``: what the token's user may change from the page (the budget
  weights they may set, which they may also preview with ``POST /v1/whatif``): the page
  shows its weight controls only for those;
* ``/metrics``: Prometheus (see :mod:`apportion.service.prom`).

The pages themselves need no token. Their data and ``/metrics`` need one unless
``[server] public_read = true`` (``reader``: the dependency that decides); they show what
every cluster user may see (``squeue`` shows as much), never commands or logs. The page
sends the token given once as ``/#token=<token>`` (kept in the browser's local storage).
"""

from __future__ import annotations

import mimetypes
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import FileResponse

from apportion.core import (
    FINAL,
    BudgetTree,
    CoreError,
    PolicyConfig,
    WorkloadSpec,
    explain,
    plural,
)
from apportion.core.fleet import FleetState, advice, pool_config
from apportion.times import format_time, time_zone

from .auth import Principal, Rights, as_others_see
from .config import ServiceConfig
from .history import attempt_lines, workload_history
from .port import SchedulerPort
from .prom import NodeNow, Telemetry, metrics_router, nodes_now, workload_class
from .replies import (
    AuditEntry,
    ClusterCounts,
    DashboardBudget,
    DashboardHost,
    DashboardPending,
    DashboardRunning,
    DashboardState,
    QueueView,
    UsageSeries,
    WeightControls,
    WhyExplanation,
    WhyHeld,
    WhyHistory,
)
from .store import Store, UserRow, WorkloadRow

STATIC = Path(__file__).parent / "static"
MAX_LISTED = 500  # queue and running rows sent to the page (counts are always complete)
HOUR = 3600.0


def not_started(store: Store) -> str:
    """The 503 message of a route that reads the scheduler's state before its first pass."""
    if not store.budgets():
        return ("scheduler: waiting for a first budget: create one with `apportion budgets "
                "create PATH --weight 1 --member USER` as an admin")
    return "scheduler: not started yet, retry in a moment"


def reader_zone(tz: Annotated[str, Query(
        description="the zone of the times in `text`: an IANA name (Asia/Kolkata) or an "
                    "offset from UTC (+05:30)")] = "UTC") -> tzinfo:
    """The zone ``why`` writes its sentences' times in (``?tz=``); 422 naming ``tz`` for
    one that is not a zone."""
    try:
        return time_zone(tz)
    except ValueError as e:
        raise HTTPException(422, f"tz: {e}") from None


def explain_workload(store: Store, scheduler: SchedulerPort, workload_id: str,
                     may_see_private: Callable[[WorkloadRow], bool] = lambda _: False,
                     zone: tzinfo = UTC) -> WhyExplanation | WhyHeld | WhyHistory:
    """The explanation of one workload as JSON (``GET /v1/workloads/{id}/why``): for pending
    or running work ``core.explain`` (``kind: explanation``), its ``text`` ending with its
    earlier runs if it ran before (how each ended: a preemption with why and for whom), for
    work held out of the queue what holds it (``kind: held``: a dependency, its array's
    throttle; also work set aside after a failed launch: ``launch failing: <error>, next
    try at <time>``), for ended work what happened to it (``kind: history``,
    :mod:`apportion.service.history`).
    Raises the store's NotFound for an unknown id (404), HTTP 409 for work not yet seen by
    the scheduler and 503 before the scheduler has started. End reasons are told as
    :func:`~apportion.service.auth.as_others_see` tells them unless ``may_see_private``
    says the caller may see the workload's private fields (the dashboard's shared view:
    never). Times in ``text`` are written in ``zone`` (apportion.times)."""

    def clock(t: float) -> str:
        return format_time(t, zone)

    row = store.get_workload(workload_id)
    if not may_see_private(row):
        row = as_others_see(row)
    if row.status in FINAL:  # what happened to it, from the store
        return WhyHistory(kind="history",
                          **workload_history(row, store.audit(limit=1000, target=workload_id),
                                             clock))
    # its earlier runs (read before taking the scheduler's lock): why work that ran once
    # waits or runs again
    earlier = attempt_lines(row, store.audit(limit=1000, target=workload_id), clock,
                            ended_only=True) if row.attempts else []
    with scheduler.lock:
        st = scheduler.state
        if st is None:
            raise HTTPException(503, not_started(store))
        if workload_id not in st.pending and workload_id not in st.running:
            hold = scheduler.hold_reason(workload_id)
            if hold is not None:
                return _held(row, hold, earlier)
            failing = scheduler.launch_failing(workload_id)
            if failing is not None:  # its last launch failed: set aside until it is retried
                error, retry_at = failing
                hold = f"launch failing: {error}, next try at {clock(retry_at)}"
                return _held(row, hold, earlier, "set aside after a failed launch, not "
                             "considered by the policy until its next try", hold)
            raise HTTPException(
                409, f"workload {workload_id}: {row.status.value}, not yet seen by the "
                "scheduler: retry in a moment")
        now = max(scheduler.clock.now(), st.time)
        pool = st.runs_in(workload_id) or st.waits_in(workload_id)[0]
        try:
            e = explain(st.pools[pool], now, pool_config(st, pool, scheduler.config),
                        workload_id, pool if len(st.pools) > 1 else "",
                        scheduler.grace_ends())
            # another kind (or cluster) that would start it now, for work that waits
            hints = advice(st, now, scheduler.config, workload_id) \
                if workload_id in st.pending else []
        except CoreError as err:
            raise HTTPException(409, str(err)) from None
        if e.status == "stopping" and row.attempt is not None and row.attempt.stop_reason:
            e = replace(e, stop_reason=row.attempt.stop_reason)
        text = e.lines(clock)
        if scheduler.executor_down_since is not None:  # what it says cannot happen now
            text.insert(1, "nothing starts or ends while the executor does not answer "
                        f"(since {clock(scheduler.executor_down_since)}: "
                        f"{scheduler.executor_problem})")
        return WhyExplanation(**{
            "kind": "explanation", **e.as_dict(),
            "text": text + hints + earlier, "pool_advice": hints,
            "pool": pool if len(st.pools) > 1 else None,
            "user": row.user, "submit_time": row.submit_time})


def _held(row: WorkloadRow, hold: str, earlier: list[str],
          state: str = "held out of the queue, not yet considered by the policy",
          line: str | None = None) -> WhyHeld:
    """Held work: what holds it (the queue's words), before the policy considers it (or,
    with ``state`` and ``line``, work set aside after a failed launch)."""
    allocated = row.min_runtime > 0
    text = [f"{row.id} ({row.status.value}, {plural(row.gpus, 'GPU')}, budget {row.budget}, "
            f"{'allocated' if allocated else 'unallocated'}): {state}",
            line or f"held by {hold}"]
    return WhyHeld(kind="held", workload=row.id, status=row.status.value, budget=row.budget,
                   user=row.user, gpus=row.gpus, min_runtime=row.min_runtime,
                   allocated=allocated, submit_time=row.submit_time, hold=hold,
                   text=text + earlier)


def _hosts(st: FleetState, now: float, reasons: dict[str, str]) -> list[DashboardHost]:
    out = []
    # grouped by pool (cluster/kind), by name within it
    for name in sorted(st.hosts, key=lambda n: (st.pool_of(n), n)):
        h = st.hosts[name]
        on = sorted(st.on_host[name])
        protected = [st.running[w].protected_until() for w in on if w not in st.stopping]
        out.append(DashboardHost(
            name=name,
            gpus=h.gpus,
            state=h.state.value,
            reason=reasons.get(name, ""),
            used=st.used[name],
            workloads=on,
            stopping=sum(1 for w in on if w in st.stopping),
            last_protection_end=max([now, *protected]) if on else None,
            pool=st.pool_of(name) if len(st.pools) > 1 else None,
        ))
    return out


@dataclass(frozen=True, slots=True)
class Reading:
    """What the dashboard shows of the state at one publication (:func:`reading_of`)."""

    now: float
    nodes: list[NodeNow]
    tree: BudgetTree
    hosts: list[DashboardHost]
    classes: dict[str, str]  # workload id (pending, held, running) -> its class
    healthy: int
    used: int


def reading_of(config: PolicyConfig) -> Callable[[FleetState, QueueView], Reading]:
    """What the scheduler publishes for the dashboard at the end of each pass (under its
    lock, at the view's ``now``)."""
    def make(st: FleetState, view: QueueView) -> Reading:
        now = st.time if view.now is None else max(view.now, st.time)
        # from the rows themselves: held work, out of the state's queue, has its class too
        classes = {row.id: workload_class(WorkloadSpec(row.id, row.budget, row.gpus,
                                                       row.min_runtime, row.submit_time),
                                          config)
                   for row in (*view.pending, *view.running)}
        return Reading(now, nodes_now(st, now, config), st.tree,
                       _hosts(st, now, {h.name: h.reason for h in view.hosts}), classes,
                       st.healthy_gpus(), sum(st.used.values()))

    return make


def dashboard_state(
    store: Store, scheduler: SchedulerPort, settings: ServiceConfig, telemetry: Telemetry,
    user: str | None = None,
) -> DashboardState:
    """What ``/v1/dashboard/state`` returns (see the module docstring): the first
    ``MAX_LISTED`` rows of the queue and of running work, then ``user``'s pending work
    beyond them (each with its place). The state as published at the end of the last pass
    (never waiting for one in progress)."""
    published = scheduler.published()
    r = published.extras.get("dashboard") if published is not None else None
    if published is None or not isinstance(r, Reading):
        raise HTTPException(503, not_started(store))
    view, now, tree, nodes, hosts = published.view, r.now, r.tree, r.nodes, r.hosts
    classes, healthy, used, recent = r.classes, r.healthy, r.used, list(published.recent)
    passes, errors = scheduler.passes, scheduler.errors
    down_since, problem = scheduler.executor_down_since, scheduler.executor_problem
    behind = scheduler.clock_behind_s
    window = telemetry.window(now)
    budgets = []
    for n in nodes:
        owed_h, delivered_h = window.get(n.path, (0.0, 0.0))
        budgets.append(DashboardBudget(
            path=n.path,
            name=n.path.rsplit("/", 1)[-1],
            depth=tree.depth(n.path),
            leaf=tree.is_leaf(n.path),
            weight=tree.weight(n.path),
            share=n.share,
            usage_ratio=n.usage_ratio,
            charged_units=n.charged_gpu_s / HOUR,
            asked_gpus=n.asked,
            owed_gpus=n.owed,
            delivered_gpus=n.delivered,
            unallocated_gpus=n.free,
            owed_gpu_hours=owed_h,
            delivered_gpu_hours=delivered_h,
            pending=n.pending,
            running=n.running,
        ))
    listed = view.pending[:MAX_LISTED]
    if user is not None:  # every reader may see the whole queue: nothing private in it
        listed += [p for p in view.pending[MAX_LISTED:] if p.user == user]
    pending = [DashboardPending.model_validate({**dict(p), "class": classes.get(p.id)})
               for p in listed]
    running = [DashboardRunning.model_validate({**dict(r), "class": classes.get(r.id)})
               for r in view.running[:MAX_LISTED]]
    return DashboardState(
        now=now,
        last_pass_at=view.last_pass_at,
        passes=passes,
        errors=errors,
        lookback_s=settings.policy.lookback,
        owed_since=telemetry.since,
        executor=settings.executor.kind,
        executor_down_since=down_since,
        executor_problem=problem,
        clock_behind_s=behind,
        max_listed=MAX_LISTED,
        public_read=settings.server.public_read,
        cluster=ClusterCounts(
            hosts=len(hosts),
            gpus=sum(h.gpus for h in hosts),
            healthy_gpus=healthy,
            used_gpus=used,
            pending=sum(1 for p in view.pending if p.hold is None),
            held=sum(1 for p in view.pending if p.hold is not None),
            running=len(view.running),
        ),
        budgets=budgets,
        pending=pending,
        running=running,
        hosts=hosts,
        audit=[AuditEntry.of(a) for a in store.audit(limit=30)],
        recent=recent,
    )


@dataclass(frozen=True, slots=True)
class Usage:
    """The hourly series of ``/v1/dashboard/usage`` for the last ``hours`` hours ending at
    ``now``, as published at the end of a pass: each node's charged GPUs and fair share per
    hour, oldest first (those of fewer hours are their last ones)."""

    now: float
    hours: int
    usage: Mapping[str, tuple[float, ...]]
    fair: Mapping[str, tuple[float, ...]]

    def last(self, hours: int) -> UsageSeries:
        """The reply for the last ``hours`` (no more than :attr:`hours`) of them."""
        return UsageSeries(end=self.now, step_s=HOUR, hours=hours,
                           usage={n: list(v[-hours:]) for n, v in self.usage.items()},
                           fair={n: list(v[-hours:]) for n, v in self.fair.items()})


def usage_of(st: FleetState, now: float, hours: int) -> Usage:
    """Average charged GPUs per node in each of the last ``hours`` hours to ``now`` (from
    the usage ledger), and each node's fair share of the healthy GPUs in the same hours
    (read under the scheduler's lock)."""
    ends = [now - (hours - 1 - k) * HOUR for k in range(hours)]
    ledger = st.ledger
    healthy = [ledger.capacity(t, HOUR) / HOUR for t in ends]
    # memo=False: the pass's kept windows are left as they are
    series = {node: tuple(round(ledger.charged(node, t, HOUR, memo=False) / HOUR, 3)
                          for t in ends) for node in st.tree.nodes()}
    fair = {node: tuple(round(st.tree.share(node) * h, 3) for h in healthy)
            for node in st.tree.nodes()}
    return Usage(now, hours, series, fair)


class UsagePublisher:
    """What the scheduler publishes for ``/v1/dashboard/usage`` at the end of each pass
    (a publisher, :meth:`SchedulerPort.add_publisher`): the series of the most hours asked
    in the last ``USAGE_ASKED_S`` (nothing while no one asks: the pass pays for them only
    while a dashboard shows them), so that the endpoint never waits for a pass in progress.
    Only a request for more hours than were asked lately is made at once, under the lock."""

    USAGE_ASKED_S = 600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: dict[int, float] = {}  # hours -> when last asked (monotonic)

    def __call__(self, st: FleetState, view: QueueView) -> Usage | None:
        with self._lock:
            since = time.monotonic() - self.USAGE_ASKED_S
            self._asked = {h: t for h, t in self._asked.items() if t >= since}
            hours = max(self._asked, default=0)
        if not hours:
            return None
        return usage_of(st, st.time if view.now is None else max(view.now, st.time), hours)

    def series(self, scheduler: SchedulerPort, hours: int, reader: str | None = None
               ) -> UsageSeries:
        """The reply for ``hours``: from the latest publication (for ``reader`` one that
        covers its own writes, as the queue's), else made now under the lock."""
        with self._lock:
            self._asked[hours] = time.monotonic()
        p = scheduler.published(reader)
        u = p.extras.get("usage") if p is not None else None
        if isinstance(u, Usage) and u.hours >= hours:
            return u.last(hours)
        return usage_series(scheduler, hours)


def usage_series(scheduler: SchedulerPort, hours: int) -> UsageSeries:
    """Average charged GPUs per node in each of the last ``hours`` hours (from the usage
    ledger), and each node's fair share of the healthy GPUs in the same hours, made now
    under the scheduler's lock (as of its clock)."""
    with scheduler.lock:
        st = scheduler.state
        if st is None:
            raise HTTPException(503, "scheduler: not started yet, retry in a moment")
        return usage_of(st, max(scheduler.clock.now(), st.time), hours).last(hours)


def _nobody() -> None:
    """The caller of a route no token guards: no one."""


def weight_controls(store: Store, user: UserRow) -> WeightControls:
    """What ``/v1/dashboard/controls`` returns: the budget nodes whose weight ``user`` may
    set (``Rights.can_set_weight``, the rule ``PATCH /v1/budgets/{path}`` and
    ``POST /v1/whatif`` apply), parents first."""
    rows = store.budgets()
    rights = Rights.of(user, rows)
    return WeightControls(user=user.name, admin=user.admin,
                          set_weight=[b.path for b in rows if rights.can_set_weight(b.path)])


def dashboard_router(
    store: Store,
    scheduler: SchedulerPort,
    settings: ServiceConfig,
    telemetry: Telemetry | None = None,
    reader: Callable[..., object] | None = None,
    principal: Callable[..., Principal] | None = None,
) -> APIRouter:
    """The dashboard's pages, JSON and ``/metrics``. Registers a :class:`Telemetry` with the
    scheduler (unless one is given) to count starts, waits and preemptions as they happen.
    ``reader`` (a FastAPI dependency) guards the JSON and ``/metrics``, not the pages;
    ``principal`` (who a token is) gives ``/v1/dashboard/controls``, which is left out
    without it: none for a read-only (scrape) token, which may change nothing, answered
    rather than refused so that a wall display's page logs no error."""
    tel = telemetry or Telemetry(settings.policy).attach(scheduler)
    scheduler.add_publisher("dashboard", reading_of(settings.policy))
    usage_published = UsagePublisher()
    scheduler.add_publisher("usage", usage_published)
    router = APIRouter()
    deps = [Depends(reader)] if reader is not None else []
    router.include_router(metrics_router(scheduler, tel), dependencies=deps)
    files = {p.name: p for p in STATIC.iterdir() if p.is_file()} if STATIC.is_dir() else {}

    def page(name: str) -> FileResponse:
        if name not in files:
            raise HTTPException(404, f"static: {name}: not found")
        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return FileResponse(files[name], media_type=media,
                            headers={"Cache-Control": "no-cache"})

    @router.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return page("index.html")

    @router.get("/sim", include_in_schema=False)
    def sim() -> FileResponse:
        return page("sim.html")

    @router.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> FileResponse:
        return page(name)

    @router.get("/v1/dashboard/state", tags=["dashboard"], dependencies=deps)
    def state(
        user: Annotated[str | None, Query(
            description="also this user's pending work beyond the rows listed")] = None,
    ) -> DashboardState:
        """Budgets, queue (in the order considered), running work, hosts, audit log."""
        return dashboard_state(store, scheduler, settings, tel, user)

    @router.get("/v1/dashboard/usage", tags=["dashboard"], dependencies=deps)
    def usage(hours: Annotated[int, Query(ge=1, le=24 * 31)] = 168,
              who: object = Depends(reader or _nobody),  # noqa: B008
              ) -> UsageSeries:
        """Hourly charged GPUs per budget node over the last ``hours`` hours, as of the
        end of the last pass."""
        return usage_published.series(scheduler, hours,
                                      who.name if isinstance(who, Principal) else None)

    @router.get("/v1/dashboard/why/{workload_id}", tags=["dashboard"], dependencies=deps)
    def why(workload_id: str, zone: Annotated[tzinfo, Depends(reader_zone)]
            ) -> WhyExplanation | WhyHeld | WhyHistory:
        """Why a workload waits, or until when it is protected."""
        return explain_workload(store, scheduler, workload_id, zone=zone)

    if principal is not None:
        # a default, not an Annotated alias: annotations are strings here (__future__), and
        # FastAPI resolves them in the module's globals only
        @router.get("/v1/dashboard/controls", tags=["dashboard"])
        def controls(who: Principal = Depends(principal)) -> WeightControls:  # noqa: B008
            """The budget weights the caller may set (and preview) from the dashboard."""
            if who.read_only:
                return WeightControls(user=who.name, admin=False, set_weight=[])
            return weight_controls(store, who.user)

    return router


__all__ = ["UsagePublisher", "dashboard_router", "dashboard_state", "explain_workload",
           "not_started", "reader_zone", "usage_series", "weight_controls"]
