"""Suggestions for mistyped names: "budget 'ai/lm': unknown budget; did you mean 'ai/llm'?"."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str], quote: bool = False) -> str:
    """``"; did you mean X?"`` (or ``X or Y``) naming the known names closest to ``name``
    (difflib's similarity, at least 0.6, case aside: ``GPU01`` finds ``gpu01``, which
    difflib alone finds 0.0 alike), or ``""`` if none is close. ``quote``: as repr."""
    spelled: dict[str, list[str]] = {}  # lower case -> the known names so spelled
    for known_name in sorted(set(known)):
        spelled.setdefault(known_name.lower(), []).append(known_name)
    close = [known_name
             for low in difflib.get_close_matches(name.lower(), list(spelled), n=2, cutoff=0.6)
             for known_name in spelled[low]][:2]
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) if quote else c for c in close) + "?"


__all__ = ["did_you_mean"]
