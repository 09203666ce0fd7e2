"""Text that users chose (commands, paths, names, reasons quoting them), made safe to show."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: what a terminal acts on


def escape_controls(text: str) -> str:
    """``text`` with each control character written as Python writes it in a string
    (``\\x1b``, ``\\x07``, ``\\n``, ``\\t``), the rest as it is: shown on a terminal, a
    user's text cannot clear the screen, set the window's title or forge a line."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
