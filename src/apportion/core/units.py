"""Durations and counts as people type and read them: the one parser and the one formatter
of the whole package (configuration, API, CLI, traces, reports and explanations use them).

``parse_duration`` accepts a number of seconds, a suffixed form (``"90s"``, ``"30m"``,
``"2h"``, ``"7d"``, ``"1h30m"``, ``"1.5h"``; ``min`` for minutes too) or one of Slurm's
clock forms (``"[D-]HH:MM:SS"``, ``"MM:SS"``, ``"D-HH"``, ``"D-HH:MM"``; ``Elapsed``), in
which only the first field may be larger than its unit (``"90:00"``; ``"99:99"`` is refused).
``format_duration`` writes what a person would: ``45 s``, ``30 min``, ``8 h``,
``1 h 30 min``, ``3 d 4 h``. The float settings that are plain numbers (a margin, a
factor: ``apportion.core.NUMBER_KNOBS``) are read by ``parse_number`` instead, never as
``30m``.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "ClockFieldError", "DurationError", "format_amount", "format_duration", "format_duration_exact",
    "format_figure", "parse_duration", "parse_number", "plural",
]

_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PART = re.compile(rf"({_NUMBER})\s*(min|[dhms])", re.IGNORECASE)
_SUFFIXED = re.compile(rf"(?:{_NUMBER}\s*(?:min|[dhms])\s*)+", re.IGNORECASE)
_CLOCK = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")
_DAYS_HOURS = re.compile(r"(\d+)-(\d+)(?::(\d+))?")  # Slurm's D-HH and D-HH:MM
_HINT = "a duration like 30m, 8h, 7d, 1h30m, HH:MM:SS or a number of seconds"


class DurationError(ValueError):
    """Not a duration (or not a number, for the plain-number settings); the message says
    what was given and what would do."""


class ClockFieldError(DurationError):
    """A clock form with a field after the first out of its range (``"99:99"``); the
    message names the value, the field and its bound."""


def parse_number(value: object) -> float:
    """A finite number >= 0 from a number or its text; :class:`DurationError` (a ValueError)
    for anything else, booleans and durations such as ``"2h"`` included."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DurationError(f"must be a number >= 0, got {value!r}")
    if isinstance(value, str) and (not value.isascii() or "_" in value):
        raise DurationError(f"must be a number >= 0 in ASCII digits, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise DurationError(f"must be a number >= 0, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise DurationError(f"must be a number >= 0, got {value!r}")
    return number


def parse_duration(value: object) -> float:
    """Seconds (finite, >= 0) from a number or a duration string; :class:`DurationError`
    (a ValueError) for anything else, booleans included."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DurationError(f"must be {_HINT}, got {value!r}")
    seconds = float(value) if not isinstance(value, str) else _parse_text(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise DurationError(f"must be a finite duration >= 0, got {value!r}")
    return seconds


def _parse_text(value: str) -> float:
    text = value.strip()
    if not text.isascii() or "_" in text:
        # float() and \d read other scripts' digits ('٥' is 5) and digit groups ('1_000'):
        # a duration is written in ASCII digits, as every reader of it writes them
        raise DurationError(f"must be {_HINT} (in ASCII digits), got {value!r}")
    try:
        return float(text)
    except ValueError:
        pass
    if _SUFFIXED.fullmatch(text):
        return sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in _PART.findall(text))
    d = _DAYS_HOURS.fullmatch(text)  # before the clock: with a day, "1-2:30" is 2 h 30 min
    if d:
        days, hours, minutes = d.groups()
        _in_range(value, ("hours", hours, 24), ("minutes", minutes, 60))
        return int(days) * 86400.0 + int(hours) * 3600.0 + int(minutes or 0) * 60.0
    m = _CLOCK.fullmatch(text)
    if m:
        days, hours, minutes, secs = m.groups()
        # only the first field is unbounded: 90:00 is 90 min, 1:90 no time at all
        _in_range(value, ("hours", hours if days else None, 24),
                  ("minutes", minutes if hours or days else None, 60), ("seconds", secs, 60))
        return (int(days or 0) * 86400.0 + int(hours or 0) * 3600.0
                + int(minutes) * 60.0 + float(secs))
    raise DurationError(f"must be {_HINT}, got {value!r}")


def _in_range(value: str, *fields: tuple[str, str | None, int]) -> None:
    """Refuse a field of a clock form after the first that is out of its range (minutes
    and seconds under 60, hours after a day under 24), as Slurm's clock forms mean them:
    ``99:99`` is no duration, not 1 h 40 min 39 s."""
    for name, field, limit in fields:
        if field is not None and float(field) >= limit:
            raise ClockFieldError(f"{value!r}: the {name}, {field}, must be under {limit} (in "
                                "[D-]HH:MM:SS only the first field may be larger)")


def format_duration_exact(seconds: float) -> str:
    """``seconds`` as :func:`format_duration` writes it when that is exact (``8 h``, ``1 h
    30 min``), else every unit down to the last one not zero (``8 h 0 min 1 s``, ``1 d 2 h
    30 min``), else in seconds (``0.5 s``): for a refusal, where '8 h is over the cap of 8 h'
    would contradict itself, and for echoing what was accepted."""
    short = format_duration(seconds)
    if not math.isfinite(seconds) or _parse_text(short.replace(" ", "")) == seconds:
        return short
    if seconds < 0:
        return "-" + format_duration_exact(-seconds)
    if not float(seconds).is_integer():
        return f"{seconds} s"
    rest, parts = int(seconds), list[str]()
    for name, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if parts or rest >= size or size == 1:
            parts.append(f"{rest // size} {name}")
            rest %= size
    while len(parts) > 1 and parts[-1].startswith("0 "):
        parts.pop()  # "1 d 2 h 30 min", not "... 0 s"
    return " ".join(parts)


def format_duration(seconds: float) -> str:
    """A duration in the units a person would use, at most two of them, rounded to the
    second: ``0 s``, ``45 s``, ``2 min 5 s``, ``30 min``, ``8 h``, ``1 h 30 min``,
    ``3 d 4 h``. Negative values are written with a leading minus."""
    if not math.isfinite(seconds):
        return "forever" if seconds > 0 else "-forever"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    s = int(round(seconds))
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    for i, (name, size) in enumerate(units):
        if s >= size or size == 1:
            text = f"{s // size} {name}"
            if i + 1 < len(units):  # the next unit, if any of it is left ("1 h 30 min")
                rest_name, rest_size = units[i + 1]
                if rest := (s % size) // rest_size:
                    text += f" {rest} {rest_name}"
            return text
    raise AssertionError("unreachable: the last unit is the second")


def format_amount(value: float) -> str:
    """An amount such as GPU-hours to the precision a reader needs: one decimal under 100
    (``0.2``, ``1.5``), whole numbers above (``1,234``), so that a small period's figures
    are not all 0 and 1."""
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


# the most decimals format_figure writes: below a millionth (of a GPU-hour, a percent) a
# figure is a float's rounding noise, not usage, and is written as 0.0
_MAX_DECIMALS = 6


def format_figure(value: float) -> str:
    """A figure of a table (GPU-hours, a percentage) to one decimal (``1,234.5``), but one
    that is not 0 and would read as ``0.0`` with two significant digits (``0.017``,
    ``0.00028``), as the dashboard writes a small share: a small usage is not shown as
    none."""
    text = f"{value:,.1f}"
    if value == 0 or text.strip("-") != "0.0":
        return text
    decimals = 1 - math.floor(math.log10(abs(value)))
    return text if decimals > _MAX_DECIMALS else f"{value:.{decimals}f}"


def plural(count: int | float, word: str, words: str | None = None) -> str:
    """``1 GPU``, ``8 GPUs``, ``1 workload``; ``words`` when the plural is not word + s."""
    n = int(count) if float(count).is_integer() else count
    return f"{n:,} {word if n == 1 else (words or word + 's')}"
