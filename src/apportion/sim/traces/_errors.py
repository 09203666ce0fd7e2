"""The one exception of trace import, and the small helper that counts skipped rows.

::

    ValueError
     └── TraceError   "file:line: field: problem" for a bad row,
          │           "file: field: problem" for a bad file, "option: problem" for a bad argument
          └── NoBudgetColumn   the trace names no budgets and no option says how to make them
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apportion.core import plural


class TraceError(ValueError):
    """A trace file or an import option is unusable. Nothing is returned when it is raised."""


class NoBudgetColumn(TraceError):
    """The trace has no budget column, or one empty on every row (``empty`` names it), nor
    users to make budgets of, and neither ``budgets`` nor ``budget_column`` was given. A
    separate class so a front end can name its own options (the CLI says ``--budgets N`` or
    ``--budget-column NAME``)."""

    def __init__(self, source: str, empty: str | None = None) -> None:
        # ``empty``: the file's budget column, there but empty on every row
        self.what = (f"{empty}: the budget column is empty on every row" if empty
                     else "budget: the trace has no budget column")
        super().__init__(
            f"{source}: {self.what}; pass budgets=N "
            "(N synthetic budgets) or budget_column=NAME (one budget per value)"
        )
        self.source = source
        self.empty = empty


class Bad(Exception):
    """Raised by field parsers with the bare problem; the reader adds ``file:line: field:``
    (``field`` overrides the column the reader thought it was reading)."""

    def __init__(self, problem: str, field: str | None = None) -> None:
        super().__init__(problem)
        self.field = field


@dataclass
class Notes:
    """Rows skipped or adjusted during import, counted per reason with the first line seen."""

    source: str
    skipped: dict[str, int] = field(default_factory=dict)
    adjusted: dict[str, int] = field(default_factory=dict)
    first_line: dict[str, int] = field(default_factory=dict)
    quiet: set[str] = field(default_factory=set)  # reasons counted but not worth a warning

    def skip(self, reason: str, line: int, quiet: bool = False) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.first_line.setdefault(reason, line)
        if quiet:
            self.quiet.add(reason)

    def adjust(self, reason: str, line: int) -> None:
        self.adjusted[reason] = self.adjusted.get(reason, 0) + 1
        self.first_line.setdefault(reason, line)

    def warnings(self) -> tuple[str, ...]:
        out = [
            f"{self.source}: skipped {plural(n, 'row')}: {reason} "
            f"(first at line {self.first_line[reason]})"
            for reason, n in self.skipped.items()
            if reason not in self.quiet
        ]
        out += [
            f"{self.source}: {plural(n, 'row')}: {reason} "
            f"(first at line {self.first_line[reason]})"
            for reason, n in self.adjusted.items()
        ]
        return tuple(out)
