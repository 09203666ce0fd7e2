"""Hypothesis strategies: budget trees, clusters, workload streams, whole scenarios."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from apportion.core import BudgetNode, BudgetTree, Host, WorkloadSpec

from .helpers import HOUR, HostEvent, Job

# Moderate example counts, no deadline (the machine is shared), derandomized so that every CI
# run explores the same examples (a failure is reproducible, never flaky).
CORE_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Tests that drive a whole scenario through time (hundreds of passes per example).
DRIVEN_SETTINGS = settings(CORE_SETTINGS, max_examples=75)

WEIGHTS = st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0, 5.0])
MIN_RUNTIMES = st.sampled_from([60.0, 900.0, HOUR, 2 * HOUR, 4 * HOUR, 8 * HOUR])


@st.composite
def budget_trees(draw: st.DrawFn, max_depth: int = 4, max_leaves: int = 8) -> BudgetTree:
    """Random trees of 1-4 levels with random weights (at most ``max_leaves`` leaves)."""
    depth = draw(st.integers(1, max_depth))
    nodes: list[BudgetNode] = []
    leaves = 0

    def grow(prefix: str, level: int) -> None:
        nonlocal leaves
        n = draw(st.integers(1, 3))
        for i in range(n):
            path = f"{prefix}/{'abc'[i]}{level}" if prefix else f"{'xyz'[i]}"
            nodes.append(BudgetNode(path, draw(WEIGHTS)))
            room = leaves + (n - i) < max_leaves
            if level < depth and room and draw(st.booleans()):
                grow(path, level + 1)
            else:
                leaves += 1

    grow("", 1)
    return BudgetTree.build(nodes)


@st.composite
def clusters(
    draw: st.DrawFn, min_hosts: int = 1, max_hosts: int = 12, uniform: bool = False
) -> list[Host]:
    """1-12 hosts of 4 or 8 GPUs (``uniform``: all the same size)."""
    n = draw(st.integers(min_hosts, max_hosts))
    if uniform:
        size = draw(st.sampled_from([4, 8]))
        return [Host(f"h{i:02d}", size) for i in range(n)]
    return [Host(f"h{i:02d}", draw(st.sampled_from([4, 8]))) for i in range(n)]


@st.composite
def jobs(
    draw: st.DrawFn,
    leaves: tuple[str, ...],
    hosts: list[Host],
    horizon: float = 12 * HOUR,
    max_jobs: int = 30,
    limits: bool = False,
) -> list[Job]:
    """A workload stream: allocated and unallocated, debug, multi-host, priorities,
    resumable or not, with true durations (some shorter than their minimum runtime).
    ``limits``: some work also has a time limit, some may use only some hosts."""
    max_size = max(h.gpus for h in hosts)
    total = sum(h.gpus for h in hosts)
    sizes = sorted({g for g in (1, 2, 4, 8, 16, 24, 32) if g <= max_size or g <= total})
    n = draw(st.integers(1, max_jobs))
    out: list[Job] = []
    for i in range(n):
        unallocated = draw(st.integers(0, 3)) == 0
        debug = not unallocated and draw(st.integers(0, 4)) == 0
        if debug:
            gpus = draw(st.sampled_from([g for g in sizes if g <= 8]))
            min_runtime = draw(st.sampled_from([60.0, 300.0, 900.0]))
        else:
            gpus = draw(st.sampled_from(sizes))
            min_runtime = 0.0 if unallocated else draw(MIN_RUNTIMES)
        spec = WorkloadSpec(
            f"w{i:02d}",
            draw(st.sampled_from(leaves)),
            gpus,
            min_runtime,
            float(draw(st.integers(0, int(horizon) // 600)) * 600),
            resumable=draw(st.booleans()),
            priority=draw(st.integers(0, 2)),
            checkpoint_interval=draw(st.sampled_from([0.0, 600.0, 1800.0])),
            checkpoint_on_term=draw(st.booleans()),
        )
        duration = float(draw(st.sampled_from([300, 1800, 3600, 3 * 3600, 6 * 3600, 20 * 3600])))
        if limits:
            spec = replace(spec, time_limit=draw(time_limits(spec.min_runtime)),
                           hosts=draw(host_limits(hosts, gpus)))
        out.append(Job(spec, duration))
    return out


@st.composite
def time_limits(draw: st.DrawFn, min_runtime: float) -> float:
    """No limit half the time, else one no shorter than the minimum runtime."""
    if draw(st.booleans()):
        return 0.0
    return max(min_runtime, float(draw(st.sampled_from([600, 1800, 3600, 4 * 3600]))))


@st.composite
def host_limits(draw: st.DrawFn, hosts: list[Host], gpus: int) -> tuple[str, ...]:
    """Any host most of the time, else a random subset that can hold ``gpus`` by the shape
    rule (one host that large, or enough whole hosts), or any host when the subset cannot."""
    if draw(st.integers(0, 3)) != 0:
        return ()
    chosen = draw(st.sets(st.sampled_from(hosts), min_size=1))
    sizes = [h.gpus for h in chosen]
    one_host = gpus <= max(h.gpus for h in hosts)
    if (one_host and gpus > max(sizes)) or (not one_host and gpus > sum(sizes)):
        return ()
    return tuple(sorted(h.name for h in chosen))


@st.composite
def host_events(draw: st.DrawFn, hosts: list[Host], horizon: float = 12 * HOUR) -> list[HostEvent]:
    """A few drains, failures and repairs."""
    n = draw(st.integers(0, 3))
    out = []
    for _ in range(n):
        out.append(
            HostEvent(
                float(draw(st.integers(1, int(horizon) // 600)) * 600),
                draw(st.sampled_from([h.name for h in hosts])),
                draw(st.sampled_from(["drain", "drain", "fail", "repair"])),
            )
        )
    return out


@dataclass(frozen=True)
class Scenario:
    tree: BudgetTree
    hosts: list[Host]
    jobs: list[Job]
    host_events: list[HostEvent]


@st.composite
def scenarios(
    draw: st.DrawFn,
    max_jobs: int = 30,
    events: bool = True,
    horizon: float = 12 * HOUR,
    limits: bool = False,
) -> Scenario:
    tree = draw(budget_trees())
    hosts = draw(clusters())
    js = draw(jobs(tree.leaves, hosts, horizon=horizon, max_jobs=max_jobs, limits=limits))
    evs = draw(host_events(hosts, horizon)) if events else []
    return Scenario(tree, hosts, js, evs)


@st.composite
def contended_scenarios(draw: st.DrawFn) -> Scenario:
    """Scenarios where whole-host rebalancing happens: a few same-size hosts, many jobs."""
    tree = draw(budget_trees())
    hosts = draw(clusters(min_hosts=3, max_hosts=6, uniform=True))
    return Scenario(tree, hosts, draw(jobs(tree.leaves, hosts, max_jobs=40)), [])
