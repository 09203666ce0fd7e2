"""Suggestions for mistyped names: "budget 'ai/lm': unknown budget; did you mean 'ai/llm'?"."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str], quote: bool = False) -> str:
    """``"; did you mean X?"`` (or ``X or Y``) naming the known names closest to ``name``
    (difflib's similarity, at least 0.6), or ``""`` if none is close. ``quote``: as repr."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=2, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) if quote else c for c in close) + "?"


__all__ = ["did_you_mean"]
