"""The scheduler's only source of time, injected so tests and the parity check control it."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds since the epoch (or since any fixed origin: the scheduler only compares)."""

    def now(self) -> float: ...


class WallClock:
    """Real time: ``time.time()``."""

    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to; never goes backwards."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def set(self, t: float) -> None:
        """Jump to ``t`` (not before the current time)."""
        with self._lock:
            if t < self._t:
                raise ValueError(f"FakeClock: time went backwards ({t} < {self._t})")
            self._t = float(t)

    def advance(self, dt: float) -> float:
        """Move forward by ``dt`` seconds; return the new time."""
        if dt < 0:
            raise ValueError(f"FakeClock: advance: dt must be >= 0, got {dt}")
        with self._lock:
            self._t += dt
            return self._t
