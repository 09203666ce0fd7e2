"""What a host's death or a stop does to a workload, and what a preemption costs it: the
rules of ``apportion.core.consequences``, and that no driver decides them itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import apportion
from apportion.core import WORKLOAD_TRANSITIONS, Status
from apportion.core.consequences import on_host_death, on_stopped, preemption_cost

SRC = Path(apportion.__file__).parent


@pytest.mark.parametrize(("resumable", "cancelling", "expected"), [
    (True, False, Status.PENDING),
    (False, False, Status.LOST),
    (True, True, Status.CANCELLED),
    (False, True, Status.CANCELLED),
])
def test_host_death_requeues_resumable_work_and_loses_the_rest(
    resumable: bool, cancelling: bool, expected: Status
) -> None:
    """Resumable work on a dead host is requeued, other work is lost, work being cancelled
    ends cancelled; each is a legal transition from both running and stopping."""
    outcome = on_host_death(resumable, cancelling)
    assert outcome is expected
    assert outcome in WORKLOAD_TRANSITIONS[Status.RUNNING]
    assert outcome in WORKLOAD_TRANSITIONS[Status.STOPPING]


@pytest.mark.parametrize(("requeue", "cancelling", "expected"), [
    (True, False, Status.PENDING),
    (False, False, Status.PREEMPTED),
    (True, True, Status.CANCELLED),
    (False, True, Status.CANCELLED),
])
def test_a_stop_ends_as_the_preemption_or_cancellation_said(
    requeue: bool, cancelling: bool, expected: Status
) -> None:
    """A stop that took effect: requeued when the preemption said requeue, else preempted;
    a cancellation ends cancelled; each a legal transition out of stopping."""
    outcome = on_stopped(requeue, cancelling)
    assert outcome is expected
    assert outcome in WORKLOAD_TRANSITIONS[Status.STOPPING]


def test_preemption_keeps_whole_checkpoints_of_the_work_after_set_up() -> None:
    """Ran 1000 s, 120 s of them set-up, checkpoints every 300 s: 880 s of work, 600 s of it
    kept, 280 s lost."""
    cost = preemption_cost(1000.0, 120.0, 5000.0, 300.0)
    assert (cost.work, cost.kept, cost.lost) == (880.0, 600.0, 280.0)


def test_preemption_keeps_no_more_than_was_left() -> None:
    """A run that had 400 s of work left keeps at most 400 s, however many checkpoints."""
    assert preemption_cost(1000.0, 0.0, 400.0, 300.0).kept == 400.0


def test_preemption_during_set_up_costs_no_work() -> None:
    """Stopped before its set-up ended: no work done, none lost."""
    cost = preemption_cost(60.0, 120.0, 5000.0, 300.0)
    assert (cost.work, cost.kept, cost.lost) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(("interval", "resumes"), [(0.0, True), (300.0, False)])
def test_preemption_without_checkpoints_or_resume_loses_all_the_work(
    interval: float, resumes: bool
) -> None:
    """No checkpoint interval, or a run that will not resume: everything done is lost."""
    cost = preemption_cost(1000.0, 100.0, 5000.0, interval, resumes=resumes)
    assert (cost.work, cost.kept, cost.lost) == (900.0, 0.0, 900.0)


# ---- no driver decides it again -------------------------------------------------------------
# What deciding these rules outside core looks like: rounding work down to checkpoints, naming
# the final statuses a stop or a host's death ends in, choosing between requeue and an end.
RULES = {
    "checkpoint rounding": re.compile(r"\bfloor\("),
    "a stopped workload's final status": re.compile(r"Status\.(LOST|PREEMPTED)\b|[\"']lost[\"']"),
    "requeue or not": re.compile(r"Status\.PENDING\s+if\b"),
}


def test_host_death_and_preemption_cost_are_decided_only_in_core() -> None:
    """No module outside ``apportion.core`` (and its test harness) rounds work to
    checkpoints, names the status a stop or a host's death ends in, or chooses between
    requeue and an end; the same patterns do find the rules in ``core/consequences.py``
    (so the search would see a copy)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        # core holds the rules; the Slurm test harness only lists the final statuses it
        # waits for
        if path.is_relative_to(SRC / "core") or path.is_relative_to(SRC / "testing"):
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for what, rx in RULES.items():
                if rx.search(line):
                    found.append(f"{path.relative_to(SRC)}:{no}: {what}: {line.strip()}")
    assert found == []
    rules = (SRC / "core" / "consequences.py").read_text(encoding="utf-8")
    assert all(rx.search(rules) for rx in RULES.values())
