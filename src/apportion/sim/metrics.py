"""Exact metrics of one simulation run: time integrals per hour and per budget node, waits,
and the summary (definitions and formulas in docs/simulator.md).

Every signal is piecewise constant between events, so integrating ``value x dt`` at each
change is exact. Budget nodes are integrated lazily: a node is brought up to date only when
one of its own signals changes, when the healthy capacity changes (rare: host events) or
when an hour closes, so a workload event costs O(tree depth), never O(budgets).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from apportion.core import BudgetTree, PreemptReason, ancestors, usage_ratio

HOUR = 3600.0

# the reasons a running workload is stopped for, in core's order: one count column each
PREEMPT_REASONS = tuple(r.value for r in PreemptReason)

BUDGET_HOUR_COLUMNS = (
    "hour", "span_h", "budget", "depth", "leaf", "share", "healthy_gpus", "asked", "owed",
    "delivered", "attained", "free", "squat", "window_charged", "usage_ratio",
)
CLUSTER_HOUR_COLUMNS = (
    "hour", "span_h", "total_gpus", "healthy_gpus", "assigned", "allocated", "unallocated",
    "squat", "pending", "running", "starts", "preemptions", "outstanding", "abandoned",
    *(f"preemptions_{r}" for r in PREEMPT_REASONS),
)


def team_of(budget: str, depth: int = 2) -> str:
    """The team a budget belongs to: its first ``depth`` path levels."""
    return "/".join(budget.split("/")[:depth])


def percentiles(samples: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p90/p99 (numpy linear interpolation) and the sample count; None when empty."""
    if not samples:
        return {"p50": None, "p90": None, "p99": None, "n": 0}
    p50, p90, p99 = np.percentile(np.asarray(samples, dtype=float), [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "n": len(samples)}


@dataclass(slots=True)
class Totals:
    """Whole-run integrals (GPU-seconds) of the cluster signals."""

    healthy: float = 0.0
    assigned: float = 0.0
    unallocated: float = 0.0
    squat: float = 0.0


def _nothing_charged(now: float, node: str) -> float:
    return 0.0


def _no_capacity(now: float) -> float:
    return 0.0


@dataclass
class Recorder:
    """Integrates the metric signals of one run and produces the hourly tables."""

    tree: BudgetTree
    total_gpus: int
    healthy: int
    # charged GPU-seconds of a node, and healthy GPU-seconds, in the lookback window ending now
    charged: Callable[[float, str], float] = _nothing_charged
    capacity: Callable[[float], float] = _no_capacity
    start: float = 0.0
    nodes: list[str] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    budget_rows: list[tuple[object, ...]] = field(default_factory=list)
    cluster_rows: list[tuple[object, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes = self.tree.nodes()
        n = len(self.nodes)
        index = {p: i for i, p in enumerate(self.nodes)}
        self._chain = {
            leaf: [index[a] for a in ancestors(leaf)[:-1]] for leaf in self.tree.leaves
        }
        self._share = [self.tree.share(p) for p in self.nodes]
        self._depth = [self.tree.depth(p) for p in self.nodes]
        self._leaf = [self.tree.is_leaf(p) for p in self.nodes]
        # current values per node (GPUs)
        self._ask = [0] * n
        self._run = [0] * n
        self._free = [0] * n
        self._squat = [0] * n
        # integrals in the open hour (GPU-seconds) and the time each node was last integrated
        self._last = [self.start] * n
        self._i_owed = [0.0] * n
        self._i_ask = [0.0] * n
        self._i_run = [0.0] * n
        self._i_free = [0.0] * n
        self._i_squat = [0.0] * n
        # whole-run sums of owed and attained (GPU-hours) per node
        self.owed_total = [0.0] * n
        self.attained_total = [0.0] * n
        # cluster signals
        self._t = self.start
        self._hour_start = self.start
        self._assigned = 0
        self._unalloc = 0
        self._squat_all = 0
        self.pending = 0
        self.running = 0
        self._h_healthy = 0.0
        self._h_assigned = 0.0
        self._h_unalloc = 0.0
        self._h_squat = 0.0
        self._h_starts = 0
        self._h_preempts = 0
        self._h_by_reason = dict.fromkeys(PREEMPT_REASONS, 0)
        # GPUs asked for by all pending and running work (allocated or not), its integral in
        # the open hour, and one (outstanding / healthy, span) sample per closed hour
        self._outstanding = 0
        self._h_outstanding = 0.0
        self._h_abandoned = 0
        self.outstanding_samples: list[tuple[float, float]] = []

    # ---- integration ---------------------------------------------------------------
    def advance(self, t: float) -> None:
        """Integrate the cluster signals up to ``t`` (call before changing anything at t)."""
        dt = t - self._t
        if dt > 0:
            self._h_healthy += self.healthy * dt
            self._h_assigned += self._assigned * dt
            self._h_unalloc += self._unalloc * dt
            self._h_squat += self._squat_all * dt
            self._h_outstanding += self._outstanding * dt
            self._t = t

    def _touch(self, i: int, t: float) -> None:
        dt = t - self._last[i]
        if dt > 0:
            ask = self._ask[i]
            cap = self._share[i] * self.healthy
            self._i_owed[i] += (ask if ask < cap else cap) * dt
            self._i_ask[i] += ask * dt
            self._i_run[i] += self._run[i] * dt
            self._i_free[i] += self._free[i] * dt
            self._i_squat[i] += self._squat[i] * dt
            self._last[i] = t

    def _touch_all(self, t: float) -> None:
        for i in range(len(self.nodes)):
            self._touch(i, t)

    # ---- signal changes (the engine calls these) -----------------------------------
    def _work(self, budget: str, t: float, ask: int, run: int, free: int, squat: int) -> None:
        self.advance(t)
        for i in self._chain[budget]:
            self._touch(i, t)
            self._ask[i] += ask
            self._run[i] += run
            self._free[i] += free
            self._squat[i] += squat

    def queued(self, budget: str, gpus: int, allocated: bool, t: float) -> None:
        """A new submission entered the queue."""
        self.advance(t)
        self.pending += 1
        self._outstanding += gpus
        if allocated:
            self._work(budget, t, gpus, 0, 0, 0)

    def started(self, budget: str, gpus: int, allocated: bool, squat: bool, t: float) -> None:
        """A workload started, holding ``gpus`` (whole hosts may hold more than it asked)."""
        self.advance(t)
        self.pending -= 1
        self.running += 1
        self._h_starts += 1
        self._assigned += gpus
        if not allocated:
            self._unalloc += gpus
        if squat:
            self._squat_all += gpus
        self._work(
            budget, t, 0, gpus if allocated else 0, 0 if allocated else gpus, gpus if squat else 0
        )

    def stopped(
        self, budget: str, gpus: int, asked: int, allocated: bool, squat: bool, t: float,
        requeued: bool, reason: PreemptReason | None,
    ) -> None:
        """A running workload holding ``gpus`` (it asked for ``asked``) ended (completed,
        preempted, lost) or went back to the queue; ``reason`` is why it was preempted or
        killed, None when it was not (it completed or timed out)."""
        self.advance(t)
        self.running -= 1
        if requeued:
            self.pending += 1
        else:
            self._outstanding -= asked
        if reason is not None:
            self._h_preempts += 1
            self._h_by_reason[reason.value] += 1
        self._assigned -= gpus
        if not allocated:
            self._unalloc -= gpus
        if squat:
            self._squat_all -= gpus
        self._work(
            budget, t,
            0 if requeued or not allocated else -asked,
            -gpus if allocated else 0,
            0 if allocated else -gpus,
            -gpus if squat else 0,
        )

    def withdrawn(self, budget: str, gpus: int, allocated: bool, t: float) -> None:
        """A pending workload asking for ``gpus`` left the queue without running
        (abandoned by its owner): it stops asking at ``t``."""
        self.advance(t)
        self.pending -= 1
        self._outstanding -= gpus
        self._h_abandoned += 1
        if allocated:
            self._work(budget, t, -gpus, 0, 0, 0)

    def change_healthy(self, delta: int, t: float) -> None:
        self.advance(t)
        self._touch_all(t)
        self.healthy += delta

    # ---- hours -----------------------------------------------------------------------
    def close_hour(self, t: float) -> None:
        """Close the bin ``[hour start, t)``: append its rows and start the next one."""
        self.advance(t)
        span = t - self._hour_start
        if span <= 0:
            return
        hour = int(round((self._hour_start - self.start) / HOUR))
        span_h = span / HOUR
        healthy_avg = self._h_healthy / span
        capacity_s = self.capacity(t)
        charged = self.charged
        healthy = self.healthy
        rows = self.budget_rows
        last, share = self._last, self._share
        ask_, run_, free_, squat_ = self._ask, self._run, self._free, self._squat
        i_owed, i_ask, i_run = self._i_owed, self._i_ask, self._i_run
        i_free, i_squat = self._i_free, self._i_squat
        for i, path in enumerate(self.nodes):
            dt = t - last[i]  # the lazy integration of _touch, inlined: this loop is hot
            if dt > 0:
                ask = ask_[i]
                cap = share[i] * healthy
                i_owed[i] += (ask if ask < cap else cap) * dt
                i_ask[i] += ask * dt
                i_run[i] += run_[i] * dt
                i_free[i] += free_[i] * dt
                i_squat[i] += squat_[i] * dt
                last[i] = t
            owed = i_owed[i] / HOUR
            run = i_run[i] / HOUR
            attained = run if run < owed else owed
            self.owed_total[i] += owed
            self.attained_total[i] += attained
            charged_s = charged(t, path)
            ratio: float | str = (
                usage_ratio(charged_s, share[i], capacity_s) if capacity_s > 0 else ""
            )
            rows.append((
                hour, span_h, path, self._depth[i], int(self._leaf[i]), share[i],
                healthy_avg, i_ask[i] / span, owed, run, attained,
                i_free[i] / HOUR, i_squat[i] / HOUR, charged_s / HOUR, ratio,
            ))
            i_owed[i] = i_ask[i] = i_run[i] = i_free[i] = i_squat[i] = 0.0
        self.cluster_rows.append((
            hour, span_h, self.total_gpus, healthy_avg, self._h_assigned / span,
            (self._h_assigned - self._h_unalloc) / span, self._h_unalloc / span,
            self._h_squat / span, self.pending, self.running, self._h_starts, self._h_preempts,
            self._h_outstanding / span, self._h_abandoned, *self._h_by_reason.values(),
        ))
        if self._h_healthy > 0:
            self.outstanding_samples.append((self._h_outstanding / self._h_healthy, span_h))
        tot = self.totals
        tot.healthy += self._h_healthy
        tot.assigned += self._h_assigned
        tot.unallocated += self._h_unalloc
        tot.squat += self._h_squat
        self._h_healthy = self._h_assigned = self._h_unalloc = self._h_squat = 0.0
        self._h_outstanding = 0.0
        self._h_starts = self._h_preempts = self._h_abandoned = 0
        self._h_by_reason = dict.fromkeys(PREEMPT_REASONS, 0)
        self._hour_start = t

    def outstanding_ratio(self) -> dict[str, float | None]:
        """Hourly samples of GPUs asked for by pending and running work over healthy GPUs
        (each hour's time averages): the mean weighted by hour length, and p10/p50/p90."""
        if not self.outstanding_samples:
            return {"mean": None, "p10": None, "p50": None, "p90": None}
        values = np.array([v for v, _ in self.outstanding_samples])
        spans = np.array([s for _, s in self.outstanding_samples])
        p10, p50, p90_ = np.percentile(values, [10, 50, 90])
        return {"mean": float(np.average(values, weights=spans)), "p10": float(p10),
                "p50": float(p50), "p90": float(p90_)}

    # ---- attainment ------------------------------------------------------------------
    def attainment(self, team_depth: int = 2) -> dict[str, object]:
        """Per node; overall, owed-weighted over the leaves (researchers) and over the teams;
        the worst team and the worst leaf."""
        per: dict[str, float | None] = {}
        for i, path in enumerate(self.nodes):
            owed = self.owed_total[i]
            per[path] = self.attained_total[i] / owed if owed > 1e-9 else None
        leaves = [i for i, leaf in enumerate(self._leaf) if leaf]
        owed_leaves = sum((self.owed_total[i] for i in leaves), 0.0)
        overall = (
            sum((self.attained_total[i] for i in leaves), 0.0) / owed_leaves if owed_leaves > 1e-9
            else None
        )
        teams = {
            p: v for i, p in enumerate(self.nodes)
            if (self._depth[i] == team_depth or (self._leaf[i] and self._depth[i] < team_depth))
            and (v := per[p]) is not None
        }
        team_ids = [i for i, p in enumerate(self.nodes) if p in teams]
        owed_teams = sum((self.owed_total[i] for i in team_ids), 0.0)
        overall_teams = (
            sum((self.attained_total[i] for i in team_ids), 0.0) / owed_teams if owed_teams > 1e-9
            else None
        )
        leaf_values = {self.nodes[i]: per[self.nodes[i]] for i in leaves}
        known = {p: v for p, v in leaf_values.items() if v is not None}
        worst_team = min(teams, key=lambda p: (teams[p], p)) if teams else None
        worst_leaf = min(known, key=lambda p: (known[p], p)) if known else None
        return {
            "overall": overall,
            "overall_teams": overall_teams,
            "min": teams[worst_team] if worst_team else None,
            "min_budget": worst_team,
            "min_leaf": known[worst_leaf] if worst_leaf else None,
            "min_leaf_budget": worst_leaf,
            "teams": len(teams),
            "teams_ge_95": sum(1 for v in teams.values() if v >= 0.95 - 1e-12),
            "per_budget": per,
        }


def p90(values: Sequence[float]) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), 90)) if values else None


def ratio(num: float, den: float) -> float | None:
    """``num / den``, or None when the denominator is 0 (nothing to measure)."""
    return num / den if den > 0 and not math.isnan(den) else None
