"""What a whole replay costs under each policy: the same scenario (a trace or a built-in
one) run by fair share and by the legacy model one after the other in this process, CPU
seconds of each (``time.process_time``, so a busy neighbour on a shared machine does not
inflate it) and the ratio, and the process's peak resident memory as the operating system
counts it (``getrusage(RUSAGE_SELF).ru_maxrss``).

The peak is a high-water mark of the whole process: after the scenario is built, after the
first policy, after the second. The second policy's figure is therefore the larger of the two
runs; to see one policy's own peak, bench it alone (``policies=["legacy"]``)."""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from apportion import core_build
from apportion.core import PolicyConfig
from apportion.sim.engine import Engine, SimConfig
from apportion.sim.model import Scenario
from apportion.sim.run import make_policy


def peak_rss_mb() -> float:
    """The process's maximum resident set so far, in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


@dataclass(frozen=True)
class PolicyCost:
    policy: str
    cpu_s: float  # CPU seconds of this process for the whole run (engine, policy, metrics)
    wall_s: float
    calls: int  # policy calls
    events: int
    peak_rss_mb: float  # the process's peak resident memory at the end of this run


@dataclass(frozen=True)
class ReplayBench:
    scenario: str
    workloads: int  # submitted within the days replayed (the runs' workloads)
    workloads_in_input: int  # the scenario's or trace's own, beyond the days replayed too
    hosts: int
    gpus: int
    days: float
    budgets: int  # leaf budgets
    rss_before_mb: float  # peak resident memory once the scenario was built
    runs: list[PolicyCost] = field(default_factory=list)
    core_build: str = ""

    @property
    def ratio(self) -> float | None:
        """Fair share's CPU time over legacy's (None unless both ran)."""
        by = {r.policy: r.cpu_s for r in self.runs}
        if "fairshare" in by and by.get("legacy"):
            return by["fairshare"] / by["legacy"]
        return None


def run(
    scenario: Scenario,
    config: PolicyConfig | None = None,
    sim: SimConfig | None = None,
    policies: Sequence[str] = ("fairshare", "legacy"),
    seed: int = 0,
) -> ReplayBench:
    """Run each policy once on ``scenario``, in order, in this process; time each."""
    config = config or PolicyConfig()
    sim = sim or SimConfig()
    bench = ReplayBench(
        scenario=scenario.name,
        workloads=sum(1 for j in scenario.jobs if j.spec.submit_time < scenario.days * 86400.0),
        workloads_in_input=len(scenario.jobs), hosts=len(scenario.hosts),
        gpus=sum(h.gpus for h in scenario.hosts), days=scenario.days,
        budgets=len(scenario.tree.leaves), rss_before_mb=peak_rss_mb(), core_build=core_build(),
    )
    _warm_up(scenario, config, sim, policies, seed)
    for name in policies:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        result = Engine(scenario, make_policy(name, scenario, sim), config, name=name, sim=sim,
                        seed=seed).run()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        calls, events = int(result.summary["decide"]["calls"]), int(result.summary["events"])
        del result  # the next run must not count this one's tables in its peak
        bench.runs.append(PolicyCost(policy=name, cpu_s=cpu, wall_s=wall, calls=calls,
                                     events=events, peak_rss_mb=peak_rss_mb()))
    return bench


def _warm_up(scenario: Scenario, config: PolicyConfig, sim: SimConfig,
             policies: Sequence[str], seed: int) -> None:
    """Run each policy on the scenario's first hour, untimed: the one-time costs of a first
    run in a process (modules loaded on first use, caches filled) would otherwise all fall
    on the policy timed first, and on a small trace decide which of the two looks cheaper."""
    hour = dataclasses.replace(
        scenario, days=1 / 24,
        jobs=tuple(j for j in scenario.jobs if j.spec.submit_time < 3600.0),
        host_events=tuple(e for e in scenario.host_events if e.time < 3600.0))
    for name in policies:
        Engine(hour, make_policy(name, hour, sim), config, name=name, sim=sim, seed=seed).run()
