"""``apportion report usage`` against a real ``apportion serve`` (local executor, real
processes, SQLite): the table, CSV, JSON and HTML forms, with figures equal to what the
store charged the attempts."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import Live, live_server


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server("sqlite", tmp_path, {"h1": 8}) as s:
        yield s


def test_report_usage_forms_match_the_charged_attempts(live: Live, tmp_path: Path) -> None:
    """Two workloads run and end (alice on ai/llm, allocated; bob on ai/vision,
    unallocated). Over the last day: ai/llm's charged GPU-hours are alice's attempt's
    GPU-seconds / 3600 as the store recorded them, ai/vision's free ones bob's; the table
    has a row per budget node; per user the same figures; the HTML page has its three plots."""
    a = live.submit("alice", "ai/llm", 2, "1m", "sleep 1")
    b = live.submit("bob", "ai/vision", 1, 0, "sleep 1")
    wa = live.wait_status(a, "completed")
    wb = live.wait_status(b, "completed")
    charged = sum(x["gpu_seconds"] for x in wa["attempts"]) / 3600
    free = sum(x["gpu_seconds"] for x in wb["attempts"]) / 3600
    assert charged > 0 and free > 0

    r = live.cli("root", "report", "usage", "--from", "1d", "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = {row["budget"]: row for row in csv.DictReader(io.StringIO(r.stdout))}
    assert float(rows["ai/llm"]["charged_gpu_hours"]) == pytest.approx(charged, rel=1e-12)
    assert float(rows["ai/vision"]["free_gpu_hours"]) == pytest.approx(free, rel=1e-12)
    assert float(rows["ai/vision"]["charged_gpu_hours"]) == 0.0

    table = live.cli("root", "report", "usage", "--from", "1d")
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["BUDGET", "SHARE", "CHARGED"]
    assert [line.split()[0] for line in lines[1:5]] == ["(all)", "ai", "ai/llm", "ai/vision"]
    assert lines[5] == "" and "healthy GPU-hours; occupancy" in lines[6]

    users = json.loads(live.cli("root", "report", "usage", "--from", "1d", "--by", "user",
                                "--format", "json").stdout)
    by_user = {u["user"]: u for u in users["rows"]}
    assert by_user["alice"]["charged_gpu_hours"] == pytest.approx(charged, rel=1e-12)
    assert by_user["bob"]["free_gpu_hours"] == pytest.approx(free, rel=1e-12)

    page = tmp_path / "usage.html"
    out = live.cli("root", "report", "usage", "--from", "1d", "--format", "html", "-o",
                   str(page))
    assert out.returncode == 0 and out.stdout == f"wrote {page}\n"
    assert page.read_text().count("<img ") == 3


def test_small_usage_is_shown_with_two_significant_digits_not_as_none(live: Live) -> None:
    """Work of seconds charges a few ten-thousandths of a GPU-hour: the tables of ``report
    usage`` and ``budgets usage`` show ai/llm's charged and ai/vision's free GPU-hours with
    two significant digits (``0.00056``), the figure the JSON holds, not as ``0.0``, which
    read as no usage at all; a budget that used nothing still shows ``0.0``."""
    a = live.submit("alice", "ai/llm", 2, "1m", "sleep 1")
    b = live.submit("bob", "ai/vision", 1, 0, "sleep 1")
    charged = sum(x["gpu_seconds"] for x in live.wait_status(a, "completed")["attempts"])
    free = sum(x["gpu_seconds"] for x in live.wait_status(b, "completed")["attempts"])
    assert 0 < charged / 3600 < 0.05 and 0 < free / 3600 < 0.05  # each 0.0 to one decimal

    r = live.cli("root", "report", "usage", "--from", "1d")
    assert r.returncode == 0, r.stderr
    header, *lines = r.stdout.splitlines()
    rows = {line.split()[0]: dict(zip(re.split(r"\s{2,}", header), line.split(), strict=True))
            for line in lines[:lines.index("")]}
    assert float(rows["ai/llm"]["CHARGED GPU-H"]) == pytest.approx(charged / 3600, rel=0.06)
    assert float(rows["ai/vision"]["FREE GPU-H"]) == pytest.approx(free / 3600, rel=0.06)
    assert rows["ai/vision"]["CHARGED GPU-H"] == "0.0"

    r = live.cli("root", "budgets", "usage")
    assert r.returncode == 0, r.stderr
    _, header, *lines = r.stdout.splitlines()
    rows = {line.split()[0]: dict(zip(header.split(), line.split(), strict=True))
            for line in lines}
    assert float(rows["llm"]["CHARGED_GPU_H"]) == pytest.approx(charged / 3600, rel=0.06)
    assert float(rows["vision"]["FREE_GPU_H"]) == pytest.approx(free / 3600, rel=0.06)


def test_report_usage_output_that_cannot_be_written_names_the_flag(
    live: Live, tmp_path: Path,
) -> None:
    """-o in a directory that does not exist: exit 2 naming --output/-o, before asking the
    server (before, a traceback after the report had been fetched)."""
    r = live.cli("root", "report", "usage", "--format", "html", "-o",
                 str(tmp_path / "nope" / "r.html"))
    assert r.returncode == 2
    assert (f"Invalid value for '--output' / '-o': {tmp_path / 'nope' / 'r.html'}: cannot "
            "write there: no such directory") in r.stderr


def test_report_usage_refuses_a_bad_date_naming_the_flag(live: Live) -> None:
    """--from "last tuesday": exit 2 naming the flag as typed; the API names its parameter."""
    r = live.cli("root", "report", "usage", "--from", "last tuesday")
    assert r.returncode == 2
    assert "Error: --from: must be a date (2026-11-01), a date and time" in r.stderr
    api = live.call("GET", "/v1/reports/usage?from=last%20tuesday", "root")
    assert (api.status_code, api.json()["detail"].split(",")[0]) == (
        422, "from: must be a date (2026-11-01)")


def test_report_usage_names_the_flags_of_a_period_it_refuses(live: Live) -> None:
    """--from after --to is refused naming both flags as typed (it once said the server's
    'from: must be before to'); the server's refusal of a period over 3,660 days names
    --from too, for the table and the csv forms alike."""
    r = live.cli("root", "report", "usage", "--from", "2026-12-06T10:00", "--to",
                 "2026-12-06T09:00")
    assert (r.returncode, r.stderr.strip()) == (
        2, "Error: --from: 2026-12-06T10:00 is not before --to (2026-12-06T09:00)")
    for fmt in ("table", "csv"):
        r = live.cli("root", "report", "usage", "--from", "4000d", "--format", fmt)
        assert r.returncode == 2
        assert r.stderr.startswith(
            "Error: --from: the period may be at most 3,660 days, got 4,000"), r.stderr
