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
first asked, dropped whenever the leaf's allocated queue changes), and rebuilt and compared
from the pending work by the index oracle of the tests.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Final

# An entry of a leaf's queue: (queue key, workload id), as ClusterState.queues holds them.
Entry = tuple[tuple[int, float, str], str]

_INF: Final = float("inf")


class GpusQueue:
    """One leaf's pending allocated requests of one GPU count, in queue order, with the
    minimum runtime of each."""

    __slots__ = ("entries", "min_runtimes", "_size", "_tree")

    def __init__(self, items: Iterable[tuple[Entry, float]]) -> None:
        pairs = list(items)  # in queue order
        self.entries: list[Entry] = [e for e, _ in pairs]
        self.min_runtimes: list[float] = [m for _, m in pairs]
        size = 1
        while size < len(pairs):
            size *= 2
        self._size = size
        # a complete binary tree over the leaves [size, 2 size): each node holds the least
        # minimum runtime below it (infinity past the last entry)
        tree = [_INF] * (2 * size)
        tree[size : size + len(pairs)] = self.min_runtimes
        for i in range(size - 1, 0, -1):
            left, right = tree[2 * i], tree[2 * i + 1]
            tree[i] = left if left < right else right
        self._tree = tree

    def position(self, entry: Entry) -> int:
        """Where ``entry`` is, or would go, in queue order."""
        return bisect_left(self.entries, entry)

    def first_below(self, start: int, bound: float) -> int:
        """The first position at or after ``start`` whose minimum runtime is below ``bound``,
        or -1 if there is none."""
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
