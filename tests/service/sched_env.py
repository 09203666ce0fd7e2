"""A scheduler over a real store with the in-memory executor and a fake clock."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from store_db import open_store

from apportion.core import PolicyConfig
from apportion.service.clock import FakeClock
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store

BUDGETS = {"ai/llm": 1.0, "ai/vision": 1.0}


@dataclass
class Env:
    store: Store
    executor: MemoryExecutor
    clock: FakeClock
    sched: Scheduler

    def submit(
        self,
        budget: str = "ai/llm",
        gpus: int = 4,
        min_runtime: float = 600.0,
        duration: float | None = None,
        resumable: bool = False,
        priority: int = 0,
        checkpoint_interval: float = 0.0,
    ) -> str:
        row = self.store.add_workload(
            budget=budget, gpus=gpus, min_runtime=min_runtime, submit_time=self.clock.now(),
            command=["train"], actor="alice", resumable=resumable, priority=priority,
            checkpoint_interval=checkpoint_interval,
        )
        if duration is not None:
            self.executor.durations[row.id] = duration
        return row.id

    def at(self, t: float) -> list[str]:
        """Move the clock to ``t`` and run one pass."""
        self.clock.set(t)
        return self.sched.step()

    def restart(self, grace_s: float = 0.0) -> Scheduler:
        """A new scheduler over the same store and executor (a server restart), with the
        same policy."""
        self.sched = Scheduler(self.store, self.executor, self.sched.config, self.clock,
                               grace_s=grace_s)
        self.sched.start()
        return self.sched


def make_env(
    backend: str,
    tmp_path: Path,
    hosts: tuple[tuple[str, int], ...] = (("h0", 8),),
    grace_s: float = 0.0,
    config: PolicyConfig | None = None,
    **executor_kw: object,
) -> Env:
    clock = FakeClock(0.0)
    store = open_store(backend, tmp_path)
    store.clock = clock.now
    for path, weight in BUDGETS.items():
        store.add_budget(path, weight, "admin", create_parents=True)
    for name, gpus in hosts:
        store.add_host(name, gpus, "admin", at=0.0)
    executor = MemoryExecutor(hosts, clock, **executor_kw)  # type: ignore[arg-type]
    sched = Scheduler(store, executor, config or PolicyConfig(), clock, grace_s=grace_s)
    sched.start()
    return Env(store, executor, clock, sched)
