"""``apportion report usage``: GPU-hours, owed and attainment for any period (like
``sreport``), from the server's store. The figures are computed by the server
(``GET /v1/reports/usage``, :mod:`apportion.service.accounting`); this prints them."""

from __future__ import annotations

import time
from pathlib import Path

import click

from apportion.cli.client import (
    BadInput,
    Client,
    _print_json,
    as_typed,
    connection,
    parse,
    table,
)
from apportion.service.accounting import (
    BY,
    ReportError,
    headline,
    parse_time,
    pool_table_rows,
    table_rows,
)
from apportion.service.replies import UsageReport

from .paths import OUTPUT_FILE, output_file

FORMATS = ("table", "csv", "json", "html")


@click.group()
def report() -> None:
    """Reports over any period: usage per budget, user or month."""


@report.command("usage")
@click.option("--from", "start", default="30d", show_default=True,
              help="start: 2026-11-01, 2026-11-01T08:00 (UTC unless an offset is given), "
                   "a duration ago (30d), or epoch seconds (not 8 digits: 20261206 is refused "
                   "as a date written without dashes)")
@click.option("--to", "end", default="now", show_default=True, help="end, written like --from")
@click.option("--by", type=click.Choice(BY), default="budget", show_default=True)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", "-o", type=OUTPUT_FILE,
              callback=output_file,
              help="write to this file instead of the terminal (the html page, typically)")
@connection
def usage(client: Client, start: str, end: str, by: str, fmt: str,
          output: Path | None) -> None:
    """Charged and free GPU-hours, owed, delivered and attainment (owed: each hour the lesser
    of the share of healthy GPUs and what allocated work asked for)."""
    now = time.time()
    try:  # here, so that an error names the flag as typed
        period = [parse_time(start, "--from", now), parse_time(end, "--to", now)]
    except ReportError as e:
        raise BadInput(str(e)) from None
    if period[0] >= period[1]:
        raise BadInput(f"--from: {start} is not before --to ({end})")
    # "now" is the server's own: the client's clock, read here, may be ahead of it
    params = {"from": repr(period[0]), "to": "now" if end.strip() == "now" else repr(period[1]),
              "by": by,
              "format": "json" if fmt in ("table", "json") else fmt}
    try:
        # a report of a long period takes the server a while: no read timeout (as whatif)
        r = client.call("GET", "/reports/usage", params=params, timeout=None)
        if fmt in ("csv", "html"):
            text = r.text
        else:
            data = r.json()
    except click.ClickException as e:  # the server's refusals, named as typed
        raise as_typed(e, {"from": "--from", "to": "--to", "by": "--by"}) from None
    if fmt in ("csv", "html"):
        if end.strip() != "now" and period[1] > now:  # the server's end: about this now
            _cut_note(end, now)
        if output is not None:
            output.write_text(text, encoding="utf-8")
            click.echo(f"wrote {output}")
        else:
            click.echo(text, nl=False)
        return
    if end.strip() != "now" and float(data.get("to", period[1])) < period[1]:
        _cut_note(end, float(data["to"]))
    if fmt == "json":
        if output is not None:
            import json

            output.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
            click.echo(f"wrote {output}")
        else:
            _print_json(data)
        return
    report_ = parse(UsageReport, data, "GET /v1/reports/usage").model_dump(by_alias=True)
    header, cells = table_rows(report_)
    table(header, cells)
    header, cells = pool_table_rows(report_)
    if cells:  # several pools: each one's GPU-hours, billed units and occupancy
        click.echo("")
        table(header, cells)
    click.echo(f"\n{headline(report_)}")


def _cut_note(end: str, now: float) -> None:
    """Say on stderr that ``--to`` (as typed) was after now and the report ends ``now``
    (the server's, from its answer): there is no usage after now to count."""
    from .client import fmt_time

    click.echo(f"note: --to {end} is after now: the report ends now, at {fmt_time(now)} "
               "(work still running counts its run up to then)", err=True)
