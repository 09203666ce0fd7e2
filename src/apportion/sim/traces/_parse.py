"""Field parsers shared by every importer. Each takes one raw cell (a string from a text file,
or a typed value from JSON Lines or Parquet) and returns a plain value or raises :class:`Bad`
with the problem; the caller adds ``file:line: field:``. Empty cells are handled by callers."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from apportion.core import DurationError
from apportion.core import parse_duration as core_parse_duration
from apportion.text import as_written

from ._errors import Bad


def _finite(x: float, text: object) -> float:
    if not math.isfinite(x):
        raise Bad(f"must be a finite number, got {as_written(text)}")
    return x


def parse_duration(value: object) -> float:
    """Seconds from one cell: anything :func:`apportion.core.parse_duration` reads (a number,
    ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``, ``"1h30m"``, ``"1.5h"``, ``"[D-]HH:MM:SS"``,
    ``"MM:SS"``), a ``timedelta`` (Parquet durations) or a ``Decimal`` (Parquet decimals).
    Raises :class:`Bad` otherwise."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    elif isinstance(value, Decimal):
        value = float(value)
    try:
        return core_parse_duration(value)
    except DurationError as e:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            raise Bad(str(e)) from None
        # core names the value as Python writes it (True, [1]): say it as the file does
        problem = str(e).rsplit(", got ", 1)[0]
        raise Bad(f"{problem}, got {as_written(value)}") from None


def parse_patience(value: object) -> float:
    """A patience: a duration > 0 (an owner who waits forever leaves the cell empty)."""
    seconds = parse_duration(value)
    if seconds <= 0:
        raise Bad(f"must be a duration > 0 (empty: waits forever), got {as_written(value)}")
    return seconds


def parse_time(value: object) -> tuple[float, bool]:
    """``(seconds, absolute)``: a number of seconds (``absolute`` False), or an ISO 8601
    time converted to seconds since the Unix epoch (``absolute`` True). A time without a
    zone is taken as UTC. A ``Decimal`` (Parquet decimals) is a number of seconds."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, bool):
        raise Bad(f"not seconds or an ISO 8601 time: {as_written(value)}")
    if isinstance(value, int | float):
        return _finite(float(value), value), False
    if isinstance(value, datetime):
        return _epoch(value), True
    if isinstance(value, date):
        return _epoch(datetime(value.year, value.month, value.day)), True
    if isinstance(value, str):
        text = value.strip()
        try:
            return _finite(float(text), text), False
        except ValueError:
            pass
        try:
            return _epoch(datetime.fromisoformat(text)), True
        except ValueError:
            pass
    raise Bad(f"not seconds or an ISO 8601 time: {as_written(value)}")


def _epoch(dt: datetime) -> float:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def parse_int(value: object) -> int:
    """A whole number (``"8"``, ``8``, ``"8.0"``, a Parquet ``Decimal('8.0')``); anything
    else raises :class:`Bad`."""
    if isinstance(value, bool):
        raise Bad(f"not a whole number: {as_written(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)  # exact, unlike a float, however many digits the decimal has
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            value = float(text)
        except ValueError:
            raise Bad(f"not a whole number: {text!r}") from None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise Bad(f"not a whole number: {as_written(value)}")


_TRUE = {"true", "t", "yes", "y", "1"}
_FALSE = {"false", "f", "no", "n", "0"}


def parse_bool(value: object) -> bool:
    """``true/false``, ``yes/no``, ``t/f``, ``y/n``, ``1/0`` (any case) or a boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise Bad(f"not a boolean: {as_written(value)} (use true/false, yes/no or 1/0)")


def text(value: object) -> str:
    """A cell as a string (numbers from JSON or Parquet become their usual text). A Parquet
    binary cell (a string column written without its UTF-8 annotation, as some writers do)
    is decoded as UTF-8; a list or an object (JSON, Parquet) is no text and raises
    :class:`Bad`, rather than its Python form becoming a name."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, bytes | bytearray):
        try:
            return value.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise Bad(f"not UTF-8 text: byte 0x{value[e.start]:02x} at byte {e.start + 1} "
                      "of the value") from None
    if isinstance(value, list | tuple | dict):
        kind = "an object" if isinstance(value, dict) else "a list"
        raise Bad(f"expected text, got {kind}: {as_written(value)}")
    return str(value).strip()


def parse_kinds(value: object) -> tuple[str, ...]:
    """GPU kinds a workload accepts: ``"H100,B200"`` (or a JSON list), in its order."""
    items = value if isinstance(value, list | tuple) else text(value).split(",")
    kinds = tuple(text(k).strip() for k in items)
    if not all(kinds) or len(set(kinds)) != len(kinds):
        raise Bad(f"expected GPU kinds separated by commas, each once, got {as_written(value)}")
    return kinds


def is_missing(value: object) -> bool:
    """Empty cells, JSON null and Parquet nulls all mean "not given"."""
    return value is None or (isinstance(value, str) and not value.strip())


def check_path(path: str) -> str:
    """A budget path as the budget tree accepts it: names joined by '/'."""
    if not path or path.startswith("/") or path.endswith("/") or "//" in path:
        raise Bad(f"must be names joined by '/', got {path!r}")
    return path


def clean_name(value: str) -> str:
    """A value used as one budget name: '/' would nest, so it becomes '_'; empty is '_none'."""
    name = value.strip().replace("/", "_")
    return name or "_none"
