"""Generated traces through the simulator and through the live scheduler give the same
decisions, host failures, drains, repairs, grace periods and server restarts included.

Each seed draws a small cluster, a few hours of workloads (sizes, minimum runtimes,
resumable or not, checkpoint intervals, true durations, all in whole seconds so that events
coincide now and then) and host events: deaths (reported by the executor, or a host marked
down by an operator), unhealthy marks (the policy drains the host) and explicit repairs. The
service runs with a fake clock, the in-memory executor (its cost model is the simulator's,
``core.consequences.preemption_cost``), a real store, a grace period drawn per seed
(workloads exit at SIGTERM at once, as the simulator assumes) and one or two server restarts:
the ``Scheduler`` is re-created on the same store and executor, and rebuilds and reconciles.
It is stepped at exactly the moments the simulator handles (see tests/service/test_parity.py)
and its decision log (``core.decision_log`` lines) must equal the simulator's; at the end, a
restart must rebuild the usage its live ledger holds.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from parity_loop import HOUR, Moments
from store_db import BACKENDS, open_store

from apportion.core import (
    BudgetNode,
    BudgetTree,
    Host,
    HostState,
    PolicyConfig,
    PreemptReason,
    WorkloadSpec,
    decide,
)
from apportion.service.clock import FakeClock
from apportion.service.executor import HostSlots, Launch
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.sim.engine import Engine, SimConfig
from apportion.sim.model import HostEvent, HostEventKind, Scenario, SimJob

SPAN = 6 * HOUR
REPAIR = 1800.0
RESTART = 120.0
TREE = {"ai/llm": 2.0, "ai/vision": 1.0, "ops": 1.0}
SEEDS = (*range(12), 55, 56, 60)  # 55, 56, 60: restarts that once diverged


@dataclass(frozen=True)
class Case:
    hosts: tuple[tuple[str, int], ...]
    jobs: tuple[tuple[WorkloadSpec, float], ...]  # spec, true duration; in submission order
    events: tuple[HostEvent, ...]
    marked_down: frozenset[float]  # times of deaths the operator reports (not the executor)
    grace_s: float
    restarts: tuple[float, ...]  # the service restarts at the first moment at or after each

    def scenario(self) -> Scenario:
        return Scenario(
            name="generated",
            tree=BudgetTree.build(BudgetNode(p, w) for p, w in TREE.items()),
            hosts=tuple(Host(n, g) for n, g in self.hosts),
            jobs=tuple(SimJob(spec, d) for spec, d in self.jobs),
            host_events=self.events,
            days=SPAN / 86400.0,
            repair_time=REPAIR,
        )


def generate(seed: int) -> Case:
    rng = random.Random(seed)
    hosts = tuple((f"h{i}", 8) for i in range(rng.randint(2, 3)))
    times = sorted(rng.randrange(0, int(SPAN * 0.6)) for _ in range(rng.randint(8, 16)))
    jobs = []
    for n, t in enumerate(times, 1):
        resumable = rng.random() < 0.6
        spec = WorkloadSpec(
            f"w-{n:06d}", rng.choice(sorted(TREE)), rng.choice((1, 2, 4, 4, 8, 8, 16)),
            float(rng.choice((0, 0, 600, 1200, 1800, 3600))), float(t), user="alice",
            resumable=resumable,
            checkpoint_interval=float(rng.choice((0, 300, 600, 900)) if resumable else 0),
        )
        jobs.append((spec, float(rng.randrange(200, 12000))))
    # host events at distinct whole seconds, never at a submission's instant
    used = set(times)
    events = []
    for _ in range(rng.randint(2, 5)):
        t = rng.randrange(60, int(SPAN * 0.9))
        while t in used:
            t += 1
        used.add(t)
        kind = rng.choice((HostEventKind.FAIL, HostEventKind.FAIL, HostEventKind.UNHEALTHY,
                           HostEventKind.REPAIRED))
        events.append(HostEvent(float(t), rng.choice(hosts)[0], kind))
    events.sort(key=lambda e: e.time)
    deaths = [e.time for e in events if e.kind is HostEventKind.FAIL]
    marked_down = frozenset(t for t in deaths if rng.random() < 0.4)
    restarts = tuple(sorted(float(rng.randrange(1, int(SPAN * 0.8)))
                            for _ in range(rng.randint(1, 2))))
    return Case(hosts, tuple(jobs), tuple(events), marked_down,
                rng.choice((0.0, 30.0, 300.0)), restarts)


def simulate(case: Case, config: PolicyConfig) -> list[str]:
    sim = SimConfig(restart_overhead=RESTART)
    result = Engine(case.scenario(), decide, config, sim=sim, keep_log=True).run()
    assert result.log is not None
    return result.log


def serve(case: Case, backend: str, tmp_path: Path, config: PolicyConfig) -> tuple[list[str], int]:
    """The service's decision log, and how many restarts it went through."""
    clock = FakeClock(0.0)
    store = open_store(backend, tmp_path)
    store.clock = clock.now
    for path, weight in TREE.items():
        store.add_budget(path, weight, "admin", create_parents=True)
    for name, gpus in case.hosts:
        store.add_host(name, gpus, "admin", at=0.0)
    executor = MemoryExecutor(
        case.hosts, clock,
        checkpoints={s.id: s.checkpoint_interval for s, _ in case.jobs},
        checkpoint_default=config.default_checkpoint_interval,
        restart_overhead=RESTART,
    )

    def server() -> Scheduler:
        sched = Scheduler(store, executor, config, clock, grace_s=case.grace_s)
        sched.start()
        return sched

    sched = server()
    moments = Moments(clock, executor, SPAN, REPAIR, list(case.jobs), list(case.events))
    restarts = list(case.restarts)
    restarted = 0
    while moments.advance(sched):
        t = moments.t
        if restarts and restarts[0] <= t:
            while restarts and restarts[0] <= t:
                restarts.pop(0)
            sched = server()  # a server restart: rebuilt from the store, reconciled
            restarted += 1
        for name, who in moments.due_repairs():
            if who == "executor":
                executor.revive_host(name)  # taken up from the inventory in the pass
            else:
                sched.set_host_state(name, HostState.HEALTHY, "repaired", "admin")
        for ev in moments.due_host_events():
            state = sched.state.hosts[ev.host].state if sched.state else None
            if ev.kind is HostEventKind.FAIL and state is not HostState.DOWN:
                if t in case.marked_down:
                    sched.set_host_state(ev.host, HostState.DOWN, "died", "admin")
                    moments.repairs[ev.host] = (t + REPAIR, "admin")
                else:
                    executor.fail_host(ev.host)
                    moments.repairs[ev.host] = (t + REPAIR, "executor")
            elif ev.kind is HostEventKind.UNHEALTHY and state is HostState.HEALTHY:
                sched.set_host_state(ev.host, HostState.DRAINING, "unhealthy", "admin")
            elif ev.kind is HostEventKind.REPAIRED and state is not HostState.HEALTHY:
                who = moments.repairs.pop(ev.host, (0.0, "admin"))[1]
                if state is HostState.DOWN and who == "executor":
                    executor.revive_host(ev.host)
                else:
                    sched.set_host_state(ev.host, HostState.HEALTHY, "repaired", "admin")
        for spec, duration in moments.due_submissions():
            row = store.add_workload(
                budget=spec.budget, gpus=spec.gpus, min_runtime=spec.min_runtime,
                submit_time=t, command=["train"], actor="alice", resumable=spec.resumable,
                checkpoint_interval=spec.checkpoint_interval,
            )
            assert row.id == spec.id
            executor.durations[row.id] = duration
        moments.step(sched)
    # a restart now rebuilds the ledger from the attempts: it must find what the live one
    # decided from (every attempt charged as stored, whenever its exit was read)
    assert usage(server(), config) == pytest.approx(usage(sched, config))
    store.close()
    return moments.log, restarted


def usage(sched: Scheduler, config: PolicyConfig) -> dict[str, float]:
    """Every node's charged and free GPU-seconds, and the capacity, in the lookback window
    ending at the scheduler's clock, as its ledger counts them."""
    st = sched.state
    assert st is not None
    now, window = sched.clock.now(), config.lookback
    out = {"capacity": st.ledger.capacity(now, window)}
    for node in st.tree.nodes():
        out["charged " + node] = st.ledger.charged(node, now, window, memo=False)
        out["free " + node] = st.ledger.free(node, now, window)
    return out


def test_generated_cases_cover_what_they_claim() -> None:
    """Across the seeds the simulator's logs hold starts, host changes and preemptions for
    each reason ``decide`` issues, and the traces hold host deaths reported both ways (by
    the executor and by an operator), drains, explicit repairs, grace periods of 0, 30 and
    300 s and a restart in every case, and the debug lane decides differently from the Fair
    Tree walk alone in some: the parity test below exercises all of them."""
    config = PolicyConfig()
    cases = [generate(seed) for seed in SEEDS]
    logs = [simulate(case, config) for case in cases]
    no_lane = dataclasses.replace(config, debug_lane=False)
    assert any(simulate(case, no_lane) != log for case, log in zip(cases, logs, strict=True))
    kinds = {line.split()[1] for log in logs for line in log}
    reasons = {line.split()[3] for log in logs for line in log if line.split()[1] == "preempt"}
    events = {e.kind for case in cases for e in case.events}
    assert {"start", "preempt", "host"} <= kinds
    assert reasons == {r.value for r in PreemptReason if r is not PreemptReason.HOST_FAILURE}
    assert events == set(HostEventKind)
    assert any(case.marked_down for case in cases)
    assert any(len(case.marked_down) < sum(e.kind is HostEventKind.FAIL for e in case.events)
               for case in cases)
    assert {case.grace_s for case in cases} >= {0.0, 30.0, 300.0}
    assert all(case.restarts for case in cases)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_generated_trace_same_decisions_in_service_and_simulator(
    backend: str, seed: int, tmp_path: Path
) -> None:
    """A generated trace with host deaths, drains, repairs, a grace period and a server
    restart mid-run: the live scheduler's decision log equals the simulator's, line by
    line, and the service really restarted."""
    config = PolicyConfig()
    case = generate(seed)
    expected = simulate(case, config)
    got, restarted = serve(case, backend, tmp_path, config)
    assert restarted >= 1
    assert got == expected


# ---- regressions the generated traces found --------------------------------------------------
def test_memory_executor_settles_a_run_lost_with_its_host_once() -> None:
    """A run that vanished with its host keeps its checkpoints once: the scheduler's stop
    sent afterwards (for the parts of multi-host work on other hosts) must not count its
    progress again (seeds 6 and 9 restarted such work too early before the fix), nor may the
    host dying again after its repair (seed 60 finished two workloads early)."""
    clock = FakeClock(0.0)
    executor = MemoryExecutor([("h0", 8)], clock, durations={"w": 10000.0},
                              checkpoints={"w": 600.0})
    handle = executor.launch(Launch("w", 1, ["train"], (HostSlots("h0", (0, 1)),)))
    clock.set(1900.0)
    executor.fail_host("h0")
    executor.stop(handle, 0.0)
    assert executor.progress["w"] == 1800.0
    executor.revive_host("h0")
    clock.set(5000.0)
    executor.fail_host("h0")
    assert executor.progress["w"] == 1800.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_keeps_usage_and_capacity_from_before_every_host_changed_state(
    backend: str, tmp_path: Path
) -> None:
    """Usage charged before every host had changed state (one drained and repaired, one
    dead and back) is still charged after a restart, and the cluster's healthy GPU-seconds
    are the same: the rebuilt ledger answers as the uninterrupted one did. (Before the fix
    the rebuild started the cluster's history at the latest state change of any host and
    forgot everything before it; seeds 55, 56 and 60 then ordered the queue differently.)"""
    config = PolicyConfig()
    clock = FakeClock(0.0)
    store = open_store(backend, tmp_path)
    store.clock = clock.now
    for path, weight in TREE.items():
        store.add_budget(path, weight, "admin", create_parents=True)
    for name in ("h0", "h1"):
        store.add_host(name, 8, "admin", at=0.0)
    executor = MemoryExecutor([("h0", 8), ("h1", 8)], clock, durations={"w-000001": 1000.0})
    sched = Scheduler(store, executor, config, clock)
    sched.start()
    store.add_workload(budget="ai/llm", gpus=8, min_runtime=600.0, submit_time=0.0,
                       command=["train"], actor="alice")
    assert sched.step(0.0) == ["0.000 start w-000001 on h0:8"]
    clock.set(1000.0)
    sched.step(1000.0)  # it exits
    for t, name, state in [(2000.0, "h0", HostState.DRAINING), (2500.0, "h0", HostState.REPAIR),
                           (3000.0, "h1", HostState.DOWN), (4000.0, "h1", HostState.HEALTHY),
                           (4500.0, "h0", HostState.HEALTHY)]:
        clock.set(t)
        sched.set_host_state(name, state, "test", "admin")
    clock.set(5000.0)
    sched.step(5000.0)
    before = sched.state
    after = Scheduler(store, executor, config, clock)
    after.start()
    assert before is not None and after.state is not None
    window = config.lookback
    assert before.ledger.charged("ai/llm", 5000.0, window) == 8 * 1000.0
    assert after.state.ledger.charged("ai/llm", 5000.0, window) == 8 * 1000.0
    # 16 GPUs for 5000 s, less h0 unhealthy 2000-4500 s and h1 down 3000-4000 s
    healthy = 16 * 5000.0 - 8 * 2500.0 - 8 * 1000.0
    assert before.ledger.capacity(5000.0, window) == healthy
    assert after.state.ledger.capacity(5000.0, window) == healthy
    store.close()
