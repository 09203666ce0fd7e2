"""Which budget each job draws on, and the budget tree for the trace.

Three sources, in order of precedence:

1. ``budget_column``: one budget per distinct value of a column (or per combination of
   several columns, nested): ``user/alice``, ``account/llm/alice``.
2. ``budgets``: ``N`` budgets ``trace/b00`` .. (or the given leaf paths); each job goes to
   ``stable_bucket(key)``, the key being a column (``budget_key``; default the user when the
   trace names users, else the job id).
3. The trace's own ``budget`` column (sacct: the account, ``account/_none`` for a job
   without one, or the user when no job names an account).

Failing all three, a given ``tree`` has its leaves filled by (2); without a tree, a trace that
names users gets one budget per user, and any other trace is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apportion.core import BudgetNode, BudgetTree, CoreError

from ._errors import NoBudgetColumn, TraceError
from ._parse import clean_name
from ._record import Record
from ._rules import stable_bucket

BudgetCount = int | Sequence[str]


@dataclass(frozen=True, slots=True)
class BudgetOptions:
    budgets: BudgetCount | None = None
    budget_column: str | Sequence[str] | None = None
    budget_key: str | None = None
    weights: Mapping[str, float] | None = None
    tree: BudgetTree | None = None
    seed: int = 0

    def columns(self) -> tuple[str, ...]:
        c = self.budget_column
        if c is None:
            return ()
        return (c,) if isinstance(c, str) else tuple(c)

    def check(self) -> None:
        """Raise :class:`TraceError` naming the option for contradictory or bad options."""
        if self.budget_column is not None and not self.columns():
            raise TraceError("budget_column: must name at least one column")
        if self.budget_column is not None and self.budgets is not None:
            raise TraceError("budgets: give budgets or budget_column, not both")
        if isinstance(self.budgets, int):
            if isinstance(self.budgets, bool) or self.budgets < 1:
                raise TraceError(f"budgets: must be >= 1, got {self.budgets!r}")
        elif self.budgets is not None:
            if isinstance(self.budgets, str) or not self.budgets:
                raise TraceError("budgets: must be a count or a non-empty list of leaf paths")
            if len(set(self.budgets)) != len(self.budgets):
                raise TraceError("budgets: duplicate leaf path")
        if self.tree is not None and self.weights is not None:
            raise TraceError("weights: give weights or a tree, not both (the tree has weights)")


def key_columns(opts: BudgetOptions) -> set[str]:
    """Columns beyond the canonical ones that the importer must keep for budget synthesis."""
    names = set(opts.columns())
    if opts.budget_key is not None:
        names.add(opts.budget_key)
    return names - {"id"}  # every row has an id (given or made up)


def _value(rec: Record, name: str) -> str:
    if name == "id":
        return rec.id or ""
    if name == "user":
        return rec.user
    if name == "budget":
        return rec.budget or ""
    return rec.keys.get(name, "")


def assign(source: str, records: list[Record], opts: BudgetOptions) -> BudgetTree:
    """Set ``rec.budget`` on every record and return the tree they draw on."""
    opts.check()
    leaves: list[str] | None = None  # fixed leaves to hash onto (case 2)
    if opts.budget_column is not None:
        cols = opts.columns()
        for rec in records:
            names = [clean_name(_value(rec, c)) for c in cols]
            rec.budget = "/".join([clean_name(cols[0]), *names])
    elif opts.budgets is not None:
        if isinstance(opts.budgets, int):
            width = max(2, len(str(opts.budgets - 1)))
            leaves = [f"trace/b{i:0{width}d}" for i in range(opts.budgets)]
        else:
            leaves = list(opts.budgets)
    elif any(rec.budget is not None for rec in records):  # the trace's own budgets
        missing = next((r for r in records if r.budget is None), None)
        if missing is not None:
            raise TraceError(f"{source}:{missing.line}: budget: missing value")
    elif opts.tree is not None:
        leaves = list(opts.tree.leaves)
    elif records and all(rec.user for rec in records):
        for rec in records:
            rec.budget = f"user/{clean_name(rec.user)}"
    else:
        raise NoBudgetColumn(source)
    if leaves is not None:
        key = opts.budget_key or ("user" if records and all(r.user for r in records) else "id")
        for rec in records:
            value = _value(rec, key) or rec.id or ""  # an empty key falls back to the id
            rec.budget = leaves[stable_bucket(value, len(leaves), opts.seed)]
    return _tree(source, records, opts, leaves)


def _tree(
    source: str, records: list[Record], opts: BudgetOptions, leaves: list[str] | None
) -> BudgetTree:
    first: dict[str, int] = {}
    for rec in records:
        assert rec.budget is not None
        first.setdefault(rec.budget, rec.line)
    if opts.tree is not None:
        for path, line in first.items():
            if not opts.tree.is_leaf(path):
                raise TraceError(
                    f"{source}:{line}: budget: {path!r} is not a leaf of the given budget tree"
                )
        return opts.tree
    paths = dict.fromkeys(leaves or ())  # empty synthetic budgets keep their share
    paths.update(dict.fromkeys(first))
    weights = dict(opts.weights or {})
    nodes = [BudgetNode(p, weights.pop(p, 1.0)) for p in paths]
    # weights may also name intermediate nodes ("ai" above "ai/llm")
    inner = {a for p in paths for a in _ancestors(p)}
    for p in list(weights):
        if p in inner:
            nodes.append(BudgetNode(p, weights.pop(p)))
    if weights:
        raise TraceError(f"weights: unknown budget {sorted(weights)[0]!r}")
    try:
        tree = BudgetTree.build(nodes)
    except CoreError as e:
        # the path of a node the trace named: point at the row that named it
        bad = next((p for p in first if repr(p) in str(e)), None)
        if bad is not None:
            raise TraceError(f"{source}:{first[bad]}: budget: {e}") from None
        raise TraceError(f"weights: {e}") from None
    for path, line in first.items():
        if not tree.is_leaf(path):
            raise TraceError(
                f"{source}:{line}: budget: {path!r} is also the parent of other budgets "
                "in this trace; jobs draw on leaf budgets only"
            )
    return tree


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
