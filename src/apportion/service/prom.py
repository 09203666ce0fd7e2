"""Prometheus metrics of a running service: ``GET /metrics``.

Two kinds of series, in one registry per app (never the process-wide default registry, so
several apps in one process do not collide):

* **events** the scheduler reports as they happen (:class:`Telemetry`, a
  :class:`~apportion.service.scheduler.PassListener`): workload starts with their wait,
  preemptions by reason, scheduling pass latency. Counters and histograms.
* **state** of the scheduler's :class:`~apportion.core.ClusterState` (:class:`StateCollector`):
  usage ratio, owed and delivered GPUs per budget node, queue length by class, hosts by
  state. Gauges, worked out at the end of each pass (:func:`gauges_of`, published by the
  scheduler) so that a scrape never waits for a pass in progress; they show the state at
  the end of the last pass.

Workload classes (label ``class``): ``debug`` (allocated, few GPUs, short minimum runtime,
see ``core.is_debug``), ``allocated`` (other allocated work) and ``unallocated``.
Owed and delivered GPUs follow the definitions of the product brief, instantaneous:
``owed = min(share x healthy GPUs, GPUs asked by the node's allocated pending and running
work)``, ``delivered = GPUs held by its allocated running work``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from apportion.core import (
    SIZE_CLASSES,
    Decisions,
    HostState,
    PolicyConfig,
    PreemptReason,
    WorkloadSpec,
    ancestors,
    is_debug,
    size_class,
    usage_ratio,
)
from apportion.core.fleet import FleetState

from .port import SchedulerPort
from .replies import QueueView

CLASSES = ("debug", "allocated", "unallocated")
HOUR = 3600.0
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400,
                259200)
PASS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def workload_class(spec: WorkloadSpec, config: PolicyConfig) -> str:
    """``debug``, ``allocated`` or ``unallocated`` (the ``class`` label)."""
    if not spec.allocated:
        return "unallocated"
    return "debug" if is_debug(spec, config) else "allocated"


# ---- per-node figures shared by the metrics and the dashboard --------------------------------
@dataclass(frozen=True, slots=True)
class NodeNow:
    """One budget node at one instant."""

    path: str
    share: float
    usage_ratio: float  # charged / (share x healthy GPU-seconds), over the lookback window
    charged_gpu_s: float  # in the lookback window
    asked: int  # GPUs its allocated pending and running work asks for
    owed: float  # min(share x healthy GPUs, asked)
    delivered: float  # GPUs held by its allocated running work
    free: float  # GPUs held by its unallocated running work
    pending: int
    running: int


def nodes_now(st: FleetState, now: float, config: PolicyConfig) -> list[NodeNow]:
    """Every node of the tree (parents first) at ``now``. The usage ratio is the policy's
    sort metric (same formula and the same guard against an empty window)."""
    asked: dict[str, int] = {}
    pending: dict[str, int] = {}
    running: dict[str, int] = {}
    # GPUs held (allocated, unallocated): in GPUs, whatever the pools' billing weights (the
    # ledger's rate is in billed units)
    held: dict[tuple[str, bool], int] = {}
    for p in st.pending.values():
        for node in ancestors(p.spec.budget)[:-1]:
            pending[node] = pending.get(node, 0) + 1
            if p.spec.allocated:
                asked[node] = asked.get(node, 0) + p.spec.gpus
    for r in st.running.values():
        for node in ancestors(r.spec.budget)[:-1]:
            running[node] = running.get(node, 0) + 1
            key = (node, r.spec.allocated)
            held[key] = held.get(key, 0) + r.gpus_held
            if r.spec.allocated:
                asked[node] = asked.get(node, 0) + r.spec.gpus
    capacity = max(st.ledger.capacity(now, config.lookback), 1.0)
    healthy = st.healthy_gpus()
    out = []
    for node in st.tree.nodes():
        share = st.tree.share(node)
        charged = st.ledger.charged(node, now, config.lookback)
        a = asked.get(node, 0)
        out.append(NodeNow(
            path=node,
            share=share,
            usage_ratio=usage_ratio(charged, share, capacity),
            charged_gpu_s=charged,
            asked=a,
            owed=min(share * healthy, float(a)),
            delivered=float(held.get((node, True), 0)),
            free=float(held.get((node, False), 0)),
            pending=pending.get(node, 0),
            running=running.get(node, 0),
        ))
    return out


# ---- events ------------------------------------------------------------------------------
class Telemetry:
    """Listens to the scheduler's passes: counts and times what happened, and integrates
    owed and delivered GPU-seconds per node into hourly bins (what the dashboard shows over
    the lookback window; kept in memory, so counted since this process started)."""

    def __init__(self, config: PolicyConfig, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.registry = registry or CollectorRegistry()
        self.waits = Histogram(
            "apportion_wait_seconds",
            "Wait from submission (or requeue) to start, observed when a workload starts.",
            ["class"], buckets=WAIT_BUCKETS, registry=self.registry,
        )
        self.waits_by_size = Histogram(
            "apportion_wait_by_size_seconds",
            "Wait from submission (or requeue) to start, by GPUs asked (size class: 1, 2-8, "
            "9-64, 65+), observed when a workload starts.",
            ["size"], buckets=WAIT_BUCKETS, registry=self.registry,
        )
        self.starts = Counter(
            "apportion_starts", "Workloads started.", ["class"], registry=self.registry
        )
        self.preemptions = Counter(
            "apportion_preemptions",
            "Workloads stopped by the scheduler, by reason (host_failure: ended because "
            "their host died).",
            ["reason"], registry=self.registry,
        )
        self.pass_seconds = Histogram(
            "apportion_pass_seconds",
            "Wall time of one scheduling pass (reconcile, decide and apply).",
            buckets=PASS_BUCKETS, registry=self.registry,
        )
        for c in CLASSES:  # every series exists from the first scrape on
            self.waits.labels(c)
            self.starts.labels(c)
        for size in SIZE_CLASSES:
            self.waits_by_size.labels(size)
        for r in PreemptReason:
            self.preemptions.labels(r.value)
        self._lock = threading.Lock()
        self.since: float | None = None  # time of the first pass seen
        self._t: float | None = None
        # per node now: [share x healthy GPUs, GPUs asked, GPUs delivered]; owed is the
        # lesser of the first two averaged over each hour, as report usage counts it
        self._now: dict[str, tuple[float, float, float]] = {}
        self._bins: dict[int, dict[str, list[float]]] = {}  # hour -> node -> GPU-seconds
        self._seen: dict[str, tuple[float, frozenset[str]]] = {}  # running: start, hosts
        self._preempted: set[str] = set()

    def attach(self, scheduler: SchedulerPort) -> Telemetry:
        """Register with the scheduler as one of its pass listeners (once)."""
        if self not in scheduler.listeners:
            scheduler.listeners.append(self)
        return self

    # ---- PassListener ----
    def decided(self, now: float, decisions: Decisions, state: FleetState) -> None:
        for s in decisions.starts:
            p = state.pending.get(s.workload)
            if p is None:
                continue
            c = workload_class(p.spec, self.config)
            self.waits.labels(c).observe(max(0.0, now - p.queued_at))
            self.waits_by_size.labels(size_class(p.spec.gpus)).observe(
                max(0.0, now - p.queued_at)
            )
            self.starts.labels(c).inc()
        for pr in decisions.preemptions:
            self.preemptions.labels(pr.reason.value).inc()
            self._preempted.add(pr.workload)

    def passed(self, now: float, seconds: float, state: FleetState) -> None:
        self.pass_seconds.observe(seconds)
        self._count_host_failures(state)
        with self._lock:
            self._integrate(now)
            if self.since is None:
                self.since = now
            healthy = state.healthy_gpus()
            self._now = {n.path: (n.share * healthy, float(n.asked), n.delivered)
                         for n in nodes_now(state, now, self.config)}

    def _count_host_failures(self, state: FleetState) -> None:
        """Work that left (or restarted) since the last pass while one of its hosts is down,
        and was not stopped by a decision, ended because its host died."""
        down = {n for n, h in state.hosts.items() if h.state is HostState.DOWN}
        for wid, (started, hosts) in self._seen.items():
            r = state.running.get(wid)
            if r is not None and r.started_at == started:
                continue
            if wid in self._preempted:
                self._preempted.discard(wid)
            elif hosts & down:
                self.preemptions.labels(PreemptReason.HOST_FAILURE.value).inc()
        self._seen = {
            wid: (r.started_at, frozenset(s.host for s in r.placement))
            for wid, r in state.running.items()
        }
        self._preempted &= set(self._seen)

    def _integrate(self, now: float) -> None:
        """Add the current GPUs (fair, asked, delivered) x elapsed time to the hourly bins."""
        t = self._t
        self._t = now
        if t is not None:
            self._add(self._bins, t, now)
        keep = int((now - max(self.config.lookback, 30 * 86400.0)) // HOUR)
        for hour in [h for h in self._bins if h < keep]:
            del self._bins[hour]

    def _add(self, bins: dict[int, dict[str, list[float]]], t: float, now: float) -> None:
        """The GPUs of ``_now`` x the time from ``t`` to ``now``, hour by hour, into ``bins``."""
        while t < now:
            hour = int(t // HOUR)
            end = min(now, (hour + 1) * HOUR)
            b = bins.setdefault(hour, {})
            for node, gpus in self._now.items():
                cell = b.setdefault(node, [0.0, 0.0, 0.0])
                for i, g in enumerate(gpus):
                    cell[i] += g * (end - t)
            t = end

    def window(self, now: float) -> dict[str, tuple[float, float]]:
        """Owed and delivered GPU-hours per node over the lookback window ending at ``now``
        (whole hours at the window's start; only since :attr:`since`). Owed in each hour is
        the lesser of the share of the healthy GPUs and the GPUs asked, both averaged over
        the hour, as ``apportion report usage`` (service/accounting.py) counts it."""
        with self._lock:
            first = int((now - self.config.lookback) // HOUR)
            later: dict[int, dict[str, list[float]]] = {}  # the pass-free stretch until now
            if self._t is not None and now > self._t:
                self._add(later, self._t, now)
            out: dict[str, list[float]] = {}
            for hour in self._bins.keys() | later.keys():
                if hour < first:
                    continue
                cells, more = self._bins.get(hour, {}), later.get(hour, {})
                for node in cells.keys() | more.keys():
                    fair, asked, delivered = (a + b for a, b in zip(
                        cells.get(node, (0.0, 0.0, 0.0)), more.get(node, (0.0, 0.0, 0.0)),
                        strict=True))
                    acc = out.setdefault(node, [0.0, 0.0])
                    acc[0] += min(fair, asked)
                    acc[1] += delivered
            return {n: (o / HOUR, d / HOUR) for n, (o, d) in out.items()}


# ---- state, published at each pass, read on each scrape -------------------------------------
@dataclass(frozen=True, slots=True)
class Gauges:
    """The state's gauges at one publication (:func:`gauges_of`)."""

    nodes: list[NodeNow]
    queue: dict[str, int]  # class -> pending workloads
    run_n: dict[str, int]  # class -> running workloads
    run_g: dict[str, int]  # class -> GPUs they hold
    hosts: dict[tuple[str, str], int]  # (pool, host state) -> hosts
    gpus: dict[tuple[str, str], int]  # (pool, host state) -> their GPUs
    used: dict[str, int]  # pool -> GPUs held
    used_healthy: dict[str, int]  # pool -> GPUs held on healthy hosts
    healthy: dict[str, int]  # pool -> healthy GPUs


def gauges_of(config: PolicyConfig) -> Callable[[FleetState, QueueView], Gauges]:
    """What the scheduler publishes for :class:`StateCollector` at the end of each pass
    (under its lock, at the publication's ``now``: the view's)."""
    def make(st: FleetState, view: QueueView) -> Gauges:
        now = st.time if view.now is None else max(view.now, st.time)
        queue = dict.fromkeys(CLASSES, 0)
        for p in st.pending.values():
            queue[workload_class(p.spec, config)] += 1
        run_n = dict.fromkeys(CLASSES, 0)
        run_g = dict.fromkeys(CLASSES, 0)
        for r in st.running.values():
            c = workload_class(r.spec, config)
            run_n[c] += 1
            run_g[c] += r.gpus_held
        # per pool (cluster/kind): hosts and GPUs by state, GPUs held, healthy GPUs
        hosts: dict[tuple[str, str], int] = {}
        gpus: dict[tuple[str, str], int] = {}
        used: dict[str, int] = {}
        used_healthy: dict[str, int] = {}  # held on healthy hosts: occupancy's numerator
        healthy: dict[str, int] = {}
        for pool, ps in st.pools.items():
            for s in HostState:
                hosts[pool, s.value] = gpus[pool, s.value] = 0
            for h in ps.hosts.values():
                hosts[pool, h.state.value] += 1
                gpus[pool, h.state.value] += h.gpus
            used[pool] = sum(ps.used.values())
            used_healthy[pool] = sum(n for h, n in ps.used.items()
                                     if ps.hosts[h].state is HostState.HEALTHY)
            healthy[pool] = ps.healthy_gpus()
        return Gauges(nodes_now(st, now, config), queue, run_n, run_g, hosts, gpus, used,
                      used_healthy, healthy)

    return make


class StateCollector(Collector):
    """Gauges of the scheduler's state when Prometheus scrapes: the counters read as they
    are, the rest as published at the end of the last pass (never waiting for one)."""

    def __init__(self, scheduler: SchedulerPort) -> None:
        self.scheduler = scheduler
        scheduler.add_publisher("metrics", gauges_of(scheduler.config))

    def collect(self) -> Iterator[Metric]:
        sched = self.scheduler
        passes = CounterMetricFamily("apportion_scheduler_passes",
                                     "Scheduling passes completed.")
        errors = CounterMetricFamily("apportion_scheduler_errors",
                                     "Scheduling passes abandoned on an error (retried).")
        skipped = CounterMetricFamily("apportion_scheduler_passes_skipped",
                                      "Scheduling passes that decided nothing because the "
                                      "executor did not answer (e.g. slurmctld down).")
        deferred = CounterMetricFamily(
            "apportion_launches_deferred", "Launches not made for a trouble of the "
            "server's own files (its run or logs directory missing, read-only or full).")
        up = GaugeMetricFamily("apportion_executor_up", "1 if the executor answered the last "
                               "pass, 0 while it does not (nothing starts, stops or ends).")
        behind = GaugeMetricFamily(
            "apportion_clock_behind_seconds",
            "How far the wall clock is behind the latest time recorded (set back; 0: it is "
            "not): the scheduler's time stands still meanwhile.")
        # plain counters, read as they are (each read is atomic; no lock needed)
        passes.add_metric([], float(sched.passes))
        errors.add_metric([], float(sched.errors))
        skipped.add_metric([], float(sched.passes_skipped))
        deferred.add_metric([], float(sched.launches_deferred))
        up.add_metric([], 0.0 if sched.executor_down_since is not None else 1.0)
        behind.add_metric([], float(sched.clock_behind_s))
        yield from (passes, errors, skipped, deferred, up, behind)
        published = sched.published()
        g = published.extras.get("metrics") if published is not None else None
        if not isinstance(g, Gauges):  # before the first start
            return
        nodes = g.nodes

        def per_node(name: str, doc: str, attr: str) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=["budget"])
            for n in nodes:
                g.add_metric([n.path], float(getattr(n, attr)))
            return g

        yield per_node("apportion_budget_share", "Share of the cluster (product of weight "
                       "fractions down the path).", "share")
        yield per_node("apportion_budget_usage_ratio", "Sort metric: charged GPU-seconds in "
                       "the lookback window / (share x healthy GPU-seconds).", "usage_ratio")
        yield per_node("apportion_budget_owed_gpus", "min(share x healthy GPUs, GPUs asked by "
                       "the node's allocated pending and running work).", "owed")
        yield per_node("apportion_budget_delivered_gpus",
                       "GPUs held by the node's allocated running work.", "delivered")
        yield per_node("apportion_budget_unallocated_gpus",
                       "GPUs held by the node's unallocated running work.", "free")
        q = GaugeMetricFamily("apportion_queue_length", "Pending workloads by class.",
                              labels=["class"])
        rn = GaugeMetricFamily("apportion_running_workloads", "Running workloads by class.",
                               labels=["class"])
        rg = GaugeMetricFamily("apportion_running_gpus", "GPUs held by running work by class.",
                               labels=["class"])
        for c in CLASSES:
            q.add_metric([c], float(g.queue[c]))
            rn.add_metric([c], float(g.run_n[c]))
            rg.add_metric([c], float(g.run_g[c]))
        yield from (q, rn, rg)
        hs = GaugeMetricFamily("apportion_hosts", "Hosts by pool (cluster/kind) and state.",
                               labels=["pool", "state"])
        hg = GaugeMetricFamily("apportion_host_gpus", "GPUs of hosts by pool and host state.",
                               labels=["pool", "state"])
        for (pool, state), n in g.hosts.items():
            hs.add_metric([pool, state], float(n))
            hg.add_metric([pool, state], float(g.gpus[pool, state]))
        yield from (hs, hg)
        gu = GaugeMetricFamily("apportion_gpus_used", "GPUs held by running work, by pool.",
                               labels=["pool"])
        oc = GaugeMetricFamily("apportion_pool_occupancy", "GPUs held on healthy hosts / "
                               "healthy GPUs of the pool now (work still on a draining host "
                               "is in neither; 0 with no healthy GPU).", labels=["pool"])
        for pool, n in g.used.items():
            gu.add_metric([pool], float(n))
            oc.add_metric([pool], g.used_healthy[pool] / g.healthy[pool] if g.healthy[pool]
                          else 0.0)
        yield from (gu, oc)


def metrics_router(scheduler: SchedulerPort, telemetry: Telemetry) -> APIRouter:
    """``GET /metrics`` in the Prometheus text format: the telemetry's events and the
    scheduler's state, read on each scrape."""
    from prometheus_client import generate_latest

    telemetry.registry.register(StateCollector(scheduler))
    router = APIRouter(tags=["metrics"])

    @router.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(telemetry.registry), media_type=CONTENT_TYPE_LATEST)

    return router


__all__ = [
    "CLASSES",
    "Gauges",
    "NodeNow",
    "StateCollector",
    "Telemetry",
    "gauges_of",
    "metrics_router",
    "nodes_now",
    "workload_class",
]
