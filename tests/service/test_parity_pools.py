"""Two pools, one trace: the simulator and the live scheduler decide the same.

As tests/service/test_parity.py, on a fleet: cluster ``east`` with two H100 hosts and
cluster ``west`` with one B200 host (billed 2.2 units per GPU-second), work that asks for one
kind, for a list of kinds (preferred first) and for any, a workload bound to a cluster, and
a drain of the B200 host. The service runs with a fake clock, the in-memory executor and a
real store, stepped at exactly the moments the simulator handles; both decision logs
(``core.decision_log`` lines) must be identical.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from parity_loop import HOUR, Moments
from store_db import BACKENDS, open_store

from apportion.core import BudgetNode, BudgetTree, Host, HostState, PolicyConfig, WorkloadSpec
from apportion.core.fleet import FleetConfig, decide_fleet
from apportion.service.clock import FakeClock
from apportion.service.config import PoolsConfig
from apportion.service.executor import InventoryHost
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.sim.engine import Engine, SimConfig
from apportion.sim.model import HostEvent, HostEventKind, Pools, Scenario, SimJob

DAYS = 4 * HOUR / 86400.0
REPAIR = 1800.0
RESTART = 120.0
TREE = {"ai/llm": 2.0, "ai/vision": 1.0, "ops": 1.0}
BILLING = {"H100": 1.0, "B200": 2.2}
# name, GPUs, cluster, kind
HOSTS = (("e0", 8, "east", "H100"), ("e1", 8, "east", "H100"), ("w0", 8, "west", "B200"))

# id, t, budget, gpus, min_runtime, resumable, checkpoint, true duration, kinds, cluster
TRACE = [
    ("w-000001", 0, "ai/llm", 8, 1800, True, 600, 5000, ("B200",), ""),
    ("w-000002", 0, "ai/vision", 8, 0, True, 600, 20000, (), ""),  # unallocated, any kind
    ("w-000003", 100, "ai/vision", 8, 900, False, 0, 3000, ("H100", "B200"), ""),
    ("w-000004", 200, "ops", 8, 3600, True, 300, 6000, ("B200", "H100"), ""),
    ("w-000005", 300, "ops", 2, 600, False, 0, 500, (), ""),  # a debug workload
    ("w-000006", 400, "ai/llm", 8, 1200, True, 300, 9000, ("H100",), ""),
    ("w-000007", 2500, "ai/vision", 4, 0, True, 0, 1000, ("B200",), ""),
    ("w-000008", 4000, "ai/llm", 8, 1800, True, 900, 6000, (), "west"),
    ("w-000009", 5000, "ops", 4, 900, True, 0, 2000, ("H100", "B200"), ""),
    ("w-000010", 7300, "ai/vision", 8, 1800, True, 600, 4000, (), ""),
]
EVENTS = [HostEvent(6000.0, "w0", HostEventKind.UNHEALTHY)]


def specs() -> list[tuple[WorkloadSpec, float]]:
    return [
        (WorkloadSpec(wid, budget, gpus, float(m), float(t), user="alice", resumable=res,
                      checkpoint_interval=float(c), gpu_kinds=kinds, cluster=cluster),
         float(d))
        for wid, t, budget, gpus, m, res, c, d, kinds, cluster in TRACE
    ]


def simulate(config: PolicyConfig) -> list[str]:
    scenario = Scenario(
        name="parity-pools",
        tree=BudgetTree.build(BudgetNode(p, w) for p, w in TREE.items()),
        hosts=tuple(Host(n, g) for n, g, _, _ in HOSTS),
        jobs=tuple(SimJob(spec, d) for spec, d in specs()),
        host_events=tuple(EVENTS),
        days=DAYS,
        repair_time=REPAIR,
        pools=Pools({n: (c, k) for n, _, c, k in HOSTS}, FleetConfig(billing=BILLING)),
    )
    sim = SimConfig(restart_overhead=RESTART)
    result = Engine(scenario, decide_fleet, config, sim=sim, keep_log=True).run()
    assert result.log is not None
    return result.log


def serve(backend: str, tmp_path: Path, config: PolicyConfig) -> list[str]:
    clock = FakeClock(0.0)
    store = open_store(backend, tmp_path)
    store.clock = clock.now
    for path, weight in TREE.items():
        store.add_budget(path, weight, "admin", create_parents=True)
    for name, gpus, cluster, kind in HOSTS:
        store.add_host(name, gpus, "admin", at=0.0, cluster=cluster, kind=kind)
    trace = specs()
    executor = MemoryExecutor(
        [InventoryHost(n, g, "healthy", cluster=c, kind=k) for n, g, c, k in HOSTS], clock,
        checkpoints={s.id: s.checkpoint_interval for s, _ in trace},
        checkpoint_default=config.default_checkpoint_interval,
        restart_overhead=RESTART,
    )
    sched = Scheduler(store, executor, config, clock, grace_s=0.0,
                      pools=PoolsConfig(billing=BILLING))
    sched.start()
    moments = Moments(clock, executor, DAYS * 86400.0, REPAIR, trace, list(EVENTS))
    while moments.advance(sched):
        for ev in moments.due_host_events():
            sched.set_host_state(ev.host, HostState.DRAINING, "unhealthy", "admin")
        for name, _ in moments.due_repairs():
            sched.set_host_state(name, HostState.HEALTHY, "repaired", "admin")
        for spec, duration in moments.due_submissions():
            executor.durations[spec.id] = duration
            row = store.add_workload(
                budget=spec.budget, gpus=spec.gpus, min_runtime=spec.min_runtime,
                submit_time=moments.t, command=["train"], actor="alice",
                resumable=spec.resumable, checkpoint_interval=spec.checkpoint_interval,
                gpu_kinds=spec.gpu_kinds, cluster=spec.cluster,
            )
            assert row.id == spec.id
        moments.step(sched)
    store.close()
    return moments.log


@pytest.mark.parametrize("backend", BACKENDS)
def test_service_and_simulator_make_the_same_decisions_on_two_pools(
    backend: str, tmp_path: Path
) -> None:
    """Same trace on two pools (H100 in east, B200 in west), same policy: the live
    scheduler's decision log equals the simulator's line by line. The trace exercises what
    pools decide: work for one kind starts only on hosts of that kind, work for a list or
    any on either, work bound to a cluster only there, preemptions, and the drain and
    repair of the B200 host."""
    config = PolicyConfig()
    expected = simulate(config)
    kind_of = {n: k for n, _, _, k in HOSTS}
    asked = {s.id: s for s, _ in specs()}
    starts = [line.split() for line in expected if line.split()[1] == "start"]
    for parts in starts:
        spec = asked[parts[2]]
        host_kinds = {kind_of[sl.split(":")[0]] for sl in parts[4].split(",")}
        assert len(host_kinds) == 1, parts  # a gang never spans pools
        assert not spec.gpu_kinds or host_kinds <= set(spec.gpu_kinds), parts
        if spec.cluster == "west":
            assert host_kinds == {"B200"}, parts
    started_on = {kind_of[p[4].split(":")[0]] for p in starts}
    assert started_on == {"H100", "B200"}
    kinds = {line.split()[1] for line in expected}
    assert {"start", "preempt", "host"} <= kinds, kinds
    assert serve(backend, tmp_path, config) == expected
