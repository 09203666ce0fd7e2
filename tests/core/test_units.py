"""The package's one duration parser and formatter (apportion.core.units)."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest

from apportion.core import NUMBER_KNOBS, PolicyConfig
from apportion.core.units import (
    DurationError,
    format_amount,
    format_duration,
    format_duration_exact,
    parse_duration,
    parse_number,
    plural,
)
from apportion.sim.engine import SIM_NUMBER_KNOBS, SimConfig


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), (45, 45.0), (1.5, 1.5), ("30m", 1800.0), ("5min", 300.0), ("8h", 28800.0),
     ("7d", 604800.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("2 h", 7200.0),
     ("01:02:03", 3723.0), ("02:03", 123.0), ("1-00:00:00", 86400.0), (" 15m ", 900.0),
     ("2-12", 216000.0), ("1-02:03", 93780.0), ("1-2:30:15", 95415.0)],
)
def test_parse_duration_reads_numbers_suffixes_and_clock_forms(
    text: object, seconds: float
) -> None:
    """Each accepted spelling gives the seconds it names; the clock forms are Slurm's
    (minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
    days-hours:minutes:seconds)."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", [True, None, "x", "8 hours", "-1", float("nan"),
                                 float("inf"), "1-", "-12", "1-2:3:4:5", [1]])
def test_parse_duration_refuses_what_is_not_a_finite_nonnegative_duration(bad: object) -> None:
    """Booleans, words, negatives, NaN, infinity and broken clock forms are refused with a
    message that quotes the value."""
    with pytest.raises(DurationError, match="got"):
        parse_duration(bad)


@pytest.mark.parametrize(("bad", "said"), [
    ("99:99", "the seconds, 99, must be under 60"),
    ("1:60", "the seconds, 60, must be under 60"),
    ("0:59.5:00", None), ("1:60:00", "the minutes, 60, must be under 60"),
    ("1:00:75", "the seconds, 75, must be under 60"),
    ("1-24", "the hours, 24, must be under 24"),
    ("1-2:60", "the minutes, 60, must be under 60"),
    ("1-24:00:00", "the hours, 24, must be under 24"),
])
def test_a_clock_form_refuses_a_field_after_the_first_out_of_its_range(
    bad: str, said: str | None
) -> None:
    """In a clock form only the first field is unbounded (``90:00`` is 90 minutes,
    ``100:00:00`` 100 hours): minutes or seconds of 60 or more after it, and hours of 24
    or more after a day, are refused naming the value and the field (``99:99`` was read as
    6,039 s)."""
    assert parse_duration("90:00") == 5400.0 and parse_duration("100:59:59") == 363599.0
    with pytest.raises(DurationError) as e:
        parse_duration(bad)
    assert str(e.value).startswith(repr(bad) if said else "must be")
    assert said is None or said in str(e.value)


@pytest.mark.parametrize("bad", ["٥m", "５", "²", "1_000", "1_0m", "٥:٠٠"])
def test_parse_duration_refuses_digits_other_than_ascii_and_digit_groups(bad: str) -> None:
    """Digits of other scripts (Arabic-Indic, full width, superscript) and underscores,
    which float() and a regex's digit class would read as a number, are refused, naming
    the value."""
    with pytest.raises(DurationError, match=re.escape(repr(bad))):
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


@pytest.mark.parametrize(("value", "number"), [("0.1", 0.1), (2, 2.0), (" 1.5 ", 1.5), (0, 0.0)])
def test_parse_number_reads_plain_numbers(value: object, number: float) -> None:
    """A number or its text is the number."""
    assert parse_number(value) == number


@pytest.mark.parametrize("bad", [True, None, "2h", "30m", "-0.1", "nan", "inf", [1]])
def test_parse_number_refuses_durations_negatives_and_non_numbers(bad: object) -> None:
    """A duration such as 2h is not a plain number; nor are booleans, negatives, NaN or
    infinity: refused with a message that quotes the value."""
    with pytest.raises(DurationError, match=r"must be a number >= 0, got"):
        parse_number(bad)


@pytest.mark.parametrize("bad", ["٥", "１.５", "1_000"])
def test_parse_number_refuses_digits_other_than_ascii_and_digit_groups(bad: str) -> None:
    """Digits of other scripts and underscores, which float() reads, are refused as not a
    number in ASCII digits, quoting the value."""
    with pytest.raises(DurationError, match=f"in ASCII digits, got {re.escape(repr(bad))}"):
        parse_number(bad)


def test_every_plain_number_knob_is_a_float_field_of_its_config() -> None:
    """``NUMBER_KNOBS`` and ``SIM_NUMBER_KNOBS`` name float fields of ``PolicyConfig`` and
    ``SimConfig`` (a renamed field would otherwise go back to being parsed as a duration),
    and of their float fields exactly the margin, the charge multiple and the factors."""
    for names, cls in ((NUMBER_KNOBS, PolicyConfig), (SIM_NUMBER_KNOBS, SimConfig)):
        hints = typing.get_type_hints(cls)
        floats = {f.name for f in dataclasses.fields(cls) if hints[f.name] is float}
        assert names <= floats, names - floats
        assert {n for n in floats if "margin" in n or "factor" in n or "charge" in n} == names


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


@pytest.mark.parametrize(("seconds", "text"), [
    (28800, "8 h"), (5400, "1 h 30 min"), (28801, "8 h 0 min 1 s"),
    (90061, "1 d 1 h 1 min 1 s"), (0.5, "0.5 s"), (28800.25, "28800.25 s"), (0, "0 s"),
    (95400, "1 d 2 h 30 min"), (86460, "1 d 0 h 1 min"),
])
def test_format_duration_exact_never_rounds(seconds: float, text: str) -> None:
    """What a refusal quotes and submit echoes: the two-unit form where it is exact, else
    every unit down to the last one not zero (no trailing "0 s"), else seconds, so '8 h 0
    min 1 s is over the cap of 8 h' never reads '8 h is over the cap of 8 h'; it reads back
    as the same number of seconds."""
    assert format_duration_exact(seconds) == text
    assert parse_duration(text.replace(" ", "")) == seconds


@pytest.mark.parametrize(("value", "text"), [
    (0.23, "0.2"), (1.5, "1.5"), (99.94, "99.9"), (100.0, "100"), (1234.5, "1,234"),
    (0.0, "0.0"),
])
def test_format_amount_keeps_a_decimal_below_a_hundred(value: float, text: str) -> None:
    """GPU-hours as reports and what-if print them: a decimal below 100, so a short
    period's 0.2 GPU-hours do not read 0 (nor 1.5 read 2 beside a total of 1)."""
    assert format_amount(value) == text
