"""The live ledger charges every attempt as the store does, so a restart (which rebuilds the
ledger from the attempts) changes no figure: attempts that end between passes, noticed by
a later pass that also takes in new submissions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_env import Env, make_env
from store_db import BACKENDS

from apportion.core import ROOT, Status, ancestors
from apportion.service.clock import FakeClock
from apportion.service.executor import Launch, LaunchRefused
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = make_env(request.param, tmp_path, grace_s=5.0)
    yield e
    e.store.close()


Figures = dict[tuple[str, str], float]  # ("charged" or "free", node) -> GPU-seconds


def live(env: Env) -> tuple[Figures, float]:
    """Every node's charged and free GPU-seconds in the lookback window, and the healthy
    GPU-seconds, as the scheduler's ledger counts them now."""
    st, lookback = env.sched.state, env.sched.config.lookback
    assert st is not None
    now = env.clock.now()
    figures: Figures = {}
    for n in [*st.tree.nodes(), ROOT]:
        figures["charged", n] = st.ledger.charged(n, now, lookback, memo=False)
        figures["free", n] = st.ledger.free(n, now, lookback)
    return figures, st.ledger.capacity(now, lookback)


def stored(env: Env) -> Figures:
    """The same figures summed from the attempts in the store (running ones up to now)."""
    now = env.clock.now()
    out = {(kind, n): 0.0 for n in [*env.store.load_tree().nodes(), ROOT]
           for kind in ("charged", "free")}
    for iv in env.store.usage_intervals(0.0):
        seconds = iv.gpus_held * ((now if iv.ended_at is None else iv.ended_at) - iv.started_at)
        for n in ancestors(iv.budget):
            out["charged" if iv.allocated else "free", n] += seconds
    return out


def test_exits_noticed_by_a_later_pass_are_charged_to_their_real_end_live_and_rebuilt(
    env: Env,
) -> None:
    """Two allocated 2-GPU runs exit at 10 and a preempted unallocated one at 16 (3 s after
    its SIGTERM); none is noticed before a pass that also takes in new submissions (at 13
    and 20). The live ledger charges each up to its real exit, as the store does
    (``gpu_seconds``), and the requeued one is queued from its exit (the store's
    ``queued_at``), not from the pass; a restart at the same moment rebuilds the same
    figures, capacity and queue time. (The live ledger charged each up to the pass that
    noticed it, 12 GPU-seconds each too many for the first two.)"""
    env.executor.term_delays["w-000001"] = 3.0
    free = env.submit(budget="ai/vision", gpus=4, min_runtime=0.0, resumable=True)
    a = env.submit(gpus=2, duration=10.0)
    b = env.submit(gpus=2, duration=10.0)
    env.at(0.0)
    env.clock.set(13.0)
    env.submit(gpus=2, duration=100.0)
    later = env.submit(gpus=4, duration=100.0)
    assert f"13.000 preempt {free} unallocated requeue=True by={later}" in env.at(13.0)
    env.clock.set(20.0)
    env.submit(budget="ai/vision", gpus=1, min_runtime=0.0)
    env.at(20.0)

    assert [env.store.get_workload(w).attempts[0].gpu_seconds for w in (a, b, free)] == [
        20.0, 20.0, 64.0]
    requeued = env.store.get_workload(free)
    assert (requeued.status, requeued.queued_at) == (Status.PENDING, 16.0)
    figures, capacity = live(env)
    assert figures == pytest.approx(stored(env))
    assert figures["charged", "ai/llm"] == 20 + 20 + 2 * 7 + 4 * 0
    queued = {p.id: p.queued_at for p in env.sched.queue_view().pending}
    assert queued[free] == 16.0

    env.restart(grace_s=5.0)
    again, capacity_again = live(env)
    assert (again, capacity_again) == (pytest.approx(figures), pytest.approx(capacity))
    assert {p.id: p.queued_at for p in env.sched.queue_view().pending}[free] == 16.0


def test_an_exit_after_the_passs_time_is_ended_by_the_next_pass_at_its_real_time(
    env: Env,
) -> None:
    """A pass at 100 that reads an exit recorded at 105 (it happened while the pass ran, on a
    wall clock) leaves it to the next pass, which it asks for at once (the state cannot end
    work after the pass's time); that pass ends it at 105, charged so live and stored."""
    wid = env.submit(gpus=2, duration=105.0)
    env.at(0.0)
    env.clock.set(106.0)
    env.sched.step(100.0)
    assert env.store.get_workload(wid).status is Status.RUNNING
    assert env.sched._wake.is_set()
    env.at(106.0)
    w = env.store.get_workload(wid)
    assert (w.status, w.attempts[0].ended_at, w.attempts[0].gpu_seconds) == (
        Status.COMPLETED, 105.0, 210.0)
    assert live(env)[0] == pytest.approx(stored(env))


def test_an_exit_time_ahead_of_the_schedulers_clock_counts_as_the_pass_time(
    tmp_path: Path,
) -> None:
    """An executor whose clock runs 30 s ahead of the scheduler's reports an exit at a time
    the scheduler's clock has not reached: the attempt ends at the pass's time (every
    stored time is on the scheduler's clock), charged the same live and stored."""
    env = make_env("sqlite", tmp_path)
    ahead = FakeClock(30.0)
    env.executor = MemoryExecutor((("h0", 8),), ahead)
    env.sched = Scheduler(env.store, env.executor, env.sched.config, env.clock)
    env.sched.start()
    wid = env.submit(gpus=2, duration=10.0)
    env.at(0.0)  # launched at 30 on the executor's clock: it exits at 40 on it
    ahead.set(45.0)
    env.at(15.0)
    w = env.store.get_workload(wid)
    assert (w.status, w.attempts[0].ended_at, w.attempts[0].gpu_seconds) == (
        Status.COMPLETED, 15.0, 30.0)
    assert live(env)[0] == pytest.approx(stored(env))
    env.store.close()


class SlowLaunches(MemoryExecutor):
    """The memory executor, whose launches take ``delay`` seconds of the clock, and raise
    ``fail[workload]`` for the workloads listed."""

    def __init__(self, clock: FakeClock, delay: float, fail: dict[str, Exception]) -> None:
        super().__init__((("h0", 8),), clock)
        self.fake_clock, self.delay, self.fail = clock, delay, fail

    def launch(self, launch: Launch) -> str:
        self.fake_clock.advance(self.delay)
        if launch.workload_id in self.fail:
            raise self.fail[launch.workload_id]
        return super().launch(launch)


@pytest.mark.parametrize(("error", "reason"), [
    (RuntimeError("spawn failed"), "launch failed"),
    (LaunchRefused("command not found: train"), "launch refused: command not found: train"),
])
def test_attempts_of_a_slow_pass_start_at_the_pass_and_a_failed_launch_ends_no_earlier(
    tmp_path: Path, error: Exception, reason: str,
) -> None:
    """In a pass at 100 whose launches take 0.04 s each, every attempt starts at 100 (when
    the pass gave it its GPUs, as the state and a restart count it), and the third, whose
    launch fails, ends at 100 too, charged nothing: never before its start. (Attempts were
    stored as starting at the clock's time, 100.04 s and 100.08 s for the second and third,
    and the failed one ended at the pass's 100 s, 0.08 s before it started.)"""
    env = make_env("sqlite", tmp_path)
    env.executor = SlowLaunches(env.clock, 0.04, {"w-000003": error})
    env.sched = Scheduler(env.store, env.executor, env.sched.config, env.clock)
    env.sched.start()
    ok = [env.submit(gpus=2), env.submit(gpus=2)]
    bad = env.submit(gpus=2)
    env.at(100.0)
    assert [env.store.get_workload(w).attempts[0].started_at for w in ok] == [100.0, 100.0]
    a = env.store.get_workload(bad).attempts[0]
    assert (a.started_at, a.ended_at, a.gpu_seconds, a.end_reason) == (100.0, 100.0, 0.0,
                                                                       reason)
    assert live(env)[0] == pytest.approx(stored(env))
    env.store.close()
