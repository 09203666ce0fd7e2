"""Text that users chose (commands, paths, names, reasons quoting them), made safe to show;
a refused value as the user wrote it (:func:`as_written`); and where a TOML file a user
wrote says a key (:func:`key_line`), for the messages about it."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable

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


_HEADER = re.compile(r"\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY_PART = r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'"""  # a bare or quoted key
_ASSIGN = re.compile(rf"\s*((?:{_KEY_PART})(?:\s*\.\s*(?:{_KEY_PART}))*)\s*=")
_PART = re.compile(_KEY_PART)


def _parts(dotted: str) -> list[str]:
    return [m.group(0).strip("\"'") for m in _PART.finditer(dotted)]


def key_line(text: str, key: str) -> int | None:
    """The line (from 1) of ``text`` where the config key ``key`` as errors name it
    (``policy.lookbak``, ``hosts[1].gpus``, ``budgets[0].members[2]``) is written: the
    line of the key, or of the nearest enclosing key or table the file writes (a value
    inside an inline table or a list: the line of its key); else the first line that
    writes inside it (``overides`` of ``[overides."west/B200"]``). None if the file writes
    none of these (a default). Found by reading the lines as TOML's tables and keys are
    written, not by parsing: a best effort, for the message only."""
    table: list[str] = []
    counts: dict[tuple[str, ...], int] = {}
    best: tuple[int, int] | None = None  # (length of the match, line)
    inside: int | None = None  # the first line that writes a key or table inside ``key``

    def consider(path: list[str], n: int) -> None:
        nonlocal best, inside
        full = ".".join(path)
        if (key == full or key.startswith((full + ".", full + "["))) and (
                best is None or len(full) > best[0]):
            best = (len(full), n)
        elif inside is None and full.startswith((key + ".", key + "[")):
            inside = n

    for n, raw in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(raw)
        if header is not None and _ASSIGN.match(raw) is None:
            names = _parts(header.group(2))
            if header.group(1) == "[[":
                i = counts.get(tuple(names), -1) + 1
                counts[tuple(names)] = i
                names = names[:-1] + [f"{names[-1]}[{i}]"]
            table = names
            consider(table, n)
            continue
        assign = _ASSIGN.match(raw)
        if assign is not None:
            consider(table + _parts(assign.group(1)), n)
    return best[1] if best is not None else inside


def at_key_line(message: str, source: str, text: str,
                keys: Callable[[str], Iterable[str]] | None = None) -> str:
    """``message`` about the TOML file ``source`` (``source: key: problem``) with the line
    of ``text`` that writes its key, or the nearest enclosing key or table
    (``source:line: key: problem``, as the trace readers name lines); as it is when it
    names no key the text writes. ``keys`` gives the keys to look for, in order, given the
    message past its source (for a message that counts from 1, names a budget by its path
    or a key in several parts, ``billing: B200: ...``); by default the part before the
    first ``": "``."""
    prefix = f"{source}: "
    if not message.startswith(prefix):
        return message
    rest = message[len(prefix):]
    for candidate in (keys(rest) if keys is not None else (rest.split(": ", 1)[0],)):
        line = key_line(text, candidate)
        if line is not None:
            return f"{source}:{line}: {rest}"
    return message
