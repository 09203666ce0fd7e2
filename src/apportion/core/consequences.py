"""What becomes of work that stops against its will, and what the stop costs it.

The policy decides *that* a workload stops (a preemption) and the world decides the rest
(a host dies, an attempt vanishes, a stop takes effect). What follows is a rule of its own:
which status the workload ends in, and how much of its progress a resumed run keeps. Both
drivers (the simulator's engine and the live scheduler with its in-memory executor) apply
these functions instead of deciding it themselves, so they cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .lifecycle import Status


def on_host_death(resumable: bool, cancelling: bool = False) -> Status:
    """The status of a workload whose host died under it (or whose attempt vanished: the
    executor has no trace of it): requeued (``PENDING``) if it can resume from a checkpoint,
    else ``LOST``. A cancellation already under way ends it as ``CANCELLED``."""
    if cancelling:
        return Status.CANCELLED
    return Status.PENDING if resumable else Status.LOST


def on_stopped(requeue: bool, cancelling: bool = False, timed_out: bool = False) -> Status:
    """The status of a workload once a stop it was sent has taken effect: ``CANCELLED`` if
    the stop was a cancellation, ``TIMEOUT`` if it was stopped at its time limit, else
    requeued (``PENDING``) when the preemption said so, else ``PREEMPTED``."""
    if cancelling:
        return Status.CANCELLED
    if timed_out:
        return Status.TIMEOUT
    return Status.PENDING if requeue else Status.PREEMPTED


@dataclass(frozen=True, slots=True)
class RunCost:
    """What a stopped run leaves behind: ``work`` seconds of progress it made (its set-up
    excluded), ``kept`` of them saved by checkpoints; ``lost`` is the rest."""

    work: float
    kept: float

    @property
    def lost(self) -> float:
        return self.work - self.kept


def preemption_cost(
    ran: float, setup: float, left: float, checkpoint_interval: float, resumes: bool = True,
    on_term: bool = False,
) -> RunCost:
    """The cost of stopping a run that ran ``ran`` seconds, the first ``setup`` of them
    spent setting up (restart overhead: not progress), with ``left`` seconds of work still
    to do when it started. A run that ``resumes`` keeps its progress up to its last
    checkpoint (whole multiples of ``checkpoint_interval``; 0: none kept), never more than
    was left; one that does not resume keeps nothing. ``on_term``: it was told to stop
    (SIGTERM, not a host dying) and checkpoints then, so it keeps all its progress."""
    work = max(0.0, ran - setup)
    c = checkpoint_interval
    if resumes and on_term:
        kept = min(work, left)
    else:
        kept = min(math.floor(work / c) * c, left) if resumes and c > 0 else 0.0
    return RunCost(work, kept)
