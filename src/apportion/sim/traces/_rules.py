"""Defaults for what most traces do not record, and stable pseudo-random choices.

Traces record what ran, not what its owner would have declared. These rules stand in for the
declaration; docs/traces.md explains and defends them. Every choice that looks random is a
hash of the job's id (or another key) and a seed, so the same trace imports to the same jobs
on every machine and every run (Python's ``hash`` is salted per process, so it is not used).
"""

from __future__ import annotations

import hashlib

MINUTE = 60.0
HOUR = 3600.0


def default_min_runtime(
    gpus: int,
    duration: float,
    *,
    max_min_runtime: float = 8 * HOUR,
    debug_max_gpus: int = 8,
    debug_max_duration: float = 15 * MINUTE,
    fraction: float = 0.25,
    floor: float = 30 * MINUTE,
) -> float:
    """The minimum runtime a job's owner would have declared, from its size and true length.

    * A *debug* job (``gpus <= debug_max_gpus`` and ``duration <= debug_max_duration``) is
      protected for its whole run: ``duration`` (at most 15 min, so it stays a debug workload).
    * Any other job: ``max(floor, fraction * duration)``, at most ``duration`` and at most
      ``max_min_runtime``. A quarter of the run, but never under 30 min (about one checkpoint
      interval: less would make protection worthless) and never over the policy's cap.

    The defaults match :class:`apportion.core.PolicyConfig`'s defaults (8 h cap, debug = at
    most 8 GPUs and at most 15 min)."""
    if gpus <= debug_max_gpus and duration <= debug_max_duration:
        return duration
    return min(duration, max_min_runtime, max(floor, fraction * duration))


def default_resumable(duration: float, resumable_after: float = HOUR) -> bool:
    """Jobs that ran longer than ``resumable_after`` (1 h) are taken to checkpoint and resume:
    nobody runs many hours of GPU work without checkpoints, and short jobs simply restart."""
    return duration > resumable_after


def stable_unit(*parts: object) -> float:
    """A number in ``[0, 1)`` that depends only on ``parts`` (same on every run and machine)."""
    key = "\x1f".join(str(p) for p in parts).encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def stable_bucket(key: str, n: int, seed: int = 0) -> int:
    """``key``'s bucket among ``n``, fixed for a given key and seed."""
    return int(stable_unit(seed, "budget", key) * n)
