"""One usage ratio: ``core.usage_ratio`` is the only place its formula is written."""

from __future__ import annotations

import re
from pathlib import Path

import apportion
from apportion.core import usage_ratio

PACKAGE = Path(apportion.__file__).parent

# A division by a share times a capacity, in any spelling the package has used.
_TERM = r"[\w.\[\]()]*"
FORMULA = re.compile(
    rf"/\s*\(\s*{_TERM}share{_TERM}\s*\*"  # x / (share * capacity)
    rf"|share{_TERM}\s*\*\s*{_TERM}capacity"  # share * capacity (a denominator)
    rf"|capacity{_TERM}\s*\*\s*{_TERM}share"
    r"|/\s*fair\b"  # x / fair, with fair = share * capacity
)

# How the formula was spelt in the service and the simulator before it moved to core.
OLD_SPELLINGS = [
    '"usage_ratio": charged / (share * capacity) if capacity > 0 else None,',
    "usage_ratio=charged / (share * capacity),",
    "fair = tree.share(path) * capacity",
    "ratio = c / fair if fair > 0 else None",
    "denominator = share[i] * capacity_s",
    "value = self._ratio[node] = used / (self.tree.share(node) * self.capacity)",
]


def formula_lines(root: Path) -> list[str]:
    """``file:line: text`` of every line under ``root`` that writes the formula (comments and
    docstrings spell it with an ``x`` and do not count)."""
    hits = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if FORMULA.search(line.split("#")[0]):
                hits.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return hits


def test_the_usage_ratio_is_charged_over_share_of_capacity() -> None:
    """GPU-seconds charged over the node's share of the healthy GPU-seconds; an empty window
    counts as one GPU-second."""
    assert usage_ratio(3600.0, 0.25, 4 * 3600.0) == 1.0
    assert usage_ratio(7200.0, 0.5, 4 * 3600.0) == 1.0
    assert usage_ratio(0.0, 0.5, 100.0) == 0.0
    assert usage_ratio(5.0, 0.5, 0.0) == 10.0


def test_the_scan_finds_every_old_spelling_of_the_formula() -> None:
    """The scan below is able to fail: it finds each way the formula used to be written."""
    for line in OLD_SPELLINGS:
        assert FORMULA.search(line), line
    assert not FORMULA.search("usage_ratio(charged, share, capacity)")


def test_no_usage_ratio_formula_outside_core() -> None:
    """No module of the package outside ``apportion.core`` divides by a share of the
    capacity: the pass, the API, the metrics, the simulator's tables and the scenarios'
    demand figures all call ``core.usage_ratio``; and core's own function is found."""
    hits = formula_lines(PACKAGE)
    assert [h for h in hits if not h.startswith("core/")] == []
    assert any(h.startswith("core/ledger.py:") and "return charged / (share" in h for h in hits)
