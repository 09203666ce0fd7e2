"""``--signal`` with the Slurm executor against a real Slurm cluster: ``signal()`` is
``scancel --signal``, with ``--batch`` for ``B:`` (the batch script passes it on)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors.slurm import SlurmExecutor

from .helpers import wait_for_state, wait_for_text

pytestmark = pytest.mark.slurm


def test_a_b_signal_reaches_the_command_through_the_batch_script_which_runs_on(
    executor: SlurmExecutor, tmp_path: Path,
) -> None:
    """``signal(job, USR1, batch=True)`` of a job launched with ``batch_signal`` USR1: the
    command (the batch shell the owner wrote) hears it through apportion's batch script and
    runs on (it writes after it); a stop then ends it with the command's own status."""
    log = tmp_path / "usr1.log"
    handle = executor.launch(Launch(
        workload_id="usr1", attempt=1, slots=(HostSlots("gpu3", (0,)),), log_path=str(log),
        batch_signal=signal.SIGUSR1,
        command=["bash", "-c", 'trap "echo got-USR1; heard=1" USR1; '
                 'trap "echo got-TERM; exit 0" TERM; echo started; while true; do '
                 'sleep 0.1 & wait $!; [ -n "$heard" ] && { echo ran-on; heard=; }; done'],
    ))
    wait_for_text(log, "started")
    executor.signal(handle, signal.SIGUSR1, True)
    wait_for_text(log, "got-USR1")
    assert executor.observe([handle])[handle].state is AttemptState.RUNNING
    wait_for_text(log, "ran-on")
    executor.stop(handle, grace_s=60)
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    assert (obs.exit_code, obs.signalled) == (0, True)
