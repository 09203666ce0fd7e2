"""``apportion export-trace`` and ``apportion whatif``: the live service's history as a
trace, and that history replayed under the current and a proposed setting side by side
(docs/simulator.md, "What-if on live history")."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import click

from apportion.core import format_duration, plural
from apportion.core.tree import MAX_WEIGHT, MIN_WEIGHT
from apportion.core.units import format_figure

from .numbers import readable
from .paths import OUTPUT_DIR, OUTPUT_FILE, output_dir, output_file


def _config(config_path: str | None) -> Any:
    from apportion.service.config import ConfigError, ServiceConfig, load_config

    try:
        return load_config(config_path) if config_path else ServiceConfig()
    except ConfigError as e:
        raise click.ClickException(str(e)) from None


def _until(text: str | None) -> float | None:
    """``--until`` in seconds since the epoch, read as ``report usage`` reads ``--to``
    (``accounting.parse_time``: a date, a date and time, epoch seconds, a duration ago);
    None for now (no --until, or ``now``), so that the server replays up to its own now."""
    from apportion.service.accounting import ReportError, parse_time

    if text is None or text.strip().lower() == "now":
        return None
    try:
        seconds = parse_time(text, "--until", time.time())
    except ReportError as e:
        raise click.BadParameter(str(e).removeprefix("--until: "),
                                 param_hint="--until") from None
    if seconds < 0:  # no end of a period
        raise click.BadParameter(f"seconds since the epoch must be >= 0, got {text!r}",
                                 param_hint="--until")
    return seconds


def _since(text: str) -> float:
    from apportion.service.validation import duration_seconds

    try:
        value = duration_seconds(text)  # the server's bound: '1e308' is refused as typed
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--since") from None
    if value <= 0:
        raise click.BadParameter(f"must be longer than 0, got {text!r}", param_hint="--since")
    return value


_FLAGS = {"since": "--since", "until": "--until", "set_weight": "--set-weight", "set": "--set"}


def _nothing_to_replay(message: str, since: str, until: str | None) -> click.ClickException:
    """A period with nothing in it, said with the flags that made it (bad input)."""
    from .client import BadInput

    return BadInput(f"--since {since} --until {until or 'now'}: {message}")


def _history(config_path: str | None, since: str, until: str | None) -> Any:
    from apportion.service.store import StoreMissing, StoreUnavailable, open_for_reading
    from apportion.service.whatif import WhatifError, load_history

    from .client import BadInput

    config = _config(config_path)
    try:
        store = open_for_reading(config.db_url)
    except StoreMissing as e:  # the store named (or not named: no --config) is not there:
        # a required input missing, the usage code as every command's (docs/cli.md)
        hint = "" if config_path else (" (without --config, the store of a service started "
                                       "in this directory; give the service's config with "
                                       "--config FILE)")
        raise BadInput(f"{e}{hint}") from None
    except StoreUnavailable as e:  # there, but unreachable or of another schema
        raise click.ClickException(str(e)) from None
    end = _until(until)
    now = time.time()
    try:
        return load_history(store, _since(since), now if end is None else end, config.pools,
                            now=now)
    except WhatifError as e:
        if e.field == "period":
            raise _nothing_to_replay(str(e), since, until) from None
        raise click.BadParameter(str(e), param_hint=_FLAGS[e.field]) from None
    finally:
        store.close()


OCCUPANCY_NOTE = (
    "replay occupancy: assigned GPUs over healthy GPUs, as the simulator counts them; work "
    "still running on draining hosts counts as assigned while the host is not healthy: this "
    "can exceed 100%; apportion report usage leaves it out of both")
"""Said under a replay's pool occupancies when its period had host events (a drain among
them): the replay's occupancy is not the live report's (docs/simulator.md)."""


def _cut_note(until: str | None, period: dict[str, Any]) -> str | None:
    """What to say when ``--until`` was after now: the period was cut to end now (the
    store has no history after it; running work counts its run so far)."""
    end = _until(until)
    if end is None or end <= period["end"]:
        return None
    from .client import fmt_time

    return (f"note: --until {until} is after now: the period ends now, at "
            f"{fmt_time(period['end'])} (work still running counts its run up to then)")


def _summary_line(period: dict[str, Any]) -> str:
    """The first line of export-trace and whatif: what the period held and how it is
    replayed (``period`` as in whatif's JSON), its times in this machine's zone."""
    from .client import fmt_time

    pools = period["pools"]
    in_pools = f" in {plural(len(pools), 'pool')} ({', '.join(pools)})" if pools else ""
    former = period["in_former_leaves"]
    in_former = (f"; {sum(former.values()):,} submitted to "
                 f"{'a budget that has' if len(former) == 1 else 'budgets that have'} "
                 f"children now ({', '.join(former)}), left out" if former else "")
    return (f"{plural(period['workloads'], 'workload')} submitted from {fmt_time(period['start'])} "
            f"to {fmt_time(period['end'])} ({period['running_at_end']:,} still running at the end, "
            f"replayed with their run so far; {period['waiting_at_end']:,} still waiting, "
            f"replayed with their budget's mean run; {period['cancelled_unstarted']:,} cancelled "
            f"unstarted, left out{in_former}), {plural(period['hosts'], 'host')}{in_pools}, "
            f"{plural(period['host_events'], 'host event')}")


@click.command("export-trace")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="the service's TOML config (the store it names is read)")
@click.option("--since", required=True, metavar="DURATION",
              help="length of the period, ending at --until (e.g. 14d)")
@click.option("--until", metavar="TIME", help="end of the period, written as report usage's "
              "--to: 2026-11-01, 2026-11-01T08:00 (UTC unless an offset is given), a "
              "duration ago (1d), epoch seconds (not 8 digits: 20261206 is refused as a date "
              "written without dashes) or now (the default)")
@click.option("--out", required=True, type=OUTPUT_FILE,
              callback=output_file,
              help="trace file: .csv, .tsv, .jsonl (also .ndjson, .json), each with or "
              "without .gz, or .parquet (.pq)")
def export_trace(config_path: str | None, since: str, until: str | None, out: Path) -> None:
    """Write the service's history of a period as a canonical trace (docs/traces.md), with
    the budget tree and the hosts beside it, ready for apportion simulate --trace."""
    from apportion.service.whatif import days, period, write_export
    from apportion.sim.traces import TraceError

    history = _history(config_path, since, until)
    try:
        files = write_export(history, out)
    except (TraceError, OSError) as e:  # the trace's errors start with the path: said once
        raise click.ClickException(f"--out {out}: {str(e).removeprefix(f'{out}: ')}") from None
    click.echo(_summary_line(period(history)))
    note = _cut_note(until, period(history))
    if note:
        click.echo(note)
    for kind, path in files.items():
        click.echo(f"wrote {path} ({kind.replace('_', ' ')})")
    click.echo(f"replay: apportion simulate --trace {files['trace']} --tree {files['tree']} "
               f"--cluster {files['hosts']} --days {days(history)!r} --out DIR")
    if history.host_events:
        one = len(history.host_events) == 1
        click.echo(f"note: the {plural(len(history.host_events), 'host event')} in "
                   f"{files['host_events']} {'is' if one else 'are'} not part of the trace "
                   f"format; apportion whatif replays {'it' if one else 'them'}, apportion "
                   "simulate --trace does not")


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _dur(v: Any) -> str:
    return "-" if v is None else format_duration(float(v))


def format_whatif(rows: list[dict[str, Any]]) -> str:
    cols = ["budget", "weight", "attainment", "delivered GPU-h", "wait p50", "wait p90",
            "preemptions"]
    lines = [cols]
    for r in rows:
        c, p = r["current"], r["proposed"]
        lines.append([
            r["budget"],
            f"{r['weight_current']:g}" + (f" -> {r['weight_proposed']:g}"
                                          if r["weight_proposed"] != r["weight_current"] else ""),
            f"{_pct(c['attainment'])} -> {_pct(p['attainment'])}",
            _delivered(c, p),
            f"{_dur(c['wait_p50_s'])} -> {_dur(p['wait_p50_s'])}",
            f"{_dur(c['wait_p90_s'])} -> {_dur(p['wait_p90_s'])}",
            f"{c['preemptions']} -> {p['preemptions']}",
        ])
    return _table(lines)


def format_overall(overall: dict[str, Any]) -> str:
    """The whole cluster, current -> proposed: attainment per team and per researcher (the
    two differ when a team's share goes unevenly to its researchers), wait p90,
    preemptions."""
    c, p = overall["current"], overall["proposed"]
    return (f"overall: attainment per team {_pct(c['attainment_teams'])} -> "
            f"{_pct(p['attainment_teams'])}, per researcher {_pct(c['attainment'])} -> "
            f"{_pct(p['attainment'])}, wait p90 {_dur(c['wait_p90_s'])} -> "
            f"{_dur(p['wait_p90_s'])}, preemptions {c['preemptions']} -> {p['preemptions']}")


def _table(lines: list[list[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(line, widths, strict=True)))
                     .rstrip() for line in lines)


def format_pool(pool: dict[str, Any]) -> str:
    """One pool of a several-pool what-if: a line of the pool's figures, then its budget
    nodes' (current -> proposed)."""
    c, p = pool["current"], pool["proposed"]
    head = (f"pool {pool['pool']} ({pool['gpus']:,} GPUs): replay occupancy "
            f"{_pct(c['occupancy'])} "
            f"-> {_pct(p['occupancy'])}, delivered {_delivered(c, p)} GPU-h, attainment "
            f"{_pct(c['attainment'])} -> "
            f"{_pct(p['attainment'])}, wait p50 {_dur(c['wait_p50_s'])} -> "
            f"{_dur(p['wait_p50_s'])}, preemptions {c['preemptions']} -> {p['preemptions']}")
    if not pool["budgets"]:
        return head
    lines = [["budget", "attainment", "delivered GPU-h", "wait p50", "preemptions"]]
    for r in pool["budgets"]:
        c, p = r["current"], r["proposed"]
        lines.append([
            r["budget"],
            f"{_pct(c['attainment'])} -> {_pct(p['attainment'])}",
            _delivered(c, p),
            f"{_dur(c['wait_p50_s'])} -> {_dur(p['wait_p50_s'])}",
            f"{c['preemptions']} -> {p['preemptions']}",
        ])
    return head + "\n" + _table(lines)


def format_pools(result: dict[str, Any]) -> list[str]:
    """With several pools, where the change moves the work: a block per pool, then, when
    the period had host events, what the replay's occupancy counts (it can exceed 100%)."""
    pools = result.get("pools", [])
    note = [OCCUPANCY_NOTE] if pools and result["period"]["host_events"] else []
    return [format_pool(pool) for pool in pools] + note


def _weights(items: tuple[str, ...]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for item in items:
        path, sep, text = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected PATH=WEIGHT, got {item!r}",
                                     param_hint="--set-weight")
        try:
            weight = float(text)
        except ValueError:
            weight = math.nan
        # float() reads nan and inf too; the range is the tree's, as `budgets set` takes it
        if not (math.isfinite(weight) and MIN_WEIGHT <= weight <= MAX_WEIGHT):
            raise click.BadParameter(f"{item}: weight must be a number from "
                                     f"{readable(MIN_WEIGHT)} to {readable(MAX_WEIGHT)}",
                                     param_hint="--set-weight")
        if path.strip() in weights:
            raise click.BadParameter(f"{path.strip()} is given twice", param_hint="--set-weight")
        weights[path.strip()] = weight
    return weights


def _delivered(current: dict[str, Any], proposed: dict[str, Any]) -> str:
    """Delivered GPU-hours, current -> proposed, to one decimal at any size (``1,297.1``),
    as the dashboard's preview and ``report usage`` write them: a change of 0.2 GPU-h
    shows as 0.2, not as 1 once the figure passes 100."""
    return (f"{format_figure(current['delivered_gpu_hours'])} -> "
            f"{format_figure(proposed['delivered_gpu_hours'])}")


def _ask_server(url: str | None, token: str | None, since: str, until: str | None,
                weights: dict[str, float], settings: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/whatif``: the server replays its own history with its own settings. Its
    refusal of a proposal (422 ``set_weight: ...``) is a usage error naming the flag, as the
    same refusal is when the store is read here."""
    from .client import BadInput, make_client, parse

    client = make_client(url, token)
    body: dict[str, Any] = {"since": _since(since), "until": _until(until),
                            "set_weight": weights, "set": settings}
    if sys.stderr.isatty():
        click.echo(f"replaying the history of the last {since} on {client.url} ...", err=True)
    # a replay takes seconds to minutes: no read timeout
    r = client.call("POST", "/whatif", body, timeout=None, accept=(422,))
    detail = r.json().get("detail") if r.status_code == 422 else None
    if isinstance(detail, str):
        field, _, message = detail.partition(": ")
        head, dot, key = field.partition(".")  # the body's checks say set_weight.PATH: ...
        if head in _FLAGS:
            raise click.BadParameter(f"{key}: {message}" if dot else message,
                                     param_hint=_FLAGS[head])
        if head == "period":
            raise _nothing_to_replay(message, since, until)
    if r.status_code == 422:
        raise BadInput(f"{detail} (HTTP 422)")
    from apportion.service.replies import Whatif

    result: dict[str, Any] = r.json()
    parse(Whatif, result, "POST /v1/whatif")  # a server of another version: say so
    return result


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="the service's TOML config: read its store and settings here (on the "
              "server's host) instead of asking the server")
@click.option("--since", required=True, metavar="DURATION",
              help="length of the period to replay, ending at --until (e.g. 14d)")
@click.option("--until", metavar="TIME", help="end of the period, written as report usage's "
              "--to: 2026-11-01, 2026-11-01T08:00 (UTC unless an offset is given), a "
              "duration ago (1d), epoch seconds (not 8 digits: 20261206 is refused as a date "
              "written without dashes) or now (the default)")
@click.option("--set-weight", "set_weights", multiple=True, metavar="PATH=WEIGHT",
              help="proposed weight of a budget (repeatable)")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="proposed PolicyConfig or engine setting (repeatable; admins only)")
@click.option("--out", type=OUTPUT_DIR, callback=output_dir,
              help="also write whatif.json, whatif.csv (and whatif-pools.csv with several "
              "pools), and with --config both runs' outputs, here")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--url", envvar="APPORTION_URL",
              help="server to ask, without --config (env APPORTION_URL)")
@click.option("--token", envvar="APPORTION_TOKEN", help="bearer token (env APPORTION_TOKEN)")
def whatif(config_path: str | None, since: str, until: str | None, set_weights: tuple[str, ...],
           settings: tuple[str, ...], out: Path | None, as_json: bool, url: str | None,
           token: str | None) -> None:
    """Replay the service's own history of a period through the simulator with the current
    and the proposed settings; print per-budget attainment, waits and preemptions side by
    side.

    Without --config the server replays it (POST /v1/whatif: admins, and managers for the
    weights they may set, seeing the budgets they manage); with --config it is replayed
    here from the service's store."""
    from apportion.service.whatif import WhatifError, compare
    from apportion.sim.run import write_csv, write_outputs

    from .simulate import parse_settings

    weights = _weights(set_weights)
    proposed_settings = parse_settings(settings)
    if config_path is None:
        result = _ask_server(url, token, since, until, weights, proposed_settings)
        runs = None
    else:
        service = _config(config_path)
        history = _history(config_path, since, until)
        try:
            outcome = compare(history, service.policy, weights, proposed_settings,
                              progress=not as_json)
        except WhatifError as e:
            raise click.BadParameter(str(e), param_hint=_FLAGS[e.field]) from None
        result, runs = outcome.result, (outcome.current, outcome.proposed)
    rows, overall = result["budgets"], result["overall"]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if runs is not None:
            write_outputs(out / "current", [runs[0]])
            write_outputs(out / "proposed", [runs[1]])
        (out / "whatif.json").write_text(json.dumps(result, indent=2) + "\n")
        metrics = ("attainment", "delivered_gpu_hours", "wait_p50_s", "wait_p90_s",
                   "preemptions")
        write_csv(out / "whatif.csv",
                  ["budget", "weight_current", "weight_proposed",
                   *(f"{m}_{k}" for k in ("current", "proposed") for m in metrics)],
                  ([r["budget"], r["weight_current"], r["weight_proposed"],
                    *(r[k][m] for k in ("current", "proposed") for m in metrics)]
                   for r in rows))
        if "pools" in result:
            pool_metrics = ("attainment", "delivered_gpu_hours", "wait_p50_s", "preemptions")
            write_csv(out / "whatif-pools.csv",
                      ["pool", "budget",
                       *(f"{m}_{k}" for k in ("current", "proposed") for m in pool_metrics)],
                      ([pool["pool"], r["budget"],
                        *(r[k][m] for k in ("current", "proposed") for m in pool_metrics)]
                       for pool in result["pools"] for r in pool["budgets"]))
    note = _cut_note(until, result["period"])
    if as_json:
        if note:
            click.echo(note, err=True)
        click.echo(json.dumps(result))
        return
    click.echo(_summary_line(result["period"]))
    if note:
        click.echo(note)
    changes = [f"{p}={w:g}" for p, w in weights.items()] + list(settings)
    click.echo(f"current settings -> proposed ({', '.join(changes) or 'no change'}):")
    click.echo(format_whatif(rows))
    click.echo(format_overall(overall))
    for block in format_pools(result):
        click.echo(block)
    if out is not None:
        click.echo(f"wrote {out}")
