"""Times on the CLI name their zone, and every command writes an instant alike: the client
in Asia/Kolkata (+05:30), the server (``apportion serve``, local executor, SQLite) in UTC.
``show``, ``why`` (whose sentences the server composes), ``hosts list``, ``audit`` and
``tokens list`` each write a time as ``2026-12-06 21:50:05+05:30``: the client's zone,
with its offset (apportion.times)."""

from __future__ import annotations

import re
import shutil
import zoneinfo
from collections.abc import Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from e2e_helpers import Live, live_server, until_sigterm

from apportion.times import format_time

CLIENT_ZONE = ZoneInfo("Asia/Kolkata")
# a time of day with its seconds, and what follows it up to a blank
CLOCK = re.compile(r"\d\d:\d\d:\d\d\S*")


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    monkeypatch.setenv("TZ", "UTC")  # the server's zone: it inherits the environment
    with live_server("sqlite", tmp_path, {"h1": 8, "h2": 8}) as s:
        monkeypatch.setenv("TZ", "Asia/Kolkata")  # the client's: each live.cli inherits it
        yield s


def shown(t: float) -> str:
    """``t`` as the client must write it."""
    return format_time(t, CLIENT_ZONE)


def cli(live: Live, who: str, *args: str) -> str:
    r = live.cli(who, *args)
    assert r.returncode == 0, r.stderr
    clocks = CLOCK.findall(r.stdout)
    assert clocks and all(c.endswith("+05:30") for c in clocks), r.stdout
    return r.stdout


def test_show_why_hosts_audit_and_tokens_write_an_instant_alike_in_the_clients_zone(
    live: Live, tmp_path: Path,
) -> None:
    """alice's workload runs (1 h protected), h2 is drained (empty: to repair). Every time
    the commands print carries +05:30, and is the stored instant in Kolkata: ``show`` its
    submission and start, ``why`` its protection end (start + 1 h), ``hosts list`` h2's
    change, ``audit`` h2's last entry, ``tokens list`` the token's creation. Once
    cancelled, ``why`` tells its story with the same submission and start as ``show``."""
    ready = tmp_path / "ready"
    wid = live.submit("alice", "ai/llm", 1, "1h", until_sigterm(ready, tmp_path / "m", 600))
    live.wait_file(ready)
    live.ok("POST", "/v1/hosts/h2/drain", "root", {"reason": "fan"})
    live.wait_host("h2", "repair")  # empty: drained at once, and left alone from then on
    w = live.wait_status(wid, "running")
    (attempt,) = w["attempts"]
    host = attempt["placement"][0][0]
    submitted, started = shown(w["submit_time"]), shown(attempt["started_at"])

    show = cli(live, "alice", "show", wid)
    assert f"submitted:           {submitted}\n" in show
    assert re.search(rf"^1 +{re.escape(started)} +- +{host}:1 ", show, re.M), show
    why = cli(live, "alice", "why", wid).splitlines()
    assert any(line.startswith("protected for another ")
               and line.endswith(f", until {shown(attempt['started_at'] + 3600)}")
               for line in why), why

    changed = live.hosts()["h2"]["changed_at"]
    hosts = cli(live, "root", "hosts", "list")
    assert re.search(rf"^h2 .* {re.escape(shown(changed))} ", hosts, re.M), hosts
    (entry,) = live.ok("GET", "/v1/audit?target=h2&limit=1")
    audit = cli(live, "root", "audit", "--target", "h2", "--limit", "1")
    assert audit.splitlines()[1].startswith(
        f"{shown(entry['at'])}  {entry['actor']}  {entry['action']}  h2 ")
    (token,) = live.ok("GET", "/v1/tokens?user=alice")
    tokens = cli(live, "root", "tokens", "list", "--user", "alice")
    assert f" {shown(token['created_at'])} " in tokens

    live.ok("POST", f"/v1/workloads/{wid}/cancel", "alice")
    live.wait_status(wid, "cancelled")
    story = cli(live, "alice", "why", wid).splitlines()
    assert story[0].endswith(f"): submitted by alice at {submitted}")
    assert story[1].startswith(f"attempt 1: ran on {host} (1 GPU) from {started} for ")
    assert f"submitted:           {submitted}\n" in cli(live, "alice", "show", wid)


def test_why_in_a_zone_the_server_does_not_know_is_written_at_the_zones_offset(
    live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client's zone is Kolkata's under a name only the client's zone database has
    (``TZ=Mars/Olympus``, its file in ``TZDIR`` and ``PYTHONTZPATH``): ``why`` is not
    refused (the server's 422 named a ``tz`` the user never typed) but asks again with the
    zone's offset now, so its protection end is the start ``show`` writes + 1 h, at
    +05:30."""
    kolkata = next(Path(d, "Asia", "Kolkata") for d in zoneinfo.TZPATH
                   if Path(d, "Asia", "Kolkata").is_file())
    zones = tmp_path / "zones"
    (zones / "Mars").mkdir(parents=True)
    shutil.copy(kolkata, zones / "Mars" / "Olympus")
    for variable in ("TZDIR", "PYTHONTZPATH"):  # the C library's and Python's
        monkeypatch.setenv(variable, str(zones))
    monkeypatch.setenv("TZ", "Mars/Olympus")
    ready = tmp_path / "ready"
    wid = live.submit("alice", "ai/llm", 1, "1h", until_sigterm(ready, tmp_path / "m", 600))
    live.wait_file(ready)
    (attempt,) = live.wait_status(wid, "running")["attempts"]
    assert f"{shown(attempt['started_at'])} " in cli(live, "alice", "show", wid)
    why = cli(live, "alice", "why", wid).splitlines()
    assert any(line.startswith("protected for another ")
               and line.endswith(f", until {shown(attempt['started_at'] + 3600)}")
               for line in why), why
    live.ok("POST", f"/v1/workloads/{wid}/cancel", "alice")


def test_audit_from_reads_a_date_as_utc_as_its_help_says_and_an_empty_page_says_the_period(
    live: Live,
) -> None:
    """In Kolkata, ``audit --help`` names the zone of a date without an offset (UTC, as
    ``report usage --help`` does); ``audit --from 2099-01-01 --to 2099-01-02`` finds
    nothing and says on stderr the period it searched, in the client's zone, with the flags
    as typed (before: an empty table, nothing said, so that a date read as 05:30 local
    went unseen; stdout says "no entries", not a bare header); a bad --from is refused
    naming it."""
    help_text = " ".join(live.cli("root", "audit", "--help").stdout.split())
    assert "(UTC unless an offset is given" in help_text
    r = live.cli("root", "audit", "--from", "2099-01-01", "--to", "2099-01-02")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "no entries\n"
    assert r.stderr == ("no entries at or after 2099-01-01 05:30:00+05:30 (--from 2099-01-01) "
                        "and before 2099-01-02 05:30:00+05:30 (--to 2099-01-02); a date or "
                        "time without an offset is read as UTC\n")
    r = live.cli("root", "audit", "--from", "20261207")
    assert r.returncode == 2 and "--from: '20261207' reads as seconds since the epoch" in r.stderr
