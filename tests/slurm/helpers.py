"""Polling helpers for the Slurm tests (a deadline only to fail, never to measure)."""

from __future__ import annotations

import time
from pathlib import Path

from apportion.service.executor import AttemptState, Observation
from apportion.service.executors.slurm import SlurmExecutor


def wait_for_state(
    ex: SlurmExecutor, handle: str, state: AttemptState, timeout_s: float = 60.0
) -> Observation:
    """Poll ``observe`` until the handle reaches ``state``; fail with the last observation."""
    deadline = time.monotonic() + timeout_s
    while True:
        obs = ex.observe([handle])[handle]
        if obs.state is state:
            return obs
        if time.monotonic() > deadline:
            raise AssertionError(f"job {handle} not {state.value} after {timeout_s} s: {obs}")
        time.sleep(0.2)


def wait_for_text(path: Path, text: str, timeout_s: float = 60.0) -> str:
    """Poll a log file until it contains ``text``; return its content."""
    deadline = time.monotonic() + timeout_s
    while True:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: no {text!r} after {timeout_s} s; has {content!r}")
        time.sleep(0.1)


# a heartbeat a test job writes every 0.1 s: one line appended each time, so a kill in the
# middle of a write leaves the earlier lines whole (``date > file`` would leave it empty)
BEAT = 'trap "" TERM; while :; do date +%s.%N >> {}; sleep 0.1; done'


def last_beat(path: Path) -> float:
    """The time of the last whole line of a :data:`BEAT` file."""
    return float([line for line in path.read_text().splitlines(keepends=True)
                  if line.endswith("\n")][-1])
