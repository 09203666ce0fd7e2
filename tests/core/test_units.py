"""The package's one duration parser and formatter (apportion.core.units)."""

from __future__ import annotations

import pytest

from apportion.core.units import DurationError, format_duration, parse_duration, plural


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), (45, 45.0), (1.5, 1.5), ("30m", 1800.0), ("5min", 300.0), ("8h", 28800.0),
     ("7d", 604800.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("2 h", 7200.0),
     ("01:02:03", 3723.0), ("02:03", 123.0), ("1-00:00:00", 86400.0), (" 15m ", 900.0)],
)
def test_parse_duration_reads_numbers_suffixes_and_clock_forms(
    text: object, seconds: float
) -> None:
    """Each accepted spelling gives the seconds it names."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", [True, None, "x", "8 hours", "-1", float("nan"),
                                 float("inf"), "1-02:03", [1]])
def test_parse_duration_refuses_what_is_not_a_finite_nonnegative_duration(bad: object) -> None:
    """Booleans, words, negatives, NaN, infinity and Slurm's invalid D-MM:SS are refused
    with a message that quotes the value."""
    with pytest.raises(DurationError, match="got"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (0.4, "0 s"), (45, "45 s"), (125, "2 min 5 s"), (1800, "30 min"),
     (3600, "1 h"), (3605, "1 h"), (5400, "1 h 30 min"), (28800, "8 h"),
     (273600, "3 d 4 h"), (259205, "3 d"), (-60, "-1 min")],
)
def test_format_duration_uses_at_most_two_adjacent_units(seconds: float, text: str) -> None:
    """The largest unit that fits, then the next one only if some of it is left."""
    assert format_duration(seconds) == text


def test_format_then_parse_round_trips_whole_units() -> None:
    """What the formatter writes, the parser reads back (spaces and "min" included)."""
    for seconds in (45, 1800, 5400, 28800, 273600):
        assert parse_duration(format_duration(seconds).replace(" ", "")) == seconds


def test_plural_agrees_with_the_count() -> None:
    """1 GPU, 8 GPUs, thousands separated, irregular plurals given."""
    assert plural(1, "GPU") == "1 GPU"
    assert plural(8, "GPU") == "8 GPUs"
    assert plural(1200, "workload") == "1,200 workloads"
    assert plural(2, "index", "indexes") == "2 indexes"
