"""Simulating a fleet: several clusters and GPU kinds under one budget tree.

A scenario with :attr:`~apportion.sim.model.Scenario.pools` runs on a
:class:`~apportion.core.fleet.FleetState` instead of one ``ClusterState``. The two policies
become fleet policies here: fair share is :func:`~apportion.core.fleet.decide_fleet`; the old
scheduler runs one :class:`~apportion.sim.legacy.LegacyPolicy` per pool (its caps are each
team's share of that pool), pools in name order, and work accepting several pools goes to
the first whose pass starts it (or preempts for it). Both record per-pool figures
(:class:`PoolMeter`) through the engine's ``observe`` hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np

from apportion.core import Decisions, HostState, PolicyConfig, WorkloadSpec, ancestors
from apportion.core.fleet import FleetConfig, FleetState, decide_fleet
from apportion.text import as_written

from .legacy import LegacyPolicy
from .metrics import percentiles, team_of
from .model import Pools, Scenario, SimJob

HOUR = 3600.0
# the built-in `fleet` scenario: (cluster, kind, GPUs), hosts of 8
FLEET_POOLS = (("east", "H100", 1024), ("west", "B200", 512), ("north", "B300", 88))
FLEET_BILLING = {"H100": 1.0, "B200": 2.2, "B300": 3.3}


def fleet_state(sc: Scenario, ledger_keep: float) -> FleetState:
    """The fleet of a scenario with pools, every host healthy at time 0."""
    assert sc.pools is not None
    fleet = FleetState(sc.tree, sc.pools.config, start=0.0, ledger_keep=ledger_keep)
    for h in sc.hosts:
        cluster, kind = sc.pools.of_host[h.name]
        fleet.add_host(h, cluster, kind, 0.0)
    return fleet


def fleet_validate(spec: WorkloadSpec, state: Any, config: PolicyConfig) -> None:
    state.validate(spec, config)


class PoolMeter:
    """Per pool: healthy GPU-seconds, GPU-seconds assigned (allocated and unallocated), the
    waits of work started there, the units charged, and each team's attainment there; and
    the same for the whole fleet.

    Attainment in a pool, per team (the first two levels of a budget path), hour by hour:
    owed = min(team's share of the pool x the pool's healthy GPUs, GPUs its allocated work
    asked of the pool: running there, or pending and accepting it), delivered = GPUs of its
    allocated work running there, each averaged over the hour; attainment = sum of
    min(delivered, owed) / sum of owed. Work accepting several pools is asked of each.

    Per budget node and pool (:meth:`budgets`): GPU-hours delivered to its subtree's
    allocated work there, the waits of its work that started there (teams and leaves, as the
    run's ``wait_s.per_budget``) and the preemptions of its subtree's work running there."""

    def __init__(self) -> None:
        self.fleet: FleetState | None = None
        self._queued: dict[str, float] = {}
        # running id -> pool, GPUs, allocated, started at, team, budget
        self._running: dict[str, tuple[str, int, bool, float, str, str]] = {}
        self._healthy: dict[str, int] = {}  # pool -> healthy GPUs now
        self._since: dict[str, float] = {}  # pool -> when _healthy last changed
        self.healthy_s: dict[str, float] = {}
        self.alloc_s: dict[str, float] = {}
        self.unalloc_s: dict[str, float] = {}
        self.waits: dict[str, list[float]] = {}
        # per (pool, leaf budget): allocated GPU-seconds of ended runs, waits, preemptions
        self.budget_alloc_s: dict[tuple[str, str], float] = {}
        self.budget_waits: dict[tuple[str, str], list[float]] = {}
        self.budget_preemptions: dict[tuple[str, str], int] = {}
        self._host_state: dict[str, HostState] = {}
        # attainment: GPUs asked and running per (pool, team) now, their GPU-seconds and the
        # pool's healthy GPU-seconds in the open hour, and the closed hours' sums
        self._asks: dict[str, tuple[str, int, tuple[str, ...]]] = {}  # pending: team, gpus, pools
        self._ask: dict[tuple[str, str], int] = {}
        self._run: dict[tuple[str, str], int] = {}
        self._hour = 0.0  # start of the open hour
        self._at = 0.0  # time the open hour's integrals reach
        self._ask_s: dict[tuple[str, str], float] = {}
        self._run_s: dict[tuple[str, str], float] = {}
        self._hour_healthy_s: dict[str, float] = {}
        self.owed_h: dict[tuple[str, str], float] = {}
        self.got_h: dict[tuple[str, str], float] = {}

    def observe(self, kind: str, name: str, fleet: FleetState) -> None:
        self.fleet = fleet
        now = fleet.time
        self._advance(now)
        if kind == "host":
            pool = fleet.pool_of(name)
            host = fleet.pools[pool].hosts[name]
            was = self._host_state.get(name)
            self._host_state[name] = host.state
            if (was is HostState.HEALTHY) != (host.state is HostState.HEALTHY):
                self._tick(pool, now)
                sign = 1 if host.state is HostState.HEALTHY else -1
                self._healthy[pool] = self._healthy.get(pool, 0) + sign * host.gpus
        elif kind == "queued":
            self._queued[name] = now
            pools = fleet.waits_in(name)
            spec = fleet.pools[pools[0]].pending[name].spec
            if spec.allocated:
                team = team_of(spec.budget)
                self._asks[name] = (team, spec.gpus, pools)
                for p in pools:
                    self._ask[p, team] = self._ask.get((p, team), 0) + spec.gpus
        elif kind == "unqueued":
            self._queued.pop(name, None)
            self._unask(name)
        elif kind == "started":
            run = fleet.runs_in(name)
            assert run is not None
            r = fleet.pools[run].running[name]
            wait = now - self._queued.pop(name, now)
            self.waits.setdefault(run, []).append(wait)
            self.budget_waits.setdefault((run, r.spec.budget), []).append(wait)
            self._running[name] = (run, r.gpus_held, r.spec.allocated, now,
                                   team_of(r.spec.budget), r.spec.budget)
            self._unask(name)
            if r.spec.allocated:
                key = (run, team_of(r.spec.budget))
                self._run[key] = self._run.get(key, 0) + r.gpus_held
                self._ask[key] = self._ask.get(key, 0) + r.gpus_held
        elif kind == "ended":
            pool, gpus, allocated, t0, team, budget = self._running.pop(name)
            into = self.alloc_s if allocated else self.unalloc_s
            into[pool] = into.get(pool, 0.0) + gpus * (now - t0)
            if allocated:
                key = (pool, budget)
                self.budget_alloc_s[key] = self.budget_alloc_s.get(key, 0.0) + gpus * (now - t0)
                self._run[pool, team] -= gpus
                self._ask[pool, team] -= gpus

    def preempted(self, name: str) -> None:
        """Running workload ``name`` is being preempted (any reason, a host's death too),
        before its ``ended``."""
        pool, *_, budget = self._running[name]
        key = (pool, budget)
        self.budget_preemptions[key] = self.budget_preemptions.get(key, 0) + 1

    def _unask(self, name: str) -> None:
        asked = self._asks.pop(name, None)
        if asked is not None:
            team, gpus, pools = asked
            for p in pools:
                self._ask[p, team] -= gpus

    def _advance(self, now: float) -> None:
        """Integrate the open hour up to ``now``, closing every hour that ended before."""
        while now >= self._hour + HOUR:
            self._integrate(self._hour + HOUR)
            self._close_hour()
        self._integrate(now)

    def _integrate(self, t: float) -> None:
        dt = t - self._at
        if dt <= 0:
            return
        for key, g in self._ask.items():
            if g:
                self._ask_s[key] = self._ask_s.get(key, 0.0) + g * dt
        for key, g in self._run.items():
            if g:
                self._run_s[key] = self._run_s.get(key, 0.0) + g * dt
        for pool, g in self._healthy.items():
            self._hour_healthy_s[pool] = self._hour_healthy_s.get(pool, 0.0) + g * dt
        self._at = t

    def _close_hour(self) -> None:
        fleet = self.fleet
        span = self._at - self._hour
        if fleet is not None and span > 0:
            for key, asked in self._ask_s.items():
                pool, team = key
                tree = fleet.pools[pool].tree
                share = tree.share(team) if team in tree else 0.0
                owed = min(share * self._hour_healthy_s.get(pool, 0.0), asked) / span
                if owed > 0:
                    got = min(self._run_s.get(key, 0.0) / span, owed)
                    self.owed_h[key] = self.owed_h.get(key, 0.0) + owed * span / HOUR
                    self.got_h[key] = self.got_h.get(key, 0.0) + got * span / HOUR
        self._ask_s, self._run_s, self._hour_healthy_s = {}, {}, {}
        self._hour = self._at

    def _tick(self, pool: str, now: float) -> None:
        self.healthy_s[pool] = self.healthy_s.get(pool, 0.0) + self._healthy.get(pool, 0) * (
            now - self._since.get(pool, 0.0))
        self._since[pool] = now

    def summary(self, end: float) -> dict[str, Any]:
        """``{pool: figures, ..., "fleet": figures}``; GPU-hours and units to ``end``."""
        fleet = self.fleet
        assert fleet is not None
        self._advance(end)
        self._close_hour()
        alloc, unalloc = dict(self.alloc_s), dict(self.unalloc_s)
        for pool, gpus, allocated, t0, _, _ in self._running.values():
            into = alloc if allocated else unalloc
            into[pool] = into.get(pool, 0.0) + gpus * (end - t0)
        for pool in fleet.pools:
            self._tick(pool, end)
        budgets = self.budgets(end)
        out: dict[str, Any] = {}
        for pool, state in fleet.pools.items():
            cluster, kind = fleet.where(pool)
            out[pool] = _figures(
                cluster, kind, state.billing, sum(h.gpus for h in state.hosts.values()),
                self.healthy_s.get(pool, 0.0), alloc.get(pool, 0.0), unalloc.get(pool, 0.0),
                self.waits.get(pool, []))
            out[pool]["attainment"] = self._attainment({pool})
            out[pool]["preemptions"] = sum(n for (p, _), n in self.budget_preemptions.items()
                                           if p == pool)
            out[pool]["budgets"] = budgets.get(pool, {})
        out["fleet"] = _figures(
            "", "", None, sum(f["gpus"] for f in out.values()),
            sum(self.healthy_s.values()), sum(alloc.values()), sum(unalloc.values()),
            [w for ws in self.waits.values() for w in ws],
            units=sum(f["charged_units"] for f in out.values()))
        out["fleet"]["attainment"] = self._attainment(set(fleet.pools))
        return out

    def budgets(self, end: float) -> dict[str, dict[str, dict[str, Any]]]:
        """``{pool: {node: figures}}`` for the budget nodes with work started or preempted
        in that pool: ``delivered_gpu_hours`` (its subtree's allocated work there, to
        ``end``), ``wait_s`` (percentiles; teams and leaves only, as the run's per-budget
        waits, else None) and ``preemptions`` (its subtree's, there)."""
        alloc = dict(self.budget_alloc_s)
        for pool, gpus, allocated, t0, _, budget in self._running.values():
            if allocated:
                alloc[pool, budget] = alloc.get((pool, budget), 0.0) + gpus * (end - t0)
        delivered: dict[tuple[str, str], float] = {}
        preempted: dict[tuple[str, str], int] = {}
        waits: dict[tuple[str, str], list[float]] = {}
        for (pool, leaf), s in alloc.items():
            for node in ancestors(leaf)[:-1]:
                delivered[pool, node] = delivered.get((pool, node), 0.0) + s
        for (pool, leaf), n in self.budget_preemptions.items():
            for node in ancestors(leaf)[:-1]:
                preempted[pool, node] = preempted.get((pool, node), 0) + n
        for (pool, leaf), ws in self.budget_waits.items():
            for node in {team_of(leaf), leaf}:
                waits.setdefault((pool, node), []).extend(ws)
            for node in ancestors(leaf)[:-1]:  # every node above work that started
                delivered.setdefault((pool, node), 0.0)
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for pool, node in sorted(delivered.keys() | preempted.keys()):
            w = waits.get((pool, node))
            out.setdefault(pool, {})[node] = {
                "delivered_gpu_hours": delivered.get((pool, node), 0.0) / HOUR,
                "wait_s": percentiles(w) if w else None,
                "preemptions": preempted.get((pool, node), 0)}
        return out

    def _attainment(self, pools: set[str]) -> dict[str, Any]:
        """Attainment over ``pools`` (owed and received summed over them): overall, per
        team, the lowest team's, and the owed GPU-hours."""
        owed: dict[str, float] = {}
        got: dict[str, float] = {}
        for (pool, team), h in self.owed_h.items():
            if pool in pools:
                owed[team] = owed.get(team, 0.0) + h
                got[team] = got.get(team, 0.0) + self.got_h[pool, team]
        teams = {t: got[t] / h for t, h in sorted(owed.items()) if h > 0}
        total = sum(owed.values())
        return {"overall": sum(got.values()) / total if total else None, "teams": teams,
                "min_team": min(teams.values()) if teams else None, "owed_gpu_hours": total}


def _figures(cluster: str, kind: str, billing: float | None, gpus: int, healthy_s: float,
             alloc_s: float, unalloc_s: float, waits: list[float],
             units: float | None = None) -> dict[str, Any]:
    assigned = alloc_s + unalloc_s
    return {
        "cluster": cluster, "kind": kind, "billing": billing, "gpus": gpus,
        "occupancy": assigned / healthy_s if healthy_s else None,
        "unallocated_fraction": unalloc_s / assigned if assigned else None,
        "allocated_gpu_hours": alloc_s / HOUR, "unallocated_gpu_hours": unalloc_s / HOUR,
        "charged_units": alloc_s / HOUR * billing if billing is not None else units,
        "starts": len(waits), "wait_s": percentiles(waits),
    }


class FleetFairShare:
    """Fair share on a fleet: :func:`decide_fleet`, with per-pool figures."""

    def __init__(self) -> None:
        self.meter = PoolMeter()
        self._decide = partial(decide_fleet, reasons=False)

    def __call__(self, state: Any, now: float, config: PolicyConfig) -> Decisions:
        return self._decide(state, now, config)

    def observe(self, kind: str, name: str, state: Any) -> None:
        self.meter.observe(kind, name, state)

    def preempted(self, name: str) -> None:
        self.meter.preempted(name)

    def pool_summary(self, end: float) -> dict[str, Any]:
        return self.meter.summary(end)


class FleetLegacy:
    """The old scheduler on a fleet: one :class:`LegacyPolicy` per pool, over that pool's
    state, told only about the work waiting or running there. Pools are passed in name
    order; work started by one pass is withdrawn from the later ones of the same pass."""

    def __init__(self, scenario: Scenario, team_depth: int, cap_factor: float) -> None:
        assert scenario.pools is not None
        self.meter = PoolMeter()
        jobs = {j.spec.id: j for j in scenario.jobs}
        self._jobs = jobs
        sizes: dict[str, int] = {}
        for h in scenario.hosts:
            pool = "/".join(scenario.pools.of_host[h.name])
            sizes[pool] = sizes.get(pool, 0) + h.gpus
        self._tree = scenario.tree
        self._args = (team_depth, cap_factor)
        self._sizes = sizes
        self._per_pool: dict[str, LegacyPolicy] = {}
        self._waits_in: dict[str, tuple[str, ...]] = {}
        self._runs_in: dict[str, str] = {}

    def _policy(self, pool: str, fleet: FleetState) -> LegacyPolicy:
        p = self._per_pool.get(pool)
        if p is None:
            tree = fleet.pools[pool].tree
            p = self._per_pool[pool] = LegacyPolicy(
                self._jobs, tree, self._sizes[pool],
                team_depth=self._args[0], cap_factor=self._args[1])
        return p

    def observe(self, kind: str, name: str, fleet: FleetState) -> None:
        self.meter.observe(kind, name, fleet)
        if kind == "host":
            pool = fleet.pool_of(name)
            self._policy(pool, fleet).observe("host", name, fleet.pools[pool])
        elif kind == "queued":
            self._waits_in[name] = fleet.waits_in(name)
            for pool in self._waits_in[name]:
                self._policy(pool, fleet).observe("queued", name, fleet.pools[pool])
        elif kind == "unqueued":
            for pool in self._waits_in.pop(name, ()):
                self._policy(pool, fleet).observe("unqueued", name, fleet.pools[pool])
        elif kind == "started":
            run = fleet.runs_in(name)
            assert run is not None
            self._runs_in[name] = run
            for pool in self._waits_in.pop(name, ()):
                if pool != run:
                    self._policy(pool, fleet).observe("unqueued", name, fleet.pools[pool])
            self._policy(run, fleet).observe("started", name, fleet.pools[run])
        elif kind == "ended":
            run = self._runs_in.pop(name)
            self._policy(run, fleet).observe("ended", name, fleet.pools[run])

    def preempted(self, name: str) -> None:
        self.meter.preempted(name)

    def __call__(self, fleet: Any, now: float, config: PolicyConfig) -> Decisions:
        parts: list[Decisions] = []
        taken: set[str] = set()
        for pool, state in fleet.pools.items():
            policy = self._policy(pool, fleet)
            hidden = sorted(w for w in taken if pool in self._waits_in.get(w, ()))
            for w in hidden:
                policy.observe("unqueued", w, state)
            d = policy(state, now, config)
            for w in hidden:
                policy.observe("queued", w, state)
            parts.append(d)
            taken |= {s.workload for s in d.starts}
            taken |= {p.by for p in d.preemptions if p.by is not None}
        return Decisions(
            starts=tuple(s for d in parts for s in d.starts),
            preemptions=tuple(x for d in parts for x in d.preemptions),
            host_changes=tuple(c for d in parts for c in d.host_changes),
            reservations=tuple(r for d in parts for r in d.reservations),
            timeouts=tuple(t for d in parts for t in d.timeouts),
            checkpoint_waits=tuple(w for d in parts for w in d.checkpoint_waits),
        )

    def pool_summary(self, end: float) -> dict[str, Any]:
        return self.meter.summary(end)


def _kinds_for(rng: np.random.Generator, gpus: int, pools: tuple[tuple[str, str, int], ...]
               ) -> tuple[str, ...]:
    """What a workload of ``gpus`` asks for: any kind (35%), one kind, chosen in proportion
    to the fleet's GPUs of it (45%), or two kinds (20%); only kinds with enough GPUs."""
    able = [(k, g) for _, k, g in pools if g >= gpus]
    r = rng.random()
    if r < 0.35 or len(able) < 2:
        return () if len(able) == len(pools) else tuple(k for k, _ in able)
    weights = np.array([g for _, g in able], dtype=float)
    if r < 0.80:
        return (able[int(rng.choice(len(able), p=weights / weights.sum()))][0],)
    pick = rng.choice(len(able), size=2, replace=False, p=weights / weights.sum())
    return tuple(able[int(i)][0] for i in pick)


def fleet_scenario(days: float = 30, seed: int = 0) -> Scenario:
    """The built-in scenario ``fleet``: the ``seed`` organisation (15 teams, the same work
    classes and demand ratio) on 1,024 H100 in cluster east, 512 B200 in west and 88 B300 in
    north (hosts of 8), billed 1 / 2.2 / 3.3 units per GPU-second; each workload asks for
    any kind, one, or two (:func:`_kinds_for`). Deterministic for ``(days, seed)``."""
    from .scenarios import seed_scenario

    total = sum(g for _, _, g in FLEET_POOLS)
    base = seed_scenario(days=days, seed=seed, size=total)
    of_host: dict[str, tuple[str, str]] = {}
    hosts = iter(base.hosts)
    for cluster, kind, gpus in FLEET_POOLS:
        for _ in range(gpus // 8):
            of_host[next(hosts).name] = (cluster, kind)
    rng = np.random.default_rng([seed, 17])
    jobs: list[SimJob] = []
    for j in base.jobs:
        kinds = _kinds_for(rng, j.spec.gpus, FLEET_POOLS)
        jobs.append(dataclasses.replace(j, spec=dataclasses.replace(j.spec, gpu_kinds=kinds)))
    meta = dict(base.meta)
    meta["pools"] = [f"{c}/{k}: {g} GPUs" for c, k, g in FLEET_POOLS]
    return dataclasses.replace(
        base, name="fleet", jobs=tuple(jobs), meta=meta,
        pools=Pools(of_host, FleetConfig(billing=dict(FLEET_BILLING))))


POOL_COLUMNS = ("pool", "policy", "GPUs", "occupancy", "unallocated", "allocated GPU-h",
                "billed units", "attainment", "worst team", "wait p50", "wait p90")


def pool_rows(summaries: list[dict[str, Any]]) -> list[list[str]]:
    """Per pool and fleet-wide (last), one row per policy, as :data:`POOL_COLUMNS`:
    occupancy, unallocated share, GPU-hours delivered to allocated work, billed units charged
    for it, attainment (overall and of the worst team, see :class:`PoolMeter`), waits (of
    the work that started there) p50/p90."""
    rows = []
    for pool in summaries[0].get("pools", {}):
        for s in summaries:
            f = s["pools"][pool]
            w = f["wait_s"]
            rows.append([pool, str(s["policy"]), f"{f['gpus']:,}", _pct(f["occupancy"]),
                         _pct(f["unallocated_fraction"]), f"{f['allocated_gpu_hours']:,.0f}",
                         f"{f['charged_units'] or 0:,.0f}", _pct(f["attainment"]["overall"]),
                         _pct(f["attainment"]["min_team"]), _s(w.get("p50")),
                         _s(w.get("p90"))])
    return rows


def pools_table(summaries: list[dict[str, Any]]) -> str:
    """:func:`pool_rows` as a text table."""
    rows = [list(POOL_COLUMNS), *pool_rows(summaries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(POOL_COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                  for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows)


def pools_html(summaries: Any) -> str:
    """:func:`pool_rows` as an HTML table for report.html."""
    from html import escape

    head = "<tr>" + "".join(f"<th>{escape(c)}</th>" for c in POOL_COLUMNS) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>"
                   for r in pool_rows(list(summaries)))
    return ("<table>" + head + body + "</table><p class='note'>Per pool (cluster/kind) and "
            "for the whole fleet. Billed units: allocated GPU-hours times the kind's billing "
            "weight, the one unit every budget's usage is charged in. Waits: submission or "
            "requeue to start, of the work that started in that pool.</p>")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f} s" if v < 120 else f"{v / 60:.0f} min" if v < 7200 else f"{v / 3600:.1f} h"


def read_pools(items: list[Mapping[str, Any]], where: str) -> dict[str, tuple[str, str]] | None:
    """Host name -> (cluster, kind) from a host list whose entries carry ``cluster`` and
    ``kind``; ``None`` when none does (one pool, as before). Either every host names both or
    none does; the error names the file and the host."""
    named = [("cluster" in it or "kind" in it) for it in items]
    if not any(named):
        return None
    out: dict[str, tuple[str, str]] = {}
    for i, it in enumerate(items):
        host = f"{where}: host #{i + 1} ({it.get('name')})"
        if "cluster" not in it or "kind" not in it:
            raise ValueError(f"{host}: cluster and kind: every host needs both when any host "
                             "has one")
        for key in ("cluster", "kind"):  # a pool is 'cluster/kind': neither may hold a '/'
            value = it[key]
            if not (isinstance(value, str) and value.strip()) or "/" in value:
                raise ValueError(f"{host}: {key}: must be a name without '/', got "
                                 f"{as_written(value)}")
        out[str(it["name"])] = (it["cluster"], it["kind"])
    return out


__all__ = [
    "FLEET_BILLING", "FLEET_POOLS", "POOL_COLUMNS", "FleetFairShare", "FleetLegacy",
    "PoolMeter", "fleet_scenario", "fleet_state", "fleet_validate", "pool_rows", "pools_html",
    "pools_table", "read_pools",
]
