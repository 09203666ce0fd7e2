"""A leaf's pending allocated work grouped by GPU count, for skipping what cannot start.

Within one pass, whether a pending allocated request can still get anywhere depends only on
its budget, its GPU count and its minimum runtime (through its admission charge), and the
set of those that cannot only grows as the pass goes (see ``Pass.doomed`` in
:mod:`apportion.core.policy`): for one budget and one GPU count, the requests still worth
trying are exactly those with a minimum runtime below some bound. A deep queue is mostly
such hopeless work, and walking it one request at a time is what made a pass cost in
proportion to the queue's depth.

:class:`GpusQueue` holds one leaf's pending allocated work of one GPU count in queue order,
with a min-tree of their minimum runtimes, so that "the first request at or after this place
in the queue whose minimum runtime is below ``bound``" is a descent of the tree instead of
a walk. The pass asks it once per GPU count of the leaf each time it would otherwise walk
over hopeless work.

These are derived answers, kept in :class:`~apportion.core.state.DerivedCache` (built when
first asked, then kept up to date as the leaf's allocated work is queued and leaves), and
rebuilt and compared from the pending work by the index oracle of the tests.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Final

# An entry of a leaf's queue: (queue key, workload id), as ClusterState.queues holds them.
Entry = tuple[tuple[int, float, str], str]

_INF: Final = float("inf")
_GAP: Final = -1.0  # the minimum runtime of a gap (a request's is never negative)


class GpusQueue:
    """One leaf's pending allocated requests of one GPU count, in queue order, with the
    minimum runtime of each.

    Kept up to date as requests are queued and leave (:meth:`add`, :meth:`discard`) rather
    than rebuilt from the whole queue after each: a request that leaves stays in
    ``entries`` as a gap (minimum runtime -1, infinite in the tree), so that no bound
    finds it and the places of the others do not move (a queued request goes at the end,
    the common case, or into the gap its earlier attempt left): O(log n) each. One queued
    inside the queue (a higher priority) rebuilds the tree; so does dropping the gaps, once
    they outnumber the requests by 16."""

    __slots__ = ("entries", "live", "min_runtimes", "_size", "_tree")

    def __init__(self, items: Iterable[tuple[Entry, float]]) -> None:
        pairs = list(items)  # in queue order
        self.entries: list[Entry] = [e for e, _ in pairs]
        self.min_runtimes: list[float] = [m for _, m in pairs]
        self.live = len(pairs)  # entries that are not gaps
        self._size = 1
        self._tree: list[float] = []
        self._build()

    def _build(self) -> None:
        """The tree over ``entries`` as they are, room for at least one more."""
        size = 1
        while size <= len(self.entries):
            size *= 2
        self._size = size
        # a complete binary tree over the leaves [size, 2 size): each node holds the least
        # minimum runtime below it (infinity for gaps and past the last entry)
        tree = [_INF] * (2 * size)
        for at, min_runtime in enumerate(self.min_runtimes):
            tree[size + at] = _INF if min_runtime == _GAP else min_runtime
        for i in range(size - 1, 0, -1):
            left, right = tree[2 * i], tree[2 * i + 1]
            tree[i] = left if left < right else right
        self._tree = tree

    def _set(self, at: int, min_runtime: float) -> None:
        """Leaf ``at`` of the tree holds ``min_runtime``; its ancestors follow."""
        tree = self._tree
        i = at + self._size
        tree[i] = min_runtime
        i >>= 1
        while i:
            left, right = tree[2 * i], tree[2 * i + 1]
            least = left if left < right else right
            if tree[i] == least:
                break  # unchanged here, so above too
            tree[i] = least
            i >>= 1

    def items(self) -> list[tuple[Entry, float]]:
        """The requests held, gaps left out, in queue order."""
        runtimes = self.min_runtimes
        held: list[tuple[Entry, float]] = []
        for at, entry in enumerate(self.entries):
            if runtimes[at] != _GAP:
                held.append((entry, runtimes[at]))
        return held

    def add(self, entry: Entry, min_runtime: float) -> None:
        """Hold ``entry``, newly queued, with its minimum runtime."""
        entries = self.entries
        at = bisect_left(entries, entry)
        self.live += 1
        if at < len(entries) and entries[at] == entry:  # back in its earlier attempt's gap
            self.min_runtimes[at] = min_runtime
            self._set(at, min_runtime)
        elif at == len(entries) and at < self._size:  # at the end, and the tree has room
            entries.append(entry)
            self.min_runtimes.append(min_runtime)
            self._set(at, min_runtime)
        else:  # inside the queue, or the tree is full: places move, the tree is rebuilt
            entries.insert(at, entry)
            self.min_runtimes.insert(at, min_runtime)
            self._build()

    def discard(self, entry: Entry) -> None:
        """Forget ``entry``, which left the queue (started or cancelled)."""
        at = bisect_left(self.entries, entry)
        if at == len(self.entries) or self.entries[at] != entry:
            return
        if self.min_runtimes[at] == _GAP:
            return  # a gap already
        self.live -= 1
        self.min_runtimes[at] = _GAP
        self._set(at, _INF)
        if len(self.entries) >= 2 * self.live + 16:  # mostly gaps: drop them
            kept = self.items()
            self.entries = [e for e, _ in kept]
            self.min_runtimes = [m for _, m in kept]
            self._build()

    def position(self, entry: Entry) -> int:
        """Where ``entry`` is, or would go, in queue order (gaps count as places)."""
        return bisect_left(self.entries, entry)

    def first_below(self, start: int, bound: float) -> int:
        """The first position at or after ``start`` whose minimum runtime is below ``bound``,
        or -1 if there is none (never a gap)."""
        size, tree = self._size, self._tree
        if start >= len(self.entries) or tree[1] >= bound:
            return -1
        i = start + size
        while tree[i] >= bound:
            # nothing below here: move to the next subtree on the right, climbing while i
            # is a right child (the root's "parent" 0 means the end was reached)
            while i & 1:
                i >>= 1
            if i == 0:
                return -1
            i += 1
        while i < size:  # descend to the leftmost leaf below the bound
            i = 2 * i if tree[2 * i] < bound else 2 * i + 1
        return i - size


__all__ = ["Entry", "GpusQueue"]
