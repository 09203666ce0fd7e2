"""The policy's knobs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from .types import CoreError, WorkloadSpec
from .units import format_duration, format_duration_exact

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
CHECKPOINT_WAIT = 10 * MINUTE  # checkpoint_wait's default (see policy_from)


NUMBER_KNOBS: Final = frozenset({"rebalance_margin", "admission_charge", "victim_max_factor"})
"""The float knobs of :class:`PolicyConfig` that are plain numbers (a margin, a charge
multiple, a factor): every parser of settings reads them with ``parse_number``, so ``2h``
is refused rather than read as 7,200. Every other float knob is a duration in seconds. (A
set of names rather than an annotation on the fields: the compiled build keeps only the
plain types of a class's annotations.)"""


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Every knob of the policy. Durations in seconds."""

    lookback: float = 7 * DAY
    """Sliding window over which usage ratios are measured."""
    max_min_runtime: float = 8 * HOUR
    """Cap on a workload's declared minimum runtime (its protection)."""
    debug_max_gpus: int = 8
    debug_max_min_runtime: float = 15 * MINUTE
    debug_lane: bool = True
    """Try pending debug work (see :func:`is_debug`) first, on free GPUs or by displacing
    unallocated work, before the Fair Tree walk (each budget's in its queue order, the
    budget whose next debug job was submitted first going next); only while a budget's
    running debug work, with the new job, holds at most ``debug_max_gpus`` GPUs (see
    docs/policy.md, "Debug work")."""
    rebalance: bool = True
    """Preempt allocated work past its minimum runtime to rebalance (False: only unallocated
    work is ever displaced, and the share guarantee no longer holds)."""
    rebalance_margin: float = 0.10
    """Hysteresis of the fair-share rule: the victim's usage ratio must exceed the
    preemptor's (after the swap) by this fraction."""
    admission_charge: float = 1.0
    """Provisional charge on admission, as a multiple of ``gpus x min_runtime``."""
    default_checkpoint_interval: float = 30 * MINUTE
    """Assumed checkpoint interval when a workload declares none (for progress-lost estimates)."""
    default_time_limit: float = 0.0
    """Time limit given to work submitted without one (0: none, it runs until it exits)."""
    max_time_limit: float = 0.0
    """Cap on a workload's time limit (0: no cap). With a cap, work must have a limit."""
    restart_protection: float = 1 * HOUR
    """A restarted (requeued, resumable) allocated workload is no rebalance victim for this
    long after its restart: no workload is moved twice in quick succession (no churn)."""
    checkpoint_wait: float = CHECKPOINT_WAIT
    """A rebalance whose victims all checkpoint within this long waits for those checkpoints
    instead of destroying their progress (0: never waits). Never past the preemptor's
    ``queued_at + max_min_runtime``, so the share guarantee's bound holds. At most
    ``max_min_runtime``; settings that do not give it take the shorter of the two
    (:func:`policy_from`)."""
    victim_max_factor: float = 2.0
    """A rebalance takes no victim holding more than this many times the preemptor's GPUs
    (for debug work, no more than ``debug_max_gpus`` either way), until the preemptor has
    waited ``max_min_runtime - 1 h`` since it was queued (``preemption.size_bound_lifts``):
    then any victim, so the share guarantee holds. Keeps a small request from destroying a
    large run's progress while smaller room may yet come free (0: no bound; see
    docs/policy.md, "Victim size bound")."""
    reservations: int = 0
    """How many large workloads (more than one host's GPUs) of owed budgets may hold a
    reservation of whole hosts at once (0: none; see :mod:`apportion.core.reservations`).
    Off by default: measured on five seeds, one reservation shortened large runs' waits
    but cost more lost work and, on four seeds of five, attainment (docs/policy.md)."""
    shortcuts: bool = True
    """Let a pass skip what it can prove would fail: the failed-size and charge thresholds,
    hopeless queues, the rebalance bound, searches within reach, the free-GPU bounds and the
    usage answers it keeps. False gives the reference pass, which tries every request with
    a full search over every host and recomputes every usage ratio: the same decisions,
    only slower (tests/core/test_oracles.py compares the two on every pass)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                continue
            if not isinstance(value, int | float) or value != value or value < 0:
                raise CoreError(f"policy: {f.name}: must be a number >= 0, got {value!r}")
        if self.lookback <= 0:
            raise CoreError("policy: lookback: must be > 0")
        if self.max_min_runtime <= 0:
            raise CoreError("policy: max_min_runtime: must be > 0")
        if self.max_time_limit and not 0 < self.default_time_limit <= self.max_time_limit:
            raise CoreError(
                "policy: default_time_limit: must be > 0 and at most max_time_limit "
                f"({format_duration(self.max_time_limit)}) when that is set"
            )
        if self.checkpoint_wait > self.max_min_runtime:
            raise CoreError(
                f"policy: checkpoint_wait: {format_duration_exact(self.checkpoint_wait)} is over "
                f"max_min_runtime ({format_duration_exact(self.max_min_runtime)})"
            )
        if self.restart_protection > self.max_min_runtime:
            # the share guarantee waits for victims' protections: at most max_min_runtime
            raise CoreError(
                f"policy: restart_protection: "
                f"{format_duration_exact(self.restart_protection)} is over "
                f"max_min_runtime ({format_duration_exact(self.max_min_runtime)})"
            )


def policy_from(settings: Mapping[str, Any]) -> PolicyConfig:
    """The :class:`PolicyConfig` of the knobs ``settings`` gives (a config file's
    ``[policy]``, a simulation's ``--set``), every other at its default; but
    ``checkpoint_wait``, which may not be longer than ``max_min_runtime``, defaults to the
    shorter of its 10 min and ``max_min_runtime``: a short ``max_min_runtime`` alone is a
    valid setting (it was refused for a default nobody set). A configuration default, not a
    rule: with ``max_min_runtime`` of 10 min or more it is the same 10 min."""
    values = dict(settings)
    short = values.get("max_min_runtime")
    if "checkpoint_wait" not in values and isinstance(short, int | float):
        values["checkpoint_wait"] = min(CHECKPOINT_WAIT, short)
    return PolicyConfig(**values)


def is_debug(spec: WorkloadSpec, config: PolicyConfig) -> bool:
    """A debug workload: few GPUs and a short minimum runtime; its owner is waiting at a
    terminal. (Unallocated work is not debug work: nobody is owed anything for it.)"""
    return (
        spec.allocated
        and spec.gpus <= config.debug_max_gpus
        and spec.min_runtime <= config.debug_max_min_runtime
    )


SIZE_CLASSES = ("1", "2-8", "9-64", "65+")
"""Size classes of requests, by GPUs asked, for reporting waits: one GPU, one host, a few
hosts, a large gang (on the seed scenario, whose multi-host runs ask 16, 32, 64 or 128 GPUs,
the last two are its 16-64 and 128 classes). No rule decides by them."""


def size_class(gpus: int) -> str:
    """The size class (``SIZE_CLASSES``) of a request of ``gpus``."""
    if gpus <= 1:
        return "1"
    if gpus <= 8:
        return "2-8"
    return "9-64" if gpus <= 64 else "65+"


