"""Times of day as people read them: the one rule for every time apportion shows.

A time is written ``2026-12-06 21:50:05+05:30``: the date and the time of day in a zone,
then that zone's offset from UTC at that moment (ISO 8601, a space for the ``T``). So it
names one instant wherever it is read, pasted or forwarded, and reads back as that instant
where a command takes a time (``report usage --from``, ``whatif --until``). The zone is
the reader's where it is known:

* the CLI writes every time in the zone of the machine it runs on (:func:`local_zone`);
* sentences the server composes for a reader (``why``) are in the zone the request names
  (``?tz=``: the CLI and the dashboard send theirs, so ``why`` agrees with ``show``), else
  in UTC; the server's own log lines are in the server's zone;
* the usage report, which counts whole UTC hours, days and months, is in UTC, as are
  messages written the same for every reader (a what-if period with nothing to replay).

JSON carries times as seconds since the epoch, never as text.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

__all__ = ["format_time", "local_offset", "local_zone", "time_zone"]

_OFFSET = re.compile(r"([+-])(\d\d):(\d\d)")


def format_time(t: float, zone: tzinfo) -> str:
    """``t`` (seconds since the epoch) in ``zone``, to the second, with the zone's offset
    from UTC at that moment: ``2026-12-06 21:50:05+05:30``."""
    return datetime.fromtimestamp(t, zone).isoformat(sep=" ", timespec="seconds")


def time_zone(name: str) -> tzinfo:
    """The zone ``name`` names: an IANA name (``Asia/Kolkata``, ``UTC``) or a fixed offset
    from UTC (``+05:30``, ``-08:00``); a ValueError saying what would do for anything else."""
    fixed = _OFFSET.fullmatch(name)
    if fixed is not None:
        sign, hours, minutes = fixed.groups()
        if int(hours) < 24 and int(minutes) < 60:
            offset = timedelta(hours=int(hours), minutes=int(minutes))
            return timezone(-offset if sign == "-" else offset)
    elif (zone := _named_zone(name)) is not None:
        return zone
    raise ValueError(f"unknown time zone {name!r}: give an IANA name (Europe/Berlin) or an "
                     "offset from UTC (+05:30)")


def local_zone() -> str:
    """The name of this machine's zone, as the C library finds it: ``TZ`` (empty: UTC),
    else the zone ``/etc/localtime`` links to. ``TZ=localtime`` is read as no ``TZ``: the
    zone database's ``localtime`` is a link to that file, and the name sent to a server
    would name the server's own zone. Where neither is a zone's
    name (a POSIX rule in ``TZ``, a copied ``/etc/localtime``), its offset from UTC now
    (:func:`local_offset`): right for every time but across a daylight-saving change."""
    tz = os.environ.get("TZ", "localtime").removeprefix(":")
    if tz != "localtime":
        name = tz or "UTC"
    else:
        name = os.path.realpath("/etc/localtime").partition("/zoneinfo/")[2]
    return name if _named_zone(name) is not None else local_offset()


def local_offset() -> str:
    """This machine's offset from UTC now, as a zone (``+05:30``): for a reader that does
    not know its zone's name."""
    offset = datetime.now().astimezone().strftime("%z")  # +0530
    return f"{offset[:3]}:{offset[3:5]}"


def _named_zone(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    except (LookupError, ValueError, OSError):  # no such zone; a path; not a zone's file
        return None
