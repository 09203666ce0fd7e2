"""``apportion export-trace`` and ``apportion whatif``: the live service's history as a
trace, and that history replayed under the current and a proposed setting side by side
(docs/simulator.md, "What-if on live history")."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from apportion.core import DurationError, format_duration, parse_duration, plural


def _config(config_path: str | None) -> Any:
    from apportion.service.config import ConfigError, ServiceConfig, load_config

    try:
        return load_config(config_path) if config_path else ServiceConfig()
    except ConfigError as e:
        raise click.ClickException(str(e)) from None


def _until(text: str | None) -> float:
    if text is None:
        return time.time()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"not seconds since the epoch or an ISO 8601 time: {text!r}",
                                 param_hint="--until") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _since(text: str) -> float:
    try:
        value = parse_duration(text)
    except DurationError as e:
        raise click.BadParameter(str(e), param_hint="--since") from None
    if value <= 0:
        raise click.BadParameter(f"must be longer than 0, got {text!r}", param_hint="--since")
    return value


_FLAGS = {"since": "--since", "set_weight": "--set-weight", "set": "--set"}


def _history(config_path: str | None, since: str, until: str | None) -> Any:
    from apportion.service.store import StoreUnavailable, open_for_reading
    from apportion.whatif import WhatifError, load_history

    config = _config(config_path)
    try:
        store = open_for_reading(config.db_url)
    except StoreUnavailable as e:
        hint = "" if config_path else (" (without --config, the store of a service started "
                                       "in this directory; give the service's config with "
                                       "--config FILE)")
        raise click.ClickException(f"{e}{hint}") from None
    try:
        return load_history(store, _since(since), _until(until), config.pools)
    except WhatifError as e:
        raise click.ClickException(str(e)) from None
    finally:
        store.close()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _pools_part(history: Any) -> str:
    if history.pools is None:  # one pool: said as before pools
        return ""
    pools = sorted({"/".join(p) for p in history.pools.of_host.values()})
    return f" in {plural(len(pools), 'pool')} ({', '.join(pools)})"


def _summary_line(history: Any) -> str:
    return (f"{plural(len(history.jobs), 'workload')} submitted from {_iso(history.start)} to "
            f"{_iso(history.end)} ({history.running_at_end} still running at the end, "
            f"replayed with their run so far; {history.waiting_at_end} still waiting, replayed "
            f"with their budget's mean run; {history.cancelled_unstarted} cancelled unstarted, "
            f"left out), {plural(len(history.hosts), 'host')}{_pools_part(history)}, "
            f"{plural(len(history.host_events), 'host event')}")


@click.command("export-trace")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="the service's TOML config (the store it names is read)")
@click.option("--since", required=True, metavar="DURATION",
              help="length of the period, ending at --until (e.g. 14d)")
@click.option("--until", metavar="TIME", help="end of the period: seconds since the epoch or "
              "an ISO 8601 time (default: now)")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="trace file: .csv, .csv.gz, .jsonl or .parquet")
def export_trace(config_path: str | None, since: str, until: str | None, out: Path) -> None:
    """Write the service's history of a period as a canonical trace (docs/traces.md), with
    the budget tree and the hosts beside it, ready for apportion simulate --trace."""
    from apportion.sim.traces import TraceError
    from apportion.whatif import days, write_export

    history = _history(config_path, since, until)
    try:
        files = write_export(history, out)
    except (TraceError, OSError) as e:
        raise click.ClickException(f"--out {out}: {e}") from None
    click.echo(_summary_line(history))
    for kind, path in files.items():
        click.echo(f"wrote {path} ({kind.replace('_', ' ')})")
    click.echo(f"replay: apportion simulate --trace {files['trace']} --tree {files['tree']} "
               f"--cluster {files['hosts']} --days {days(history)!r} --out DIR")
    if history.host_events:
        click.echo(f"note: the {plural(len(history.host_events), 'host event')} in "
                   f"{files['host_events']} are not part of the trace format; apportion whatif "
                   "replays them, apportion simulate --trace does not")


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
            f"{c['delivered_gpu_hours']:,.0f} -> {p['delivered_gpu_hours']:,.0f}",
            f"{_dur(c['wait_p50_s'])} -> {_dur(p['wait_p50_s'])}",
            f"{_dur(c['wait_p90_s'])} -> {_dur(p['wait_p90_s'])}",
            f"{c['preemptions']} -> {p['preemptions']}",
        ])
    return _table(lines)


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
    head = (f"pool {pool['pool']} ({pool['gpus']:,} GPUs): occupancy {_pct(c['occupancy'])} "
            f"-> {_pct(p['occupancy'])}, delivered {c['delivered_gpu_hours']:,.0f} -> "
            f"{p['delivered_gpu_hours']:,.0f} GPU-h, attainment {_pct(c['attainment'])} -> "
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
            f"{c['delivered_gpu_hours']:,.0f} -> {p['delivered_gpu_hours']:,.0f}",
            f"{_dur(c['wait_p50_s'])} -> {_dur(p['wait_p50_s'])}",
            f"{c['preemptions']} -> {p['preemptions']}",
        ])
    return head + "\n" + _table(lines)


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="the service's TOML config (its store and policy settings are used)")
@click.option("--since", required=True, metavar="DURATION",
              help="length of the period to replay, ending at --until (e.g. 14d)")
@click.option("--until", metavar="TIME", help="end of the period: seconds since the epoch or "
              "an ISO 8601 time (default: now)")
@click.option("--set-weight", "set_weights", multiple=True, metavar="PATH=WEIGHT",
              help="proposed weight of a budget (repeatable)")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="proposed PolicyConfig or engine setting (repeatable)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="also write whatif.json, whatif.csv (and whatif-pools.csv with several "
              "pools) and both runs' outputs here")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def whatif(config_path: str | None, since: str, until: str | None, set_weights: tuple[str, ...],
           settings: tuple[str, ...], out: Path | None, as_json: bool) -> None:
    """Replay the service's own history of a period through the simulator with the current
    and the proposed settings; print per-budget attainment, waits and preemptions side by
    side."""
    from apportion.sim.run import write_csv, write_outputs
    from apportion.whatif import WhatifError, compare

    from .simulate import parse_settings

    service = _config(config_path)
    history = _history(config_path, since, until)
    weights: dict[str, float] = {}
    for item in set_weights:
        path, sep, text = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected PATH=WEIGHT, got {item!r}",
                                     param_hint="--set-weight")
        try:
            weights[path.strip()] = float(text)
        except ValueError:
            raise click.BadParameter(f"{path.strip()}: weight must be a number > 0, got "
                                     f"{text!r}", param_hint="--set-weight") from None
    try:
        outcome = compare(history, service.policy, weights, parse_settings(settings),
                          progress=not as_json)
    except WhatifError as e:
        raise click.BadParameter(str(e), param_hint=_FLAGS[e.field]) from None
    result, current, proposed = outcome.result, outcome.current, outcome.proposed
    rows, overall = result["budgets"], result["overall"]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_outputs(out / "current", [current])
        write_outputs(out / "proposed", [proposed])
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
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(_summary_line(history))
    changes = [f"{p}={w:g}" for p, w in weights.items()] + list(settings)
    click.echo(f"current settings -> proposed ({', '.join(changes) or 'no change'}):")
    click.echo(format_whatif(rows))
    c, p = overall["current"], overall["proposed"]
    click.echo(f"overall: attainment {_pct(c['attainment'])} -> {_pct(p['attainment'])}, "
               f"wait p90 {_dur(c['wait_p90_s'])} -> {_dur(p['wait_p90_s'])}, "
               f"preemptions {c['preemptions']} -> {p['preemptions']}")
    for pool in result.get("pools", ()):  # several pools: where the change moves the work
        click.echo(format_pool(pool))
    if out is not None:
        click.echo(f"wrote {out}")
