"""The usage ledger: GPU-seconds per budget over a sliding window, for any ``now``.

Each series (charged GPU-seconds of a budget node, free GPU-seconds of a budget node, and the
cluster's healthy GPUs) is a piecewise-linear cumulative function ``C(t)`` kept as
breakpoints where its rate changed. Usage in the window ``(now - W, now]`` is
``C(now) - C(now - W)``: two binary searches, whatever the history's length. Updates append
a breakpoint (amortised O(1)) and old breakpoints are pruned past the longest window asked
for, so memory follows the number of rate changes in one window.

Charges go to a leaf and to every ancestor, so a subtree's usage is one lookup.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Final

from .tree import ancestors
from .types import CoreError

CAPACITY: Final = "\x00capacity"  # series key of the cluster's healthy GPUs


def usage_ratio(charged: float, share: float, capacity: float) -> float:
    """The usage ratio, the policy's sort metric: ``charged`` GPU-seconds of a budget node
    in the lookback window over its ``share`` of the ``capacity`` (healthy GPU-seconds in
    the window). A window with no healthy GPU-second yet counts as one, so the ratio is
    always a number. Every reader of a usage ratio (the pass, the API, the metrics, the
    simulator's tables) computes it here."""
    return charged / (share * max(capacity, 1.0))


class _Series:
    __slots__ = ("cum", "hint", "rate", "rates", "times")

    def __init__(self, t: float) -> None:
        self.times: list[float] = [t]
        self.cum: list[float] = [0.0]
        self.rates: list[float] = [0.0]
        self.rate = 0.0
        # where the last lookup into the past landed: the window's start moves forward with
        # the clock, so the next one is usually there or a few breakpoints on
        self.hint = 0

    def value(self, t: float) -> float:
        times = self.times
        if t >= times[-1]:
            return self.cum[-1] + self.rate * (t - times[-1])
        i = self.hint
        if not (i < len(times) and times[i] <= t):
            i = bisect_right(times, t) - 1
            if i < 0:
                return self.cum[0]  # before the first kept breakpoint: nothing was used yet
        else:
            steps = 0
            while times[i + 1] <= t:  # times[-1] > t: stops inside the list
                i += 1
                steps += 1
                if steps == 8:  # far from the hint: search instead
                    i = bisect_right(times, t) - 1
                    break
        self.hint = i
        return self.cum[i] + self.rates[i] * (t - times[i])

    def change_rate(self, delta: float, t: float) -> None:
        last = self.times[-1]
        if t < last:
            raise CoreError(f"ledger: time went backwards ({t} < {last})")
        if t > last:
            self.cum.append(self.cum[-1] + self.rate * (t - last))
            self.times.append(t)
            self.rates.append(self.rate)
        self.rate += delta
        if abs(self.rate) < 1e-9:
            self.rate = 0.0
        self.rates[-1] = self.rate

    def amend(self, delta: float, t0: float, t1: float) -> None:
        """Add ``delta`` to the rate over ``[t0, t1)`` (``t1`` no later than the ledger's
        last update); a part before the first kept breakpoint is gone and stays so."""
        t0 = max(t0, self.times[0])
        if t1 <= t0:
            return
        i0 = self._breakpoint(t0)
        i1 = self._breakpoint(t1)
        times, cum, rates = self.times, self.cum, self.rates
        for j in range(i0, i1):
            rates[j] += delta
            if abs(rates[j]) < 1e-9:
                rates[j] = 0.0
        for j in range(i0 + 1, len(times)):
            cum[j] += delta * (min(times[j], t1) - t0)
        self.rate = rates[-1]
        self.hint = 0  # breakpoints were inserted: indexes moved

    def _breakpoint(self, t: float) -> int:
        """The index of a breakpoint at ``t`` (not before the first), made if missing."""
        times = self.times
        i = bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return i
        cum = self.cum[i - 1] + self.rates[i - 1] * (t - times[i - 1])
        times.insert(i, t)
        self.cum.insert(i, cum)
        self.rates.insert(i, self.rates[i - 1])
        return i

    def prune(self, horizon: float) -> None:
        i = bisect_right(self.times, horizon) - 1
        if i > 64:  # amortise: slice only when a good chunk is dead
            del self.times[:i], self.cum[:i], self.rates[:i]
            self.hint = 0


class UsageLedger:
    """Charged (allocated) and free (unallocated) GPU-seconds per budget node, and the
    cluster's healthy GPU-seconds, over any window ending at any time not before the last
    update. Mutated only by drivers (through :class:`~apportion.core.state.ClusterState`);
    the policy only reads it."""

    __slots__ = (
        "_charged", "_free", "_horizon", "_last", "_memo", "_memo_at", "_start", "_updates"
    )

    def __init__(self, start: float = 0.0, keep: float = 30 * 86400.0) -> None:
        self._start = start
        self._last = start
        self._horizon = keep
        self._charged: dict[str, _Series] = {}
        self._free: dict[str, _Series] = {}
        self._updates = 0
        # charged windows ending at one time, as asked: a change at that time or later
        # cannot move them (the repeat passes at an instant ask the same ones again)
        self._memo_at = (float("nan"), float("nan"))  # (now, window)
        self._memo: dict[str, float] = {}

    # ---- updates ---------------------------------------------------------------------
    def _bump(self, table: dict[str, _Series], key: str, delta: float, t: float) -> None:
        s = table.get(key)
        if s is None:
            s = table[key] = _Series(self._start)
        s.change_rate(delta, t)

    def change(self, budget: str, gpus: float, t: float, charged: bool) -> None:
        """From ``t`` on, ``budget`` (a leaf) uses ``gpus`` more GPUs (negative: fewer)."""
        if t < self._last:
            raise CoreError(f"ledger: time went backwards ({t} < {self._last})")
        self._last = t
        if t < self._memo_at[0]:
            self._memo.clear()
        table = self._charged if charged else self._free
        for node in ancestors(budget):
            self._bump(table, node, gpus, t)
        self._updates += 1
        if self._updates % 512 == 0:
            horizon = t - self._horizon
            for series in (*self._charged.values(), *self._free.values()):
                series.prune(horizon)

    def amend(self, budget: str, gpus: float, t0: float, t1: float, charged: bool) -> None:
        """Correct the past: ``budget`` (a leaf) used ``gpus`` more GPUs (negative: fewer) on
        ``[t0, t1)`` than was recorded, ``t1`` no later than the last update. For a driver
        that learns when work really ended only after its clock moved on (the live service
        reads an exit at the pass after it happened): the windows then count what was used."""
        if t1 > self._last:
            raise CoreError(f"ledger: amend: {t1} is after the last update ({self._last})")
        self._memo_at = (float("nan"), float("nan"))  # kept windows may cover [t0, t1)
        self._memo = {}
        table = self._charged if charged else self._free
        for node in ancestors(budget):
            s = table.get(node)
            if s is None:
                s = table[node] = _Series(self._start)
            s.amend(gpus, t0, t1)

    def change_capacity(self, gpus: float, t: float) -> None:
        """From ``t`` on, the cluster has ``gpus`` more healthy GPUs (negative: fewer)."""
        if t < self._last:
            raise CoreError(f"ledger: time went backwards ({t} < {self._last})")
        self._last = t
        if t < self._memo_at[0]:
            self._memo.clear()
        self._bump(self._charged, CAPACITY, gpus, t)

    # ---- queries ---------------------------------------------------------------------
    def _window(self, table: dict[str, _Series], key: str, now: float, window: float) -> float:
        s = table.get(key)
        if s is None:
            return 0.0
        return s.value(now) - s.value(now - window)

    def charged(self, node: str, now: float, window: float, memo: bool = True) -> float:
        """Allocated GPU-seconds of ``node``'s subtree in ``(now - window, now]``. (``memo``
        False: worked out afresh, neither read from nor kept in the windows kept.)"""
        if not memo:
            return self._window(self._charged, node, now, window)
        if self._memo_at != (now, window):
            self._memo_at = (now, window)
            self._memo = {}
        value = self._memo.get(node)
        if value is None:
            value = self._memo[node] = self._window(self._charged, node, now, window)
        return value

    def free(self, node: str, now: float, window: float) -> float:
        """Unallocated GPU-seconds of ``node``'s subtree in ``(now - window, now]``."""
        return self._window(self._free, node, now, window)

    def capacity(self, now: float, window: float) -> float:
        """Healthy GPU-seconds of the cluster in ``(now - window, now]``."""
        return self._window(self._charged, CAPACITY, now, window)

    def charged_total(self, node: str, now: float) -> float:
        """All allocated GPU-seconds of ``node`` since the ledger began (kept history only)."""
        s = self._charged.get(node)
        return 0.0 if s is None else s.value(now)

    def rate(self, node: str, charged: bool = True) -> float:
        """GPUs ``node``'s subtree uses right now."""
        s = (self._charged if charged else self._free).get(node)
        return 0.0 if s is None else s.rate

    def fingerprint(self) -> dict[str, object]:
        """Everything the ledger holds, by attribute, for tests that prove a reader changed
        nothing; all but the windows kept for repeat lookups (``_memo``, ``_memo_at``) and
        each series' lookup ``hint``, which change no answer (tests/core/test_ledger.py)."""
        def dump(table: dict[str, _Series]) -> tuple[object, ...]:
            return tuple(
                (k, tuple(s.times), tuple(s.cum), tuple(s.rates), s.rate)
                for k, s in sorted(table.items())
            )

        return {
            "start": self._start,
            "last": self._last,
            "horizon": self._horizon,
            "updates": self._updates,
            "charged": dump(self._charged),
            "free": dump(self._free),
        }
