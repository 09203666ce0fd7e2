"""Text that users chose (commands, paths, names, reasons quoting them), made safe to show."""

from __future__ import annotations

import json
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


def as_written(value: object) -> str:
    """A value read from a file or a request, for an error message, as the user wrote it:
    text quoted (``'eight'``), a number, ``Decimal`` or time as its digits (``1.5``, not
    ``Decimal('1.5')``), JSON's and TOML's ``true``/``false``, ``null`` and lists and
    objects as JSON (``[1]``), never Python's form (``True``, ``None``, ``['a']``). The
    trace readers, ``simulate --tree``/``--cluster`` and the what-if's ``set`` say a
    refused value with it."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool | list | tuple | dict) or value is None:
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)
