"""Latency of one ``decide`` pass on a large, full cluster (CPU time of this process, so a
busy neighbour on a shared machine does not inflate it).

The setting of the target: 128 hosts x 8 GPUs, 150 leaf budgets (4 programs, 15 teams),
10,000 pending workloads and as many running ones as the GPUs can hold (2,000 running
workloads of at least one GPU each cannot fit on 1,024 GPUs: the cluster is filled with
one- and two-GPU work, the worst case for the victim search, which looks at every one).
A week of usage history is in the ledger, so the usage ratios are realistic.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from apportion import core_build
from apportion.bench.replay import peak_rss_mb
from apportion.core import (
    BudgetNode,
    BudgetTree,
    ClusterState,
    Decisions,
    Host,
    PolicyConfig,
    Slice,
    WorkloadSpec,
    decide,
)
from apportion.core.fleet import FleetConfig, FleetState, decide_fleet

DAY = 86400.0


@dataclass(frozen=True)
class DecideBench:
    hosts: int
    pools: int  # 1, or 3 (a fleet: see POOLS)
    gpus_per_host: int
    budgets: int
    running: int
    submitted: int  # pending workloads submitted (--pending)
    pending: int  # pending while the passes are timed: less what settling started, plus
    # what it requeued
    passes: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    starts: int
    preemptions: int
    first_pass_ms: float
    first_pass_preemptions: int
    settle_rounds: int
    core_build: str  # "compiled" or "python": which build of apportion.core was timed
    build_s: float  # CPU seconds to build the state (history, fill, pending) and settle it
    peak_rss_mb: float  # the process's peak resident memory (getrusage ru_maxrss)


# ``--pools 3``: the same hosts as three pools, (cluster, kind, share of the hosts), billed
# as the simulator's fleet scenario
POOLS = (("east", "H100", 0.5), ("west", "B200", 0.375), ("north", "B300", 0.125))


def _fleet(tree: BudgetTree, hosts: list[Host]) -> FleetState:
    fleet = FleetState(tree, FleetConfig(billing={"H100": 1.0, "B200": 2.2, "B300": 3.3}))
    bounds, acc = [], 0.0
    for cluster, kind, part in POOLS:
        acc += part
        bounds.append((round(acc * len(hosts)), cluster, kind))
    for i, h in enumerate(hosts):
        _, cluster, kind = next(b for b in bounds if i < b[0])
        fleet.add_host(h, cluster, kind, 0.0)
    return fleet


def _kinds(rng: random.Random) -> tuple[str, ...]:
    """Any kind (35%), one (45%), two (20%)."""
    r, kinds = rng.random(), [k for _, k, _ in POOLS]
    if r < 0.35:
        return ()
    if r < 0.80:
        return (rng.choice(kinds),)
    return tuple(rng.sample(kinds, 2))


def build_state(
    hosts: int = 128, gpus_per_host: int = 8, pending: int = 10_000, seed: int = 0,
    pools: int = 1,
) -> ClusterState:
    """The benchmark's state; ``pools=3``: a :class:`FleetState` of the same hosts in three
    pools (:data:`POOLS`), the pending work asking for a kind, two or any (the same work
    otherwise: the kinds are drawn from a random stream of their own)."""
    if pools not in (1, 3):
        raise ValueError(f"pools: 1 or 3, got {pools}")
    rng = random.Random(seed)
    kinds_rng = random.Random(seed + 1)
    nodes: list[BudgetNode] = []
    programs = [("p0", 4.0), ("p1", 3.0), ("p2", 2.0), ("p3", 1.0)]
    leaves: list[str] = []
    team = 0
    for prog, w in programs:
        nodes.append(BudgetNode(prog, w))
        for _ in range(4 if prog != "p3" else 3):  # 15 teams
            tname = f"{prog}/t{team:02d}"
            nodes.append(BudgetNode(tname, rng.uniform(1, 5)))
            for r in range(10):  # 150 researchers
                leaf = f"{tname}/r{r}"
                nodes.append(BudgetNode(leaf, rng.uniform(0.5, 2)))
                leaves.append(leaf)
            team += 1
    tree = BudgetTree.build(nodes)
    now = 7 * DAY
    host_list = [Host(f"h{i:03d}", gpus_per_host) for i in range(hosts)]
    # a FleetState has every method of ClusterState this builder and the pass loop use
    st = ClusterState(tree, host_list) if pools == 1 else cast(ClusterState,
                                                                _fleet(tree, host_list))
    # a week of history: short allocated runs spread over the budgets, replayed in time order
    events: list[tuple[float, int, WorkloadSpec | str]] = []
    t = 0.0
    seq = 0
    while t < now - 4 * 3600:
        spec = WorkloadSpec(f"hist{seq}", rng.choice(leaves), rng.choice([1, 2, 4, 8]), 3600.0, t)
        events.append((t, 1, spec))
        events.append((t + rng.uniform(600, 3600), 0, spec.id))
        t += rng.uniform(20, 120)
        seq += 1
    events.sort(key=lambda e: (e[0], e[1]))
    used = [0] * hosts
    where: dict[str, tuple[int, int]] = {}
    for at, _, item in events:
        if isinstance(item, str):
            h, g = where.pop(item)
            used[h] -= g
            st.finish(item, at)
            continue
        h = min(range(hosts), key=lambda i: used[i])
        if used[h] + item.gpus > gpus_per_host:
            continue
        st.submit(item, at)
        st.start(item.id, (Slice(f"h{h:03d}", item.gpus),), at)
        used[h] += item.gpus
        where[item.id] = (h, item.gpus)
    for wid in list(where):
        st.finish(wid, st.time)
    t = max(st.time, now - 4 * 3600)
    # fill the cluster: one- and two-GPU work, a fifth unallocated, started over the last 4 h
    run_id = 0
    for h in range(hosts):
        free = gpus_per_host
        while free > 0:
            g = min(free, rng.choice([1, 1, 2]))
            unalloc = rng.random() < 0.2
            spec = WorkloadSpec(
                f"run{run_id}",
                rng.choice(leaves),
                g,
                0.0 if unalloc else rng.choice([900.0, 3600.0, 4 * 3600.0]),
                t,
                resumable=rng.random() < 0.7,
            )
            st.submit(spec, t)
            st.start(spec.id, (Slice(f"h{h:03d}", g),), t)
            t = min(now, t + rng.uniform(0, 30))
            run_id += 1
            free -= g
    for i in range(pending):
        g = rng.choice([1, 1, 2, 4, 8, 8, 16, 32, 64])
        unalloc = rng.random() < 0.2
        spec = WorkloadSpec(
            f"pend{i}",
            rng.choice(leaves),
            g,
            0.0 if unalloc else rng.choice([600.0, 3600.0, 4 * 3600.0, 8 * 3600.0]),
            now - rng.uniform(0, DAY),
            priority=rng.choice([0, 0, 0, 1]),
            resumable=rng.random() < 0.6,
        )
        if pools > 1:
            spec = replace(spec, gpu_kinds=_kinds(kinds_rng))
        st.submit(spec, st.time)
    st.advance(now)
    return st


def _policy(state: ClusterState) -> Callable[[ClusterState, float, PolicyConfig], Decisions]:
    return cast(Any, decide_fleet) if isinstance(state, FleetState) else decide


def settle(state: ClusterState, config: PolicyConfig, rounds: int = 40) -> tuple[int, float, int]:
    """Apply decisions (preemptions at once, as the simulator does) until a pass is quiet.
    Returns (rounds, first pass ms, first pass preemptions): the first pass on the random
    fill is a worst case, a full rebalance of the whole cluster."""
    now = state.time
    first_ms, first_pre = 0.0, 0
    policy = _policy(state)
    for i in range(rounds):
        t0 = time.process_time()
        d = policy(state, now, config)
        if i == 0:
            first_ms, first_pre = (time.process_time() - t0) * 1000, len(d.preemptions)
        if d.empty():
            return i, first_ms, first_pre
        for c in d.host_changes:
            state.set_host_state(c.host, c.to, now)
        for p in d.preemptions:
            if p.requeue:
                state.requeue(p.workload, now)
            else:
                state.finish(p.workload, now)
        for r in d.reservations:
            state.reserve(r.workload, r.hosts)
        for s in d.starts:
            state.start(s.workload, s.placement, now)
    return rounds, first_ms, first_pre


def run(passes: int = 50, pending: int = 10_000, seed: int = 0, pools: int = 1,
        config: PolicyConfig | None = None) -> DecideBench:
    t0 = time.process_time()
    state = build_state(pending=pending, seed=seed, pools=pools)
    policy = _policy(state)
    config = config or PolicyConfig()
    rounds, first_ms, first_pre = settle(state, config)
    build_s = time.process_time() - t0
    now = state.time
    times: list[float] = []
    last = None
    for i in range(passes):
        t0 = time.process_time()
        last = policy(state, now + i, config)
        times.append((time.process_time() - t0) * 1000)
    times.sort()
    assert last is not None
    return DecideBench(
        hosts=len(state.hosts),
        pools=pools,
        gpus_per_host=8,
        budgets=len(state.tree.leaves),
        running=len(state.running),
        submitted=pending,
        pending=len(state.pending),
        passes=passes,
        p50_ms=statistics.median(times),
        p99_ms=times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))],
        max_ms=times[-1],
        starts=len(last.starts),
        preemptions=len(last.preemptions),
        first_pass_ms=first_ms,
        first_pass_preemptions=first_pre,
        settle_rounds=rounds,
        core_build=core_build(),
        build_s=build_s,
        peak_rss_mb=peak_rss_mb(),
    )
