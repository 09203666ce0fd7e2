"""A wall clock set back (a step, not slewed) behind the times the server recorded: the
scheduler's time stands still until it catches up, the server says so once, and keeps it
in ``clock_behind_s`` (which ``/v1/health`` and ``/metrics`` give); a server restarted
meanwhile schedules from the latest time recorded instead of failing every pass."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_env import Env, make_env

from apportion.service.clock import FakeClock

BEHIND = "the wall clock is {} behind the latest time this server recorded (it was set back)"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = make_env("sqlite", tmp_path)
    yield e
    e.store.close()


def set_back(env: Env, t: float) -> None:
    """The wall clock (the scheduler's, the executor's and the store's) stepped back to
    ``t``."""
    env.clock = FakeClock(t)
    env.store.clock = env.clock.now
    env.executor.clock = env.clock
    env.sched.clock = env.clock


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_restart_with_the_clock_set_back_schedules_from_the_latest_start_and_says_so(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """An attempt ran from 800 to 950; the server restarts with its clock at 700 (set back
    250 s behind that end): it warns once that the clock is 4 min 10 s behind and
    ``clock_behind_s`` is 250; its end, after the clock, counts as ending at it (logged),
    and a new submission starts at 800, the latest start replayed, where the scheduler's
    time stands still until the clock passes it; then ``clock_behind_s`` is 0 again, it
    says so, and time moves: the new work, which ran to 1200 by the clock, ends then.
    (Every pass failed with "ledger: time went backwards (700.0 < 800.0)".)"""
    env.clock.set(800.0)
    first = env.submit(gpus=2, duration=150.0)
    env.at(800.0)
    env.at(1000.0)
    assert env.store.get_workload(first).attempts[0].ended_at == 950.0
    set_back(env, 700.0)
    with caplog.at_level(logging.INFO, "apportion.scheduler"):
        env.restart()
        second = env.submit(gpus=2, duration=500.0)
        assert env.sched.step() == [f"800.000 start {second} on h0:2"]
        assert env.sched.clock_behind_s == 250.0
        assert env.at(750.0) == []
        assert env.sched.clock_behind_s == 200.0
        env.at(1000.0)
        assert env.sched.clock_behind_s == 0.0
        env.at(1300.0)
    behind = [w for w in warnings(caplog) if "wall clock" in w]
    assert len(behind) == 1 and BEHIND.format("4 min 10 s") in behind[0], warnings(caplog)
    assert "the wall clock is back at the latest time recorded" in caplog.text
    assert env.store.get_workload(second).attempts[0].ended_at == 1200.0


def test_a_clock_set_back_while_running_holds_the_scheduler_still_and_is_said_once(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Passes at 0 and 100 (a 2-GPU job running); the clock is set back to 40: the next
    passes decide at 100 (time stands still: the job's charge does not grow), one warning
    says the clock is 1 min behind; a step of 5 s or less is not reported."""
    wid = env.submit(gpus=2)
    env.at(0.0)
    env.at(100.0)
    set_back(env, 95.0)
    env.sched.step()
    assert env.sched.clock_behind_s == 0.0  # within the tolerance: not said
    set_back(env, 40.0)
    with caplog.at_level(logging.WARNING, "apportion.scheduler"):
        env.sched.step()
        env.at(50.0)
    assert len(warnings(caplog)) == 1 and BEHIND.format("1 min") in warnings(caplog)[0]
    assert env.sched.clock_behind_s == 50.0
    view = env.sched.queue_view()
    assert view.now == 100.0 and [r.id for r in view.running] == [wid]
    assert {b.path: b.charged_gpu_s for b in view.budgets}["ai/llm"] == 200.0
