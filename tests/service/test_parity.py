"""One trace through the simulator and through the live scheduler gives the same decisions.

The service runs with a fake clock, the in-memory executor (which ends work exactly when
the simulator's cost model says: checkpoint loss and restart overhead included) and a real
store, and is stepped at exactly the moments the simulator handles: submissions, exits,
ends of minimum runtimes, hour boundaries, host events and the moments a pass asked for
(``Decisions.recheck_at``: a checkpoint waited for). Both decision logs
(``core.decision_log`` lines) must be identical.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from parity_loop import HOUR, Moments
from store_db import BACKENDS, open_store

from apportion.core import (
    After,
    BudgetNode,
    BudgetTree,
    Hold,
    Host,
    HostState,
    PolicyConfig,
    PreemptReason,
    WorkloadSpec,
    decide,
)
from apportion.service.clock import FakeClock
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.sim.engine import Engine, SimConfig
from apportion.sim.model import HostEvent, HostEventKind, Scenario, SimJob

DAYS = 4 * HOUR / 86400.0
REPAIR = 1800.0
RESTART = 120.0
TREE = {"ai/llm": 2.0, "ai/vision": 1.0, "ops": 1.0}
HOSTS = (("h0", 8), ("h1", 8))

# id, t, budget, gpus, min_runtime, resumable, checkpoint, true duration (all whole seconds)
TRACE = [
    ("w-000001", 0, "ai/llm", 8, 1800, True, 600, 5000),
    ("w-000002", 0, "ai/vision", 8, 0, True, 600, 20000),  # unallocated: gets displaced,
    # and checkpoints on SIGTERM (ON_TERM): it keeps all its progress when it is
    ("w-000003", 100, "ai/vision", 4, 900, False, 0, 3000),
    ("w-000004", 200, "ai/llm", 8, 3600, False, 0, 4000),
    ("w-000005", 300, "ops", 2, 600, False, 0, 500),  # a debug workload
    ("w-000006", 400, "ops", 8, 1200, True, 300, 9000),
    ("w-000007", 2500, "ai/llm", 4, 0, True, 0, 1000),
    ("w-000008", 4000, "ai/vision", 8, 1800, True, 900, 6000),
    ("w-000009", 7300, "ops", 4, 900, True, 0, 2000),
    # an array of three, at most one at a time
    ("w-000010", 7400, "ops", 4, 300, False, 0, 600),
    ("w-000011", 7400, "ops", 4, 300, False, 0, 600),
    ("w-000012", 7400, "ops", 4, 300, False, 0, 600),
    ("w-000013", 7500, "ai/llm", 2, 600, False, 0, 700),  # afterok:w-000005 (completed)
    ("w-000014", 7600, "ai/vision", 2, 600, False, 0, 700),  # afternotok:w-000013: never
    ("w-000015", 7700, "ai/vision", 2, 300, False, 0, 900),  # afterany:w-000011
    ("w-000016", 8000, "ai/vision", 4, 300, False, 0, 5000),  # stopped at its time limit
]
ARRAY = ("w-000010", (0, 1, 2), 1)  # first id, indexes, throttle
AFTER = {"w-000013": ("afterok", "w-000005"), "w-000014": ("afternotok", "w-000013"),
         "w-000015": ("afterany", "w-000011")}
TIME_LIMITS = {"w-000016": 350.0}
EVENTS = [HostEvent(3000.0, "h1", HostEventKind.UNHEALTHY)]
ON_TERM = {"w-000002", "w-000006"}  # they checkpoint when told to stop


def specs() -> list[tuple[WorkloadSpec, float]]:
    return [
        (WorkloadSpec(wid, budget, gpus, float(m), float(t), user="alice", resumable=res,
                      checkpoint_interval=float(c), time_limit=TIME_LIMITS.get(wid, 0.0),
                      checkpoint_on_term=wid in ON_TERM),
         float(d))
        for wid, t, budget, gpus, m, res, c, d in TRACE
    ]


def hold(wid: str) -> Hold | None:
    """The simulator's view of a workload's dependency and array throttle."""
    first, indexes, throttle = ARRAY
    element = int(wid[2:]) - int(first[2:])
    if 0 <= element < len(indexes):
        return Hold(wid, array=first, index=indexes[element], throttle=throttle)
    if wid in AFTER:
        kind, dep = AFTER[wid]
        return Hold(wid, after=((After(kind), dep),))
    return None


def simulate(config: PolicyConfig) -> list[str]:
    scenario = Scenario(
        name="parity",
        tree=BudgetTree.build(BudgetNode(p, w) for p, w in TREE.items()),
        hosts=tuple(Host(n, g) for n, g in HOSTS),
        jobs=tuple(SimJob(spec, d, hold=hold(spec.id)) for spec, d in specs()),
        host_events=tuple(EVENTS),
        days=DAYS,
        repair_time=REPAIR,
    )
    sim = SimConfig(restart_overhead=RESTART)
    result = Engine(scenario, decide, config, sim=sim, keep_log=True).run()
    assert result.log is not None
    return result.log


def serve(backend: str, tmp_path: Path, config: PolicyConfig,
          reported: set[str] | None = None) -> list[str]:
    """The live scheduler's decision log. With ``reported``, running attempts report the
    checkpoints the cost model says they wrote, and the workloads whose report the
    scheduler's state held at some pass are added to it."""
    clock = FakeClock(0.0)
    store = open_store(backend, tmp_path)
    store.clock = clock.now
    for path, weight in TREE.items():
        store.add_budget(path, weight, "admin", create_parents=True)
    for name, gpus in HOSTS:
        store.add_host(name, gpus, "admin", at=0.0)
    trace = specs()
    executor = MemoryExecutor(
        HOSTS, clock,
        checkpoints={s.id: s.checkpoint_interval for s, _ in trace},
        checkpoint_default=config.default_checkpoint_interval,
        restart_overhead=RESTART,
        on_term=ON_TERM,
        report_checkpoints=reported is not None,
    )
    sched = Scheduler(store, executor, config, clock, grace_s=0.0)
    sched.start()
    moments = Moments(clock, executor, DAYS * 86400.0, REPAIR, trace, list(EVENTS))
    while moments.advance(sched):
        t = moments.t
        for ev in moments.due_host_events():
            assert ev.kind is HostEventKind.UNHEALTHY
            sched.set_host_state(ev.host, HostState.DRAINING, "unhealthy", "admin")
        for name, _ in moments.due_repairs():
            sched.set_host_state(name, HostState.HEALTHY, "repaired", "admin")
        for spec, duration in moments.due_submissions():
            executor.durations[spec.id] = duration
            first, indexes, throttle = ARRAY
            if spec.id in store.statuses([spec.id]):
                continue  # an array element, stored with the array's first
            after = [AFTER[spec.id]] if spec.id in AFTER else []
            row = store.add_workload(
                budget=spec.budget, gpus=spec.gpus, min_runtime=spec.min_runtime,
                submit_time=t, command=["train"], actor="alice", resumable=spec.resumable,
                checkpoint_interval=spec.checkpoint_interval, time_limit=spec.time_limit,
                dependencies=after, array=indexes if spec.id == first else (),
                array_throttle=throttle if spec.id == first else 0,
                checkpoint_on_term=spec.checkpoint_on_term,
            )
            assert row.id == spec.id
        moments.step(sched)
        if reported is not None:
            reported |= {w for w, r in sched.state.running.items()
                         if r.checkpointed_at is not None}
    store.close()
    return moments.log


def use_case(monkeypatch: pytest.MonkeyPatch, trace: list[tuple[object, ...]],
             hosts: tuple[tuple[str, int], ...],
             after: dict[str, tuple[str, str]] | None = None) -> None:
    """Run the tests below on another trace and cluster: no host events, array, time
    limits or checkpoints on SIGTERM, and only the dependencies ``after`` names."""
    for name, value in (("TRACE", trace), ("HOSTS", hosts), ("EVENTS", []),
                        ("ARRAY", ("w-999999", (), 0)), ("AFTER", after or {}),
                        ("TIME_LIMITS", {}), ("ON_TERM", set())):
        monkeypatch.setattr(sys.modules[__name__], name, value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_service_and_simulator_make_the_same_decisions(backend: str, tmp_path: Path) -> None:
    """Same trace, same policy: the live scheduler's decision log equals the simulator's,
    line by line (starts, preemptions of each reason, a drain and its repair, a time limit),
    with an array throttle and dependencies deciding what may join the queue."""
    config = PolicyConfig()
    expected = simulate(config)
    kinds = {line.split()[1] for line in expected}
    reasons = {line.split()[3] for line in expected if line.split()[1] == "preempt"}
    decided = {r.value for r in PreemptReason if r is not PreemptReason.HOST_FAILURE}
    assert {"start", "preempt", "host", "timeout"} <= kinds
    assert reasons == decided  # each reason decide issues
    starts = {line.split()[2]: float(line.split()[0]) for line in expected
              if line.split()[1] == "start"}
    # the throttle: each element starts only once the one before has ended (600 s each)
    assert starts["w-000011"] >= starts["w-000010"] + 600
    assert starts["w-000012"] >= starts["w-000011"] + 600
    # dependencies: met ones start once met, one that can never be met never starts
    assert "w-000013" in starts and "w-000014" not in starts
    assert starts["w-000015"] >= starts["w-000011"] + 600
    # a workload that checkpoints on SIGTERM is preempted, requeued and started again
    term = [line for line in expected if line.split()[2] in ON_TERM]
    assert any("preempt" in line and "requeue=True" in line for line in term), term
    assert sum(line.split()[1] == "start" for line in term) >= 3, term
    assert serve(backend, tmp_path, config) == expected


# A large run of an owed budget on reserved hosts, with backfill around the reservation:
# ai/vision fills three hosts (protected 30 min, 1 h, 2 h); ops (used nothing) asks for 16
# GPUs, more than its share, which no rebalance rule grants at once; h0 and h1 are reserved
# for it. When h0 empties, ai/vision's next 1-hour run is kept off it (it would be
# protected past the start); the unallocated ai/llm run and ai/llm's resumable run
# protected for 10 min backfill it, to be preempted when the reservation starts (h1's
# protection ends at 1 h) and ops' run starts on h0 and h1.
RESERVE_HOSTS = (("h0", 8), ("h1", 8), ("h2", 8))
RESERVE_TRACE = [
    ("w-000001", 0, "ai/vision", 8, 1800, True, 600, 2400),
    ("w-000002", 0, "ai/vision", 8, 3600, True, 600, 20000),
    ("w-000003", 0, "ai/vision", 8, 7200, True, 600, 20000),
    ("w-000004", 600, "ops", 16, 900, True, 300, 3000),
    ("w-000005", 2000, "ai/vision", 8, 3600, True, 600, 9000),
    ("w-000006", 2000, "ai/llm", 4, 0, True, 300, 9000),
    ("w-000007", 2000, "ai/llm", 4, 600, True, 300, 9000),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_service_and_simulator_agree_on_reservations_and_backfill(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reservation case above: the simulator reserves h0 and h1 for ops' 16-GPU run,
    backfills the unallocated run and ai/llm's short-protected one onto h0, preempts them
    and ai/vision's unprotected run at 1 h and starts ops' run on h0 and h1; the live
    scheduler's log is the same, line by line."""
    use_case(monkeypatch, RESERVE_TRACE, RESERVE_HOSTS)
    config = PolicyConfig(reservations=1)
    expected = simulate(config)
    starts = [line for line in expected if line.split()[1] == "start"]
    assert [line for line in starts if "w-000004" in line] == [
        "3600.000 start w-000004 on h0:8,h1:8"
    ]
    # h0 empties at 2400: the unallocated run and the 10-min one backfill it, the 1-hour
    # run stays off it
    assert [line for line in starts if line.startswith("2400.000")] == [
        "2400.000 start w-000007 on h0:4", "2400.000 start w-000006 on h0:4"
    ]
    assert "3600.000 preempt w-000006 unallocated requeue=True by=w-000004" in expected
    assert "3600.000 preempt w-000007 rebalance requeue=True by=w-000004" in expected
    assert "3600.000 preempt w-000002 rebalance requeue=True by=w-000004" in expected
    assert serve(backend, tmp_path, config) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_reported_checkpoints_leave_the_decisions_the_simulators(
    backend: str, tmp_path: Path
) -> None:
    """The first trace again, with every running attempt reporting the checkpoints it writes
    (as a job touching its checkpoint file would): the scheduler folds the reports in (some
    workloads run with a reported checkpoint; a resumed run's are its restart overhead
    later than the interval's multiples) and its decision log still equals the simulator's,
    which estimates checkpoints from the declared interval."""
    config = PolicyConfig()
    reported: set[str] = set()
    assert serve(backend, tmp_path, config, reported) == simulate(config)
    assert reported


# A rebalance that waits for its victim's checkpoint: ai/vision holds the one host with two
# 4-GPU runs (w-000001 resumable, checkpointing every 600 s; w-000002 not resumable); at
# 2000 s ops asks for its share (2 GPUs). w-000001 is past its minimum runtime and 200 s
# from its last checkpoint, its next one due at 2400 s (within checkpoint_wait): nothing is
# preempted at 2000 s; at 2400 s it is, losing nothing, and ops' run starts.
WAIT_HOSTS = (("h0", 8),)
WAIT_TRACE = [
    ("w-000001", 0, "ai/vision", 4, 1800, True, 600, 20000),
    ("w-000002", 0, "ai/vision", 4, 1800, False, 0, 20000),
    ("w-000003", 2000, "ops", 2, 600, False, 0, 3000),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_service_and_simulator_agree_on_a_rebalance_waiting_for_a_checkpoint(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case above: both wait at 2000 s, preempt w-000001 at its checkpoint (2400 s, the
    moment the pass asked for) and start ops' run then; the logs are the same line by
    line."""
    use_case(monkeypatch, WAIT_TRACE, WAIT_HOSTS)
    config = PolicyConfig()
    expected = simulate(config)
    assert not [line for line in expected if line.startswith("2000.000")]
    assert "2400.000 preempt w-000001 rebalance requeue=True by=w-000003" in expected
    assert "2400.000 start w-000003 on h0:2" in expected
    assert serve(backend, tmp_path, config) == expected


# Held work and the share guarantee's clock: ops' 4-GPU run (w-000004) waits for its
# dependency (w-000001, ops' 2-GPU run, ends at 3500 s) on the one host, which ai/vision
# fills. Released at 3500 s, it needs w-000002 (resumable, checkpointing every 800 s, next
# at 4000 s, within checkpoint_wait). With max_min_runtime 1 h, a wait may last until
# queued_at + 1 h: from the release (7100 s) the checkpoint is waited for; from the
# submission (3600 s) it would not be, and w-000002 would be preempted at once.
HELD_HOSTS = (("h0", 8),)
HELD_TRACE = [
    ("w-000001", 0, "ops", 2, 600, False, 0, 3500),
    ("w-000002", 0, "ai/vision", 4, 1800, True, 800, 20000),
    ("w-000003", 0, "ai/vision", 2, 1800, False, 0, 20000),
    ("w-000004", 10, "ops", 4, 1200, False, 0, 3000),
    ("w-000005", 20, "ai/vision", 2, 1800, False, 0, 20000),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_service_and_simulator_count_held_work_as_queued_from_its_release(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case above: both release w-000004 at 3500 s and count its queue time from then,
    so both wait for w-000002's checkpoint at 4000 s and preempt it there (not at 3500 s);
    the logs are the same line by line."""
    use_case(monkeypatch, HELD_TRACE, HELD_HOSTS, {"w-000004": ("afterok", "w-000001")})
    config = PolicyConfig(max_min_runtime=HOUR, checkpoint_wait=600.0,
                          restart_protection=HOUR)
    expected = simulate(config)
    assert not [line for line in expected if line.startswith("3500.000")
                and "preempt" in line], expected
    assert "4000.000 preempt w-000002 rebalance requeue=True by=w-000004" in expected
    assert "4000.000 start w-000004 on h0:4" in expected
    assert serve(backend, tmp_path, config) == expected
