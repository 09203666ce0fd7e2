"""The budget tree: proportional weights from leadership down to researchers.

Paths are slash-separated names below an implicit root (``"ai/llm/alice"``). A node's share
is the product of ``weight / sum(sibling weights)`` along its path, so the leaves' shares
sum to 1. Workloads draw on leaves only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from .names import did_you_mean
from .types import CoreError

ROOT: Final = ""
# Weights outside this range are refused: with them every share stays a normal float far
# from 0 and every sum of sibling weights stays finite, so no pass divides by zero.
MIN_WEIGHT = 1e-6
MAX_WEIGHT = 1e6
# A node with a smaller share of the cluster than this (a deep tree of tiny weights) is
# refused too: usage ratios divide by shares, and must stay far from overflowing. Two
# siblings at the ends of the weight range (1e-12) are within it.
MIN_SHARE: Final = 1e-15


@dataclass(frozen=True, slots=True)
class BudgetNode:
    path: str
    weight: float = 1.0


def parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ROOT


@lru_cache(maxsize=1 << 16)
def ancestors(path: str) -> tuple[str, ...]:
    """``path`` and every node above it, leaf first, root (``""``) last. Cached: the pass
    asks for the same few hundred paths many thousands of times."""
    out = [path]
    while path:
        path = parent_of(path)
        out.append(path)
    return tuple(out)


class BudgetTree:
    """An immutable, validated tree. Build it with :meth:`build`."""

    __slots__ = (
        "_children", "_depth", "_div", "_lineage", "_nodes", "_parent", "_share", "_weight",
        "leaves",
    )

    def __init__(
        self,
        weights: Mapping[str, float],
        children: Mapping[str, tuple[str, ...]],
    ) -> None:
        self._weight = dict(weights)
        self._children = dict(children)
        self._share: dict[str, float] = {ROOT: 1.0}
        self._depth: dict[str, int] = {ROOT: 0}
        # the node's own parent string: looked up by the pass thousands of times, and a
        # string made afresh by splitting would be hashed afresh as a dict key each time
        self._parent: dict[str, str] = {}
        self._lineage: dict[str, tuple[str, ...]] = {ROOT: ()}
        stack = [ROOT]
        while stack:
            node = stack.pop()
            kids = self._children.get(node, ())
            total = sum(self._weight[k] for k in kids)
            for k in kids:
                self._parent[k] = node
                self._lineage[k] = (k, *self._lineage[node])
                self._share[k] = self._share[node] * self._weight[k] / total
                self._depth[k] = self._depth[node] + 1
                stack.append(k)
        self.leaves: tuple[str, ...] = tuple(
            sorted(p for p in self._weight if not self._children.get(p))
        )
        nodes: list[str] = []
        todo = list(reversed(self._children.get(ROOT, ())))
        while todo:
            node = todo.pop()
            nodes.append(node)
            todo.extend(reversed(self._children.get(node, ())))
        self._nodes = tuple(nodes)
        self._div: dict[tuple[str, str], tuple[str, str] | None] = {}  # memo: tree is immutable

    @classmethod
    def build(cls, nodes: Iterable[BudgetNode | tuple[str, float]]) -> BudgetTree:
        """Validate and build. Missing intermediate nodes get weight 1.

        Raises :class:`CoreError` naming the bad node: empty or malformed path, duplicate
        path, weight outside ``MIN_WEIGHT..MAX_WEIGHT`` (NaN included), a share below
        ``MIN_SHARE``. (Cycles cannot be written as paths; ids that loop are caught by
        :func:`from_parent_links`.)
        """
        weights: dict[str, float] = {}
        explicit: set[str] = set()
        for item in nodes:
            node = item if isinstance(item, BudgetNode) else BudgetNode(item[0], float(item[1]))
            path = node.path
            if not path or path.startswith("/") or path.endswith("/") or "//" in path:
                raise CoreError(f"budget {path!r}: path: must be names joined by '/'")
            if path in explicit:
                raise CoreError(f"budget {path!r}: path: duplicate")
            if not (MIN_WEIGHT <= node.weight <= MAX_WEIGHT):  # NaN fails this too
                raise CoreError(
                    f"budget {path!r}: weight: must be a number from {MIN_WEIGHT:g} to "
                    f"{MAX_WEIGHT:g}, got {node.weight}"
                )
            explicit.add(path)
            weights[path] = float(node.weight)
        for path in list(weights):
            for anc in ancestors(path)[1:-1]:
                weights.setdefault(anc, 1.0)
        if not weights:
            raise CoreError("budget tree: must have at least one budget")
        children: dict[str, list[str]] = {}
        for path in weights:
            children.setdefault(parent_of(path), []).append(path)
        tree = cls(weights, {k: tuple(sorted(v)) for k, v in children.items()})
        for path in tree.nodes():
            if not tree._share[path] >= MIN_SHARE:
                raise CoreError(
                    f"budget {path!r}: weight: its share of the cluster "
                    f"({tree._share[path]:.3g}) is below {MIN_SHARE:g}"
                )
        return tree

    @classmethod
    def from_parent_links(
        cls, links: Iterable[tuple[str, str | None, float]]
    ) -> BudgetTree:
        """Build from ``(name, parent_name or None, weight)`` rows, as a database holds them.

        Raises :class:`CoreError` on an unknown parent or a cycle, naming the node.
        """
        rows: dict[str, tuple[str | None, float]] = {}
        for name, parent, weight in links:
            if name in rows:
                raise CoreError(f"budget {name!r}: name: duplicate")
            if "/" in name or not name:
                raise CoreError(f"budget {name!r}: name: must be non-empty without '/'")
            rows[name] = (parent, weight)
        paths: dict[str, str] = {}
        for name in rows:
            chain: list[str] = []
            cur: str | None = name
            while cur is not None:
                if cur in chain:
                    raise CoreError(f"budget {name!r}: parent: cycle through {cur!r}")
                if cur not in rows:
                    raise CoreError(f"budget {chain[-1]!r}: parent: unknown budget {cur!r}")
                chain.append(cur)
                cur = rows[cur][0]
            paths[name] = "/".join(reversed(chain))
        return cls.build(BudgetNode(paths[n], w) for n, (_, w) in rows.items())

    # ---- queries -------------------------------------------------------------------
    def __contains__(self, path: object) -> bool:
        return path in self._weight

    def nodes(self) -> list[str]:
        """Every node except the root, parents before children, siblings sorted."""
        return list(self._nodes)

    def lineage(self, path: str) -> tuple[str, ...]:
        """``path`` and every node above it but the root, leaf first (``ancestors(path)``
        without the root): kept for the tree's nodes, as the pass asks on every try."""
        kept = self._lineage.get(path)
        return ancestors(path)[:-1] if kept is None else kept

    def parent_of(self, path: str) -> str:
        parent = self._parent.get(path)
        return parent_of(path) if parent is None else parent

    def children(self, path: str) -> tuple[str, ...]:
        return self._children.get(path, ())

    def weight(self, path: str) -> float:
        return self._weight[path]

    def share(self, path: str) -> float:
        """Fraction of the whole cluster this node is entitled to (root = 1)."""
        return self._share[path]

    def depth(self, path: str) -> int:
        return self._depth[path]

    def is_leaf(self, path: str) -> bool:
        return path in self._weight and not self._children.get(path)

    def require_leaf(self, path: str) -> None:
        if path not in self._weight:
            raise CoreError(f"budget {path!r}: unknown budget"
                            + did_you_mean(path, self._weight, quote=True))
        if not self.is_leaf(path):
            below = self._children[path]
            some = ", ".join(below[:3]) + (f" and {len(below) - 3} more" if len(below) > 3
                                           else "")
            raise CoreError(f"budget {path!r}: not a leaf; workloads draw on leaf budgets "
                            f"(below it: {some})")

    def divergence(self, a: str, b: str) -> tuple[str, str] | None:
        """The two siblings under the lowest common ancestor of ``a`` and ``b``: the level at
        which Fair Tree compares them. ``None`` if one contains the other (same budget)."""
        key = (a, b)
        if key in self._div:
            return self._div[key]
        pa, pb = ancestors(a)[::-1], ancestors(b)[::-1]
        i = 0
        while i < len(pa) and i < len(pb) and pa[i] == pb[i]:
            i += 1
        result = None if i >= len(pa) or i >= len(pb) else (pa[i], pb[i])
        self._div[key] = result
        return result

    def with_weight(self, path: str, weight: float) -> BudgetTree:
        """A copy with one weight changed (the tree itself is immutable)."""
        if path not in self._weight:
            raise CoreError(f"budget {path!r}: unknown budget"
                            + did_you_mean(path, self._weight, quote=True))
        nodes = [BudgetNode(p, weight if p == path else w) for p, w in self._weight.items()]
        return BudgetTree.build(nodes)

    def as_dict(self) -> dict[str, float]:
        return dict(self._weight)
