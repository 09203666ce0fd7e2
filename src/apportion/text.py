"""Text that users chose (commands, paths, names, reasons quoting them), made safe to show."""

from __future__ import annotations

import re
import unicodedata

# C0, DEL and C1 (what a terminal acts on), and any other non-ASCII character: each of
# those is looked up, as Python's ``re`` has no Unicode categories
_SUSPECT = re.compile(r"[\x00-\x1f\x7f-\U0010ffff]")


def _escaped(m: re.Match[str]) -> str:
    c = m.group()
    if unicodedata.category(c) in ("Cc", "Cf"):
        return c.encode("unicode_escape").decode("ascii")
    return c


def escape_controls(text: str) -> str:
    """``text`` with each control character written as Python writes it in a string
    (``\\x1b``, ``\\x07``, ``\\n``, ``\\t``), and each Unicode format character too
    (``\\u202e``: the bidirectional overrides and isolates, zero-width marks), the rest as
    it is: shown on a terminal, a user's text cannot clear the screen, set the window's
    title, forge a line or show its characters in another order than they are."""
    return _SUSPECT.sub(_escaped, text)
