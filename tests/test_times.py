"""apportion.times: every time shown is written in a zone with that zone's offset from UTC
at that moment (``2026-12-06 21:50:05+05:30``); zones are named by IANA name or offset; the
CLI's zone is the machine's, as the C library finds it; the server's log lines follow the
same rule."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime

import pytest

from apportion.cli.serve import LogFormatter
from apportion.times import format_time, local_zone, time_zone

WINTER = 1_796_574_005.0  # 2026-12-06 16:20:05 UTC
SUMMER = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC


@pytest.fixture
def tz(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str | None], None]]:
    """Set (or with None unset) ``TZ``, for the C library too; restored afterwards."""
    def set_tz(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("TZ", raising=False)
        else:
            monkeypatch.setenv("TZ", value)
        time.tzset()

    yield set_tz
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("zone", "t", "shown"), [
    ("UTC", WINTER, "2026-12-06 16:20:05+00:00"),
    ("Asia/Kolkata", WINTER, "2026-12-06 21:50:05+05:30"),
    ("Asia/Kolkata", SUMMER, "2026-05-29 01:56:40+05:30"),  # the date there, not UTC's
    ("Europe/Berlin", WINTER, "2026-12-06 17:20:05+01:00"),
    ("Europe/Berlin", SUMMER, "2026-05-28 22:26:40+02:00"),
    ("America/St_Johns", WINTER, "2026-12-06 12:50:05-03:30"),
    ("America/St_Johns", SUMMER, "2026-05-28 17:56:40-02:30"),
    ("+05:30", WINTER, "2026-12-06 21:50:05+05:30"),
    ("-08:00", SUMMER, "2026-05-28 12:26:40-08:00"),
])
def test_a_time_is_written_in_its_zone_with_the_offset_it_has_then(
    zone: str, t: float, shown: str,
) -> None:
    """Date and time of day in the zone, to the second, then the zone's offset from UTC at
    that very moment (daylight saving included), and it reads back as the same instant."""
    assert format_time(t + 0.9, time_zone(zone)) == shown  # to the second: not rounded up
    assert datetime.fromisoformat(shown).timestamp() == t


@pytest.mark.parametrize("name", ["Mars/Olympus", "Asia", "", "../etc/passwd",
                                  "/usr/share/zoneinfo/UTC", "+24:00", "+05:60", "5:30",
                                  "UTC+5"])
def test_a_name_that_is_no_zone_is_refused_saying_what_would_do(name: str) -> None:
    """Neither an IANA name nor an offset ``+HH:MM`` (a directory of zones, a path, an
    offset out of range or written otherwise): a ValueError naming it."""
    with pytest.raises(ValueError) as e:
        time_zone(name)
    assert str(e.value) == (f"unknown time zone {name!r}: give an IANA name (Europe/Berlin) "
                            "or an offset from UTC (+05:30)")


@pytest.mark.parametrize(("value", "name"), [
    ("Asia/Kolkata", "Asia/Kolkata"),
    (":Europe/Berlin", "Europe/Berlin"),  # the C library's leading colon
    ("", "UTC"),  # set but empty: UTC to the C library
])
def test_the_local_zone_is_the_one_tz_names(
    tz: Callable[[str | None], None], value: str, name: str,
) -> None:
    """``TZ`` names the machine's zone when it is set, as for the C library."""
    tz(value)
    assert local_zone() == name


def test_without_tz_the_local_zone_is_the_one_etc_localtime_links_to(
    tz: Callable[[str | None], None], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``TZ``: the zone ``/etc/localtime`` links to (``.../zoneinfo/Asia/Kolkata``)."""
    tz(None)
    links = {"/etc/localtime": "/usr/share/zoneinfo/Asia/Kolkata"}
    monkeypatch.setattr(os.path, "realpath", lambda p: links.get(p, p))
    assert local_zone() == "Asia/Kolkata"


@pytest.mark.parametrize("value", ["localtime", ":localtime"])
def test_tz_localtime_is_the_zone_etc_localtime_links_to(
    tz: Callable[[str | None], None], monkeypatch: pytest.MonkeyPatch, value: str,
) -> None:
    """``TZ=localtime`` (the zone database's link to ``/etc/localtime``) is the zone
    ``/etc/localtime`` links to, not the name ``localtime``, which a server would read as
    its own zone."""
    tz(value)
    links = {"/etc/localtime": "/usr/share/zoneinfo/Asia/Kolkata"}
    monkeypatch.setattr(os.path, "realpath", lambda p: links.get(p, p))
    assert local_zone() == "Asia/Kolkata"


def test_a_tz_that_names_no_zone_gives_the_offset_now(
    tz: Callable[[str | None], None],
) -> None:
    """A POSIX rule in ``TZ`` (``IST-5:30``) is no zone's name: the offset the C library
    reads from it now, which the server takes as a zone too."""
    tz("IST-5:30")
    assert local_zone() == "+05:30"
    assert format_time(WINTER, time_zone(local_zone())) == "2026-12-06 21:50:05+05:30"


def test_the_servers_log_lines_carry_its_zones_offset(
    tz: Callable[[str | None], None],
) -> None:
    """A log line of ``apportion serve`` is stamped in the server's zone with its offset,
    as every time is shown."""
    tz("Asia/Kolkata")
    record = logging.LogRecord("apportion.scheduler", logging.INFO, __file__, 1,
                               "pass took %s", ("0.1 s",), None)
    record.created = WINTER
    formatter = LogFormatter("%(asctime)s %(name)s %(message)s")
    assert formatter.format(record) == (
        "2026-12-06 21:50:05+05:30 apportion.scheduler pass took 0.1 s")
