"""What-if on live history: the service's history of a period
(:mod:`apportion.service.history_trace`) replayed through the simulator under the current
and a proposed setting, per budget side by side. Used by ``apportion whatif`` and
``POST /v1/whatif`` (docs/simulator.md, "What-if on live history").

Errors are :class:`WhatifError`, naming the input ``field`` they are about (``since``,
``until``, ``set_weight``, ``set``; ``period`` when the period as a whole has nothing to
replay), so each caller can say it in its own words (a flag, a JSON field).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apportion.core import BudgetTree, CoreError, PolicyConfig, format_duration
from apportion.sim.engine import RunResult, SimConfig
from apportion.sim.model import Scenario
from apportion.times import format_time

from .config import PoolsConfig
from .history_trace import History, read_history
from .store import NotFound, Store

MAX_SINCE_S = 366 * 86400.0  # a year of history at most
MAX_UNTIL = datetime(9999, 12, 31, tzinfo=UTC).timestamp()  # the last day a time can name


class WhatifError(ValueError):
    """Bad input or nothing to replay; ``field`` names the input it is about."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def load_history(store: Store, since: float, end: float,
                 pools: PoolsConfig | None = None, *, now: float) -> History:
    """The period ``[end - since, end)``, on the hosts' pools as ``pools`` (the service's
    config) makes them; :class:`WhatifError` when there is nothing to replay. The store has
    no history after ``now``: an ``end`` after it is cut to ``now`` (the history's ``end``
    says so), so that work still running counts its run so far, never a run up to a time
    yet to come; a period that starts after ``now`` has nothing to replay."""
    if not since > 0:
        raise WhatifError("since", f"must be longer than 0, got {since}")
    if since > MAX_SINCE_S:  # the replay meters hour by hour: its memory grows with the period
        raise WhatifError("since", f"may be at most {format_duration(MAX_SINCE_S)}, got "
                                   f"{format_duration(since)}")
    if not (math.isfinite(end) and 0 <= end <= MAX_UNTIL):
        raise WhatifError("until", f"must be a time from 1970 to 9999 (seconds since the epoch "
                                   f"from 0 to {MAX_UNTIL:.0f}), got {end:g}")
    start = end - since
    if start >= now:
        raise WhatifError("period", f"the {format_duration(since)} from "
                                    f"{format_time(start, UTC)} to {format_time(end, UTC)} "
                                    f"are after now ({format_time(now, UTC)}): no history yet, "
                                    "nothing to replay")
    end = min(end, now)
    try:
        history = read_history(store, start, end, pools)
    except NotFound as e:
        raise WhatifError("period", f"the store has no history to replay: {e}") from None
    if not history.hosts:
        raise WhatifError("period", "the store has no hosts: nothing to replay on")
    if not history.jobs:
        raise WhatifError("period", f"no workload was submitted in the "
                                    f"{format_duration(end - start)} from "
                                    f"{format_time(start, UTC)} to "
                                    f"{format_time(end, UTC)}: nothing to replay")
    return history


def check_paths(paths: Iterable[str], nodes: Sequence[str]) -> None:
    """Refuse the first of ``paths`` that is none of the budget ``nodes``, naming the
    closest one (``set_weight: no budget 'ai/visoin'; did you mean 'ai/vision'?``)."""
    for path in paths:
        if path not in nodes:
            near = difflib.get_close_matches(path, nodes, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise WhatifError("set_weight", f"no budget {path!r}{hint}")


def check_weights(weights: Mapping[str, float], tree: BudgetTree) -> dict[str, float]:
    """``weights`` if every path is a node of ``tree`` and the tree with them is one the
    service would accept (each weight in range, every share above the floor: the same
    rules as a weight change, ``BudgetTree.build``'s)."""
    check_paths(weights, tree.nodes())
    for path, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise WhatifError("set_weight", f"{path}: weight must be a number, got {weight!r}")
    try:
        proposed_tree(tree, weights)
    except CoreError as e:  # out of range, or a share below the floor
        raise WhatifError("set_weight", str(e)) from None
    return {p: float(w) for p, w in weights.items()}


def proposed_tree(tree: BudgetTree, weights: Mapping[str, float]) -> BudgetTree:
    """``tree`` with ``weights`` (path -> weight) in place of its own."""
    return BudgetTree.build([(p, weights.get(p, tree.weight(p))) for p in tree.nodes()])


def proposed_configs(current: PolicyConfig, settings: Mapping[str, Any]
                     ) -> tuple[PolicyConfig, SimConfig]:
    """The current policy settings with ``settings`` (parsed values) applied, and the
    engine settings among them."""
    policy_keys = set(PolicyConfig.__dataclass_fields__)
    sim_keys = set(SimConfig.__dataclass_fields__)
    unknown = sorted(set(settings) - policy_keys - sim_keys)
    if unknown:
        raise WhatifError("set", f"unknown key {unknown[0]!r}; valid keys: "
                                 f"{', '.join(sorted(policy_keys | sim_keys))}")
    try:
        return (dataclasses.replace(current, **{k: v for k, v in settings.items()
                                                if k in policy_keys}),
                SimConfig(**{k: v for k, v in settings.items() if k in sim_keys}))
    except (CoreError, ValueError, TypeError) as e:
        raise WhatifError("set", str(e)) from None


def pool_names(history: History) -> list[str]:
    """The pools the history is replayed in (``cluster/kind``); none when it is replayed as
    one plain cluster."""
    if history.pools is None:
        return []
    return sorted({"/".join(p) for p in history.pools.of_host.values()})


def days(history: History) -> float:
    """The replay's span in days: from the first submission to the end of the period, rounded
    up to 4 decimals (at most 9 s more), so that the export's replay command reads as typed
    (--days 3.0837) and replays the span whatif replays, exactly."""
    return math.ceil((history.end - history.origin) / 86400.0 * 1e4) / 1e4


def period(history: History) -> dict[str, Any]:
    """What the replayed period held (whatif's ``period``; the first line of export-trace
    and whatif)."""
    return {"start": history.start, "end": history.end, "days": days(history),
            "first_submission": history.origin,
            "workloads": len(history.jobs), "host_events": len(history.host_events),
            "running_at_end": history.running_at_end, "waiting_at_end": history.waiting_at_end,
            "cancelled_unstarted": history.cancelled_unstarted,
            "in_former_leaves": dict(sorted(history.in_former_leaves.items())),
            "hosts": len(history.hosts),
            "pools": pool_names(history)}


def write_export(history: History, out: Path) -> dict[str, Path]:
    """The trace (canonical format, CSV or Parquet by ``out``'s suffix) and, beside it, the
    budget tree, the hosts and the host events, which the trace format does not carry.

    With pools the hosts file is a fleet's ``--cluster FILE`` (docs/simulator.md, "Fleets"):
    ``billing``, ``overrides`` and the hosts with their ``cluster`` and ``kind``; the trace
    then has the ``gpu_kinds`` and ``cluster`` columns of the work that asked for them.
    Without, both are written as before pools."""
    from apportion.sim.traces import write_canonical

    out.parent.mkdir(parents=True, exist_ok=True)
    write_canonical(history.jobs, out)
    stem = out.with_suffix("") if out.suffix != ".gz" else out.with_suffix("").with_suffix("")
    tree = Path(f"{stem}.tree.json")
    tree.write_text(json.dumps({p: history.tree.weight(p) for p in history.tree.nodes()},
                               indent=2) + "\n")
    hosts = Path(f"{stem}.hosts.json")
    listed: list[dict[str, Any]] = [{"name": h.name, "gpus": h.gpus} for h in history.hosts]
    if history.pools is None:
        hosts.write_text(json.dumps(listed, indent=2) + "\n")
    else:
        pools = history.pools
        for h in listed:
            h["cluster"], h["kind"] = pools.of_host[h["name"]]
        hosts.write_text(json.dumps({
            "billing": dict(pools.config.billing),
            "overrides": {p: dict(ws) for p, ws in pools.config.overrides.items()},
            "hosts": listed}, indent=2) + "\n")
    files = {"trace": out, "tree": tree, "hosts": hosts}
    if history.host_events:
        events = Path(f"{stem}.host-events.csv")
        events.write_text("time,host,event\n" + "".join(
            f"{e.time!r},{e.host},{e.kind.value}\n" for e in history.host_events))
        files["host_events"] = events
    return files


def scenario_of(history: History, max_min_runtime: float) -> Scenario:
    """The replay's scenario, read back from the export as ``apportion simulate --trace``
    reads it (so the two give the same figures), with the host events added."""
    from apportion.sim.traces import load_trace

    with tempfile.TemporaryDirectory(prefix="apportion-whatif-") as tmp:
        files = write_export(history, Path(tmp) / "history.csv")
        loaded = load_trace(files["trace"], "canonical", tree=history.tree, rebase=True,
                            max_min_runtime=max_min_runtime)
    return Scenario(name="history", tree=loaded.tree, hosts=history.hosts, jobs=loaded.jobs,
                    host_events=tuple(history.host_events), days=days(history),
                    meta={"source": "live history"}, pools=history.pools,
                    min_runtime_lowered=loaded.min_runtime_lowered)


def per_budget(result: RunResult, tree: BudgetTree) -> dict[str, dict[str, Any]]:
    """Attainment, delivered GPU-hours (allocated work), waits (p50, p90) and preemptions
    of every budget node of one run."""
    from apportion.sim.metrics import BUDGET_HOUR_COLUMNS

    s = result.summary
    preempted: dict[str, int] = {}
    for row in result.workloads:
        path = str(row["budget"])
        n = int(row["preemptions"] or 0)  # type: ignore[call-overload]
        while path:
            preempted[path] = preempted.get(path, 0) + n
            path = path.rpartition("/")[0]
    delivered: dict[str, float] = {}
    budget_col = BUDGET_HOUR_COLUMNS.index("budget")
    delivered_col = BUDGET_HOUR_COLUMNS.index("delivered")
    for hour in result.budget_hours:
        node = str(hour[budget_col])
        delivered[node] = delivered.get(node, 0.0) + float(hour[delivered_col])  # type: ignore[arg-type]
    waits = s["wait_s"]["per_budget"]
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


def per_pool(current: RunResult, proposed: RunResult, nodes: list[str]
             ) -> list[dict[str, Any]] | None:
    """Per pool, both runs side by side, as the runs' ``summary["pools"]`` give them
    (:class:`apportion.sim.fleet.PoolMeter`): the pool's occupancy, delivered GPU-hours,
    attainment, wait p50 and preemptions, and per budget node with work there (in ``nodes``
    order) its attainment (teams only), delivered GPU-hours, wait p50 and preemptions there.
    None with one pool: the overall rows say it all."""
    runs = {"current": current.summary.get("pools") or {},
            "proposed": proposed.summary.get("pools") or {}}
    names = [p for p in runs["current"] if p != "fleet"]
    if len(names) < 2:
        return None

    def pool_side(f: dict[str, Any]) -> dict[str, Any]:
        return {"occupancy": f["occupancy"], "delivered_gpu_hours": f["allocated_gpu_hours"],
                "attainment": f["attainment"]["overall"], "wait_p50_s": f["wait_s"]["p50"],
                "preemptions": f["preemptions"]}

    def budget_side(f: dict[str, Any], node: str) -> dict[str, Any]:
        b = f["budgets"].get(node) or {}
        return {"attainment": f["attainment"]["teams"].get(node),
                "delivered_gpu_hours": b.get("delivered_gpu_hours", 0.0),
                "wait_p50_s": (b.get("wait_s") or {}).get("p50"),
                "preemptions": b.get("preemptions", 0)}

    out = []
    for name in names:
        c, p = runs["current"][name], runs["proposed"][name]
        seen = {n for f in (c, p) for n in (*f["budgets"], *f["attainment"]["teams"])}
        out.append({
            "pool": name, "cluster": c["cluster"], "kind": c["kind"], "gpus": c["gpus"],
            "current": pool_side(c), "proposed": pool_side(p),
            "budgets": [{"budget": n, "current": budget_side(c, n),
                         "proposed": budget_side(p, n)} for n in nodes if n in seen]})
    return out


@dataclass
class Outcome:
    """The two runs and their comparison (``result``, plain JSON-able data)."""

    result: dict[str, Any]
    current: RunResult
    proposed: RunResult


def compare(history: History, current_cfg: PolicyConfig, weights: Mapping[str, float],
            settings: Mapping[str, Any], progress: bool = False) -> Outcome:
    """Replay ``history`` with ``current_cfg`` and the tree as it is, then with ``settings``
    and ``weights`` applied; per budget node and overall, side by side, and per pool when
    the history has several (:func:`per_pool`)."""
    from apportion.sim.run import run_policies

    weights = check_weights(weights, history.tree)
    proposed_cfg, proposed_sim = proposed_configs(current_cfg, settings)
    scenario = scenario_of(history, float(current_cfg.max_min_runtime))
    new_tree = proposed_tree(history.tree, weights)
    (current,) = run_policies(scenario, ["fairshare"], current_cfg, progress=progress)
    (proposed,) = run_policies(dataclasses.replace(scenario, tree=new_tree), ["fairshare"],
                               proposed_cfg, progress=progress, sim=proposed_sim)
    before, after = per_budget(current, history.tree), per_budget(proposed, new_tree)
    rows = [{"budget": node, "weight_current": history.tree.weight(node),
             "weight_proposed": new_tree.weight(node), "current": before[node],
             "proposed": after[node]} for node in history.tree.nodes()]
    overall = {k: {"attainment": r.summary["attainment"]["overall"],  # per researcher
                   "attainment_teams": r.summary["attainment"]["overall_teams"],
                   "wait_p90_s": r.summary["wait_s"]["all"]["p90"],
                   "preemptions": r.summary["preemptions"]["total"],
                   "drains": r.summary["drains"]["count"]}
               for k, r in (("current", current), ("proposed", proposed))}
    result = {"period": period(history), "set_weight": dict(weights), "set": dict(settings),
              "overall": overall, "budgets": rows}
    pools = per_pool(current, proposed, history.tree.nodes())
    if pools is not None:  # several pools: where the change moves the work (else left out)
        result["pools"] = pools
    return Outcome(result, current, proposed)
