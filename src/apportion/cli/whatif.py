"""``apportion export-trace`` and ``apportion whatif``: the live service's history as a
trace, and that history replayed under the current and a proposed setting side by side
(docs/simulator.md, "What-if on live history")."""

from __future__ import annotations

import dataclasses
import difflib
import json
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from apportion.core import BudgetTree, DurationError, format_duration, parse_duration, plural


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


def _history(config_path: str | None, since: str, until: str | None) -> Any:
    from apportion.service.store import Store
    from apportion.service.store.rows import NotFound

    from .history import read_history

    store = Store(_config(config_path).db_url)
    end = _until(until)
    try:
        history = read_history(store, end - _since(since), end)
    except NotFound as e:
        raise click.ClickException(f"the store has no history to export: {e}") from None
    finally:
        store.close()
    if not history.hosts:
        raise click.ClickException("the store has no hosts: nothing to replay on")
    if not history.jobs:
        raise click.ClickException(
            f"no workload was submitted in the {format_duration(end - history.start)} before "
            f"{_iso(end)}: nothing to replay")
    return history


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def write_export(history: Any, out: Path) -> dict[str, Path]:
    """The trace (canonical format, CSV or Parquet by ``out``'s suffix) and, beside it, the
    budget tree, the hosts and the host events, which the trace format does not carry."""
    from apportion.sim.traces import write_canonical

    out.parent.mkdir(parents=True, exist_ok=True)
    write_canonical(history.jobs, out)
    stem = out.with_suffix("") if out.suffix != ".gz" else out.with_suffix("").with_suffix("")
    tree = Path(f"{stem}.tree.json")
    tree.write_text(json.dumps({p: history.tree.weight(p) for p in history.tree.nodes()},
                               indent=2) + "\n")
    hosts = Path(f"{stem}.hosts.json")
    hosts.write_text(json.dumps([{"name": h.name, "gpus": h.gpus} for h in history.hosts],
                                indent=2) + "\n")
    files = {"trace": out, "tree": tree, "hosts": hosts}
    if history.host_events:
        events = Path(f"{stem}.host-events.csv")
        events.write_text("time,host,event\n" + "".join(
            f"{e.time!r},{e.host},{e.kind.value}\n" for e in history.host_events))
        files["host_events"] = events
    return files


def _days(history: Any) -> float:
    return float(history.end - history.origin) / 86400.0


def _summary_line(history: Any) -> str:
    return (f"{plural(len(history.jobs), 'workload')} submitted from {_iso(history.start)} to "
            f"{_iso(history.end)} ({history.running_at_end} still running at the end, "
            f"replayed with their run so far; {history.waiting_at_end} still waiting, replayed "
            f"with their budget's mean run; {history.cancelled_unstarted} cancelled unstarted, "
            f"left out), {plural(len(history.hosts), 'host')}, "
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

    history = _history(config_path, since, until)
    try:
        files = write_export(history, out)
    except (TraceError, OSError) as e:
        raise click.ClickException(f"--out {out}: {e}") from None
    click.echo(_summary_line(history))
    for kind, path in files.items():
        click.echo(f"wrote {path} ({kind.replace('_', ' ')})")
    click.echo(f"replay: apportion simulate --trace {files['trace']} --tree {files['tree']} "
               f"--cluster {files['hosts']} --days {_days(history)!r} --out DIR")
    if history.host_events:
        click.echo(f"note: the {plural(len(history.host_events), 'host event')} in "
                   f"{files['host_events']} are not part of the trace format; apportion whatif "
                   "replays them, apportion simulate --trace does not")


def _weights(items: Sequence[str], tree: BudgetTree) -> dict[str, float]:
    out: dict[str, float] = {}
    nodes = tree.nodes()
    for item in items:
        path, sep, text = item.partition("=")
        path = path.strip()
        if not sep:
            raise click.BadParameter(f"expected PATH=WEIGHT, got {item!r}",
                                     param_hint="--set-weight")
        if path not in tree:
            near = difflib.get_close_matches(path, nodes, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise click.BadParameter(f"no budget {path!r}{hint}", param_hint="--set-weight")
        try:
            weight = float(text)
        except ValueError:
            weight = float("nan")
        if not weight > 0 or weight == float("inf"):
            raise click.BadParameter(f"{path}: weight must be a number > 0, got {text!r}",
                                     param_hint="--set-weight")
        out[path] = weight
    return out


def _per_budget(result: Any, tree: BudgetTree) -> dict[str, dict[str, Any]]:
    """Attainment, delivered GPU-hours (allocated work), waits (p50, p90) and preemptions
    of every budget node of one run."""
    from apportion.sim.metrics import BUDGET_HOUR_COLUMNS

    s = result.summary
    preempted: dict[str, int] = {}
    for row in result.workloads:
        path = str(row["budget"])
        n = int(row["preemptions"] or 0)
        while path:
            preempted[path] = preempted.get(path, 0) + n
            path = path.rpartition("/")[0]
    waits = s["wait_s"]["per_budget"]
    delivered: dict[str, float] = {}
    budget_col, delivered_col = BUDGET_HOUR_COLUMNS.index("budget"), BUDGET_HOUR_COLUMNS.index(
        "delivered")
    for hour in result.budget_hours:
        node = str(hour[budget_col])
        delivered[node] = delivered.get(node, 0.0) + float(hour[delivered_col])
    return {
        node: {
            "attainment": s["attainment"]["per_budget"].get(node),
            "delivered_gpu_hours": delivered.get(node, 0.0),
            "wait_p50_s": (waits.get(node) or {}).get("p50"),
            "wait_p90_s": (waits.get(node) or {}).get("p90"),
            "preemptions": preempted.get(node, 0),
        }
        for node in tree.nodes()
    }


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
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(line, widths, strict=True)))
                     .rstrip() for line in lines)


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
              help="also write whatif.json, whatif.csv and both runs' outputs here")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def whatif(config_path: str | None, since: str, until: str | None, set_weights: tuple[str, ...],
           settings: tuple[str, ...], out: Path | None, as_json: bool) -> None:
    """Replay the service's own history of a period through the simulator with the current
    and the proposed settings; print per-budget attainment, waits and preemptions side by
    side."""
    from apportion.core import PolicyConfig
    from apportion.sim.run import run_policies, write_csv, write_outputs

    from .simulate import build_scenario, parse_settings

    service = _config(config_path)
    history = _history(config_path, since, until)
    weights = _weights(set_weights, history.tree)
    proposed_settings = parse_settings(settings)
    policy_keys = set(PolicyConfig.__dataclass_fields__)
    current_cfg: PolicyConfig = service.policy
    try:
        proposed_cfg = dataclasses.replace(
            current_cfg, **{k: v for k, v in proposed_settings.items() if k in policy_keys})
        from apportion.sim.engine import SimConfig

        proposed_sim = SimConfig(**{k: v for k, v in proposed_settings.items()
                                    if k not in policy_keys})
    except (ValueError, TypeError) as e:
        raise click.BadParameter(str(e), param_hint="--set") from None
    with tempfile.TemporaryDirectory(prefix="apportion-whatif-") as tmp:
        # the very path apportion simulate --trace takes with the exported files
        files = write_export(history, Path(tmp) / "history.csv")
        scenario = build_scenario(
            "seed", files["trace"], "canonical", (), None, None, files["tree"],
            str(files["hosts"]), _days(history), 0, None, float(current_cfg.max_min_runtime))
    scenario = dataclasses.replace(scenario, name="history",
                                   host_events=tuple(history.host_events))
    new_tree = BudgetTree.build([(p, weights.get(p, history.tree.weight(p)))
                                 for p in history.tree.nodes()])
    proposed_scenario = dataclasses.replace(scenario, tree=new_tree)
    progress = not as_json
    (current,) = run_policies(scenario, ["fairshare"], current_cfg, progress=progress)
    (proposed,) = run_policies(proposed_scenario, ["fairshare"], proposed_cfg, progress=progress,
                               sim=proposed_sim)
    before, after = _per_budget(current, history.tree), _per_budget(proposed, new_tree)
    rows = [{"budget": node, "weight_current": history.tree.weight(node),
             "weight_proposed": new_tree.weight(node), "current": before[node],
             "proposed": after[node]} for node in history.tree.nodes()]
    overall = {k: {"attainment": r.summary["attainment"]["overall"],
                   "wait_p90_s": r.summary["wait_s"]["all"]["p90"],
                   "preemptions": r.summary["preemptions"]["total"],
                   "drains": r.summary["drains"]["count"]}
               for k, r in (("current", current), ("proposed", proposed))}
    result = {"period": {"start": history.start, "end": history.end, "days": _days(history),
                         "workloads": len(history.jobs),
                         "host_events": len(history.host_events),
                         "running_at_end": history.running_at_end,
                         "waiting_at_end": history.waiting_at_end,
                         "cancelled_unstarted": history.cancelled_unstarted},
              "set_weight": weights, "set": proposed_settings, "overall": overall,
              "budgets": rows}
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
    if out is not None:
        click.echo(f"wrote {out}")
