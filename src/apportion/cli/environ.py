"""The variables ``apportion`` sets in its own environment, kept apart from the user's:
``submit`` exports the environment the user started it with (``--export ALL``), not them."""

from __future__ import annotations

import os

_SET_HERE: dict[str, str] = {}  # name -> value this process set


def limit_openblas_threads() -> None:
    """``OPENBLAS_NUM_THREADS=1`` for this process and the processes it starts, unless the
    user set it. NumPy's OpenBLAS starts a thread per core that spins for a while after
    each call: on the small arrays of the simulator and the reports they buy nothing, and
    their spinning is counted in the process's CPU time (a short ``apportion bench`` read
    twice its real cost). Call it before anything imports NumPy."""
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        os.environ["OPENBLAS_NUM_THREADS"] = _SET_HERE["OPENBLAS_NUM_THREADS"] = "1"


def user_environ() -> dict[str, str]:
    """The environment the user started apportion with: ``os.environ`` without what
    :func:`limit_openblas_threads` set."""
    return {k: v for k, v in os.environ.items() if _SET_HERE.get(k) != v}
