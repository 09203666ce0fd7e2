"""Checkpoints reported by running attempts reach the policy through the live scheduler
(in-memory executor, fake clock, real store): victims are chosen by the reported time,
reports outside the run are ignored, and a restart learns them again from the executor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_env import Env, make_env
from store_db import BACKENDS

INTERVAL = 3600.0  # declared by both runs: the estimate puts their last checkpoint at 0


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = make_env(request.param, tmp_path)
    yield e
    e.store.close()


def two_runs(env: Env) -> tuple[str, str]:
    """ai/llm fills h0 with two resumable 4-GPU runs from 0 (protected for 10 min)."""
    a = env.submit("ai/llm", gpus=4, min_runtime=600.0, resumable=True,
                   checkpoint_interval=INTERVAL)
    b = env.submit("ai/llm", gpus=4, min_runtime=600.0, resumable=True,
                   checkpoint_interval=INTERVAL)
    assert env.at(0.0) == [f"0.000 start {a} on h0:4", f"0.000 start {b} on h0:4"]
    return a, b


# name: (reports {run: time}, the run preempted at 2000 s). Without reports both runs are
# estimated to have 2000 s at risk and the first is taken; a report inside the run counts
# from the reported time; one from the future or before the run began is ignored.
CASES = {
    "no report: the first of two equal runs": ({}, "a"),
    "b checkpointed 100 s ago": ({"b": 1900.0}, "b"),
    "both reported, a more recently": ({"a": 1950.0, "b": 1900.0}, "a"),
    "both reported, b more recently": ({"a": 1500.0, "b": 1900.0}, "b"),
    "b's report is in the future: ignored": ({"b": 2500.0}, "a"),
    "b's report is before its run began: ignored": ({"b": -5.0}, "a"),
}


@pytest.mark.parametrize("case", CASES)
def test_rebalance_preempts_the_run_with_the_least_work_since_its_reported_checkpoint(
    env: Env, case: str
) -> None:
    """ai/vision's 4-GPU request at 2000 s preempts one of ai/llm's two runs: the one whose
    reported checkpoint leaves the least work at risk (a report the scheduler must ignore
    leaves the estimate from the declared interval)."""
    reports, expected = CASES[case]
    runs = dict(zip("ab", two_runs(env), strict=True))
    for name, t in reports.items():
        env.executor.checkpoint(runs[name], t)
    env.clock.set(2000.0)
    v = env.submit("ai/vision", gpus=4, min_runtime=600.0)
    assert env.at(2000.0) == [
        f"2000.000 preempt {runs[expected]} rebalance requeue=True by={v}",
        f"2000.000 start {v} on h0:4",
    ]


def test_a_report_is_folded_only_within_the_run_and_never_moves_back(env: Env) -> None:
    """The state's checkpoint time follows the reports that fall between the run's start
    and the pass: a later report moves it forward, an earlier one (a job setting its file's
    time back) or one ahead of the clock leaves it, until the clock has passed it."""
    a, _ = two_runs(env)
    st = env.sched.state
    assert st is not None

    def known() -> float | None:
        return st.running[a].checkpointed_at

    assert (env.at(100.0), known()) == ([], None)
    env.executor.checkpoint(a, 90.0)
    env.at(200.0)
    assert known() == 90.0
    env.executor.checkpoint(a, 50.0)  # moved back
    env.at(300.0)
    assert known() == 90.0
    env.executor.checkpoint(a, 450.0)  # ahead of the clock
    env.at(400.0)
    assert known() == 90.0
    env.at(500.0)  # the clock has passed it: now it is within the run
    assert known() == 450.0


def test_a_restarted_scheduler_learns_the_reported_checkpoint_again(env: Env) -> None:
    """The checkpoint time is not stored: after a restart the first pass's observation
    reports it again, and the rebuilt state has it."""
    a, _ = two_runs(env)
    env.executor.checkpoint(a, 150.0)
    env.at(200.0)
    sched = env.restart()
    st = sched.state
    assert st is not None and st.running[a].checkpointed_at == 150.0
