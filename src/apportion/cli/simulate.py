"""``apportion simulate`` and ``apportion sweep``: replay a scenario or a trace against the
policies and write comparable tables (docs/simulator.md)."""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import itertools
import json
import math
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC
from pathlib import Path
from typing import Any

import click

from apportion.core import (
    NUMBER_KNOBS,
    BudgetTree,
    CoreError,
    Host,
    PolicyConfig,
    format_duration,
    parse_duration,
    parse_number,
    plural,
)
from apportion.core.config import policy_from
from apportion.sim.engine import SIM_NUMBER_KNOBS, SimConfig
from apportion.sim.model import HostEvent, HostEventKind, Pools, Scenario, SimJob
from apportion.text import as_written, at_key_line
from apportion.times import format_time

from .numbers import MAX_BUDGETS, MAX_DAYS, MAX_POINTS, days_option
from .paths import OUTPUT_DIR, output_dir

POLICY_CHOICES = ("fairshare", "legacy")
NUMBER: Any = object()  # the "type" of a float setting that is a plain number, not a duration


# ---- option parsing ------------------------------------------------------------------------
def _convert(kind: Any, text: str) -> Any:
    """``text`` as a value of the dataclass field type ``kind`` (durations accept 7d/8h;
    ``NUMBER`` marks a float setting that is a plain number)."""
    if kind is NUMBER:
        return parse_number(text)
    args = typing.get_args(kind) if isinstance(kind, types.UnionType) else ()
    if args:  # float | None
        if text.lower() in ("none", ""):
            return None
        kind = next(a for a in args if a is not type(None))
    if kind is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {text!r}")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"not a whole number: {text!r}") from None
    return parse_duration(text)


def _fields() -> dict[str, tuple[str, Any]]:
    """Every settable key -> (which config, its type, or ``NUMBER`` for a plain number)."""
    out: dict[str, tuple[str, Any]] = {}
    for owner, cls in (("policy", PolicyConfig), ("sim", SimConfig)):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            numbers = f.name in NUMBER_KNOBS or f.name in SIM_NUMBER_KNOBS
            # a compiled build keeps only plain types (``float | None`` reads as ``type``):
            # an optional duration is known by its None default
            kind = float | None if f.default is None else hints[f.name]
            out[f.name] = (owner, NUMBER if numbers else kind)
    return out


def parse_settings(items: Sequence[str], option: str = "--set") -> dict[str, Any]:
    """``["lookback=3d", ...]`` -> ``{"lookback": 259200.0}``; errors name the option and key."""
    fields = _fields()
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        if key not in fields:
            raise click.BadParameter(
                f"unknown key {key!r}; valid keys: {', '.join(sorted(fields))}", param_hint=option
            )
        if key in out:
            raise click.BadParameter(f"{key} is given twice", param_hint=option)
        try:
            out[key] = _convert(fields[key][1], text.strip())
        except ValueError as e:
            raise click.BadParameter(f"{key}: {e}", param_hint=option) from None
    return out


def build_configs(settings: dict[str, Any]) -> tuple[PolicyConfig, SimConfig]:
    fields = _fields()
    policy = {k: v for k, v in settings.items() if fields[k][0] == "policy"}
    sim = {k: v for k, v in settings.items() if fields[k][0] == "sim"}
    try:
        return policy_from(policy), SimConfig(**sim)
    except (CoreError, ValueError) as e:  # times as durations, as --set takes them
        raise click.BadParameter(_in_durations(e), param_hint="--set") from None


TOML_AT_END = "(at end of document)"


def _read_table(path: Path, option: str) -> Any:
    """The TOML (by its name) or JSON file ``path`` as data; an unreadable file, one that is
    not UTF-8 or not valid is refused naming the option, the file and where. A leading
    byte-order mark (as some Windows editors write) is skipped, as in trace files."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise click.BadParameter(f"{path}: cannot read: {e.strerror or e}",
                                 param_hint=option) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        before = raw[: e.start].removeprefix(codecs.BOM_UTF8)
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1:].decode("utf-8")) + 1
        raise click.BadParameter(f"{path}:{line}: not UTF-8 text: byte 0x{raw[e.start]:02x} at "
                                 f"column {column} (save the file as UTF-8)",
                                 param_hint=option) from None
    try:
        if path.suffix.lower() == ".toml":
            return tomllib.loads(text)
        return json.loads(text)
    except json.JSONDecodeError as e:
        # say what was expected: a tree.yaml or a hosts.tml is read as JSON, by its name
        named = "" if path.suffix.lower() == ".json" else (
            " (read as JSON: only a name ending in .toml is read as TOML)")
        raise click.BadParameter(f"{path}:{e.lineno}: not valid JSON{named}: {e.msg} at "
                                 f"column {e.colno}", param_hint=option) from None
    except tomllib.TOMLDecodeError as e:
        problem = str(e)
        if problem.endswith(TOML_AT_END):  # tomllib gives the line of any other place
            line, column = text.count("\n") + 1, len(text) - text.rfind("\n")
            problem = (f"{problem.removesuffix(TOML_AT_END)}(at line {line}, column {column}: "
                       "the end of the file)")
        raise click.BadParameter(f"{path}: {problem}", param_hint=option) from None


def _trace_name(trace: Path) -> str:
    """The scenario's name for a trace: its file name without the kind's suffix, a ``.gz``
    looked past (``cluster04`` of ``cluster04.csv.gz``, not ``cluster04.csv``)."""
    name = trace.name
    if name.lower().endswith(".gz"):
        name = name[:-3]
    return Path(name).stem or trace.name


def load_tree(path: Path) -> BudgetTree:
    """A TOML or JSON table ``budget path -> weight`` (nested tables are flattened)."""
    data = _read_table(path, "--tree")
    if isinstance(data, dict) and isinstance(data.get("budgets"), dict):
        data = data["budgets"]
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path}: expected a table of budget path -> weight",
                                 param_hint="--tree")
    weights: dict[str, float] = {}

    def weight(where: str, value: Any) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise click.BadParameter(f"{path}: {where}: weight must be a number, got "
                                 f"{as_written(value)}", param_hint="--tree")

    def walk(prefix: str, table: dict[str, Any]) -> None:
        for key, value in table.items():
            path_ = f"{prefix}/{key}" if prefix else str(key)
            if isinstance(value, dict):
                if "weight" in value:  # a node's own weight beside its children
                    weights[path_] = weight(path_, value["weight"])
                walk(path_, {k: v for k, v in value.items() if k != "weight"})
            else:
                weights[path_] = weight(path_, value)

    walk("", data)
    try:
        return BudgetTree.build(list(weights.items()))
    except CoreError as e:
        raise click.BadParameter(f"{path}: {e}", param_hint="--tree") from None


# bounds of --cluster HOSTSxGPUS that no real fleet reaches (the largest have some 10,000
# hosts of 4 or 8 GPUs; an NVL72 rack is 72 GPUs)
MAX_HOSTS = 100_000
MAX_HOST_GPUS = 1_024
CLUSTER_FILE_KEYS = ("hosts", "billing", "overrides")
HOST_KEYS = ("name", "gpus", "cluster", "kind")


def _known_keys(table: dict[str, Any], known: tuple[str, ...], prefix: str, what: str) -> None:
    """Refuse, naming it after ``prefix``, a key of a ``--cluster`` file's ``table`` not in
    ``known``."""
    for key in table:
        if key not in known:
            raise click.BadParameter(f"{prefix}{key}: not a key of {what} (its keys: "
                                     f"{', '.join(known)})", param_hint="--cluster")


def parse_cluster(text: str) -> tuple[Host, ...]:
    """``128x8`` (hosts x GPUs) or a TOML/JSON file listing hosts."""
    if "x" in text and not Path(text).exists():
        n, _, g = text.lower().partition("x")
        try:
            hosts, gpus = int(n), int(g)
        except ValueError:
            if Path(text).suffix.lower() in (".toml", ".json"):  # a file name: nonexist.toml
                raise click.BadParameter(f"no such file, and not HOSTSxGPUS: {text!r}",
                                         param_hint="--cluster") from None
            raise click.BadParameter(f"expected HOSTSxGPUS like 128x8 or a file, got {text!r}",
                                     param_hint="--cluster") from None
        if hosts <= 0 or gpus <= 0:
            raise click.BadParameter("hosts and GPUs must be > 0", param_hint="--cluster")
        # a typo with extra zeros would cost minutes and gigabytes before the run showed it
        bounds = ((hosts, MAX_HOSTS, "hosts"), (gpus, MAX_HOST_GPUS, "GPUs per host"))
        for count, most, what in bounds:
            if count > most:
                raise click.BadParameter(f"{text}: {count:,} {what} is more than any fleet has "
                                         f"(at most {most:,})", param_hint="--cluster")
        return tuple(Host(f"h{i:03d}", gpus) for i in range(hosts))
    path = Path(text)
    if not path.exists():
        raise click.BadParameter(f"no such file, and not HOSTSxGPUS: {text!r}",
                                 param_hint="--cluster")
    data = _read_table(path, "--cluster")
    if isinstance(data, dict):  # a mistyped key (biling) would be a setting silently dropped
        _known_keys(data, CLUSTER_FILE_KEYS, f"{path}: ", "a host list")
        data = data.get("hosts")
    if not isinstance(data, list) or not data:
        raise click.BadParameter(f"{path}: expected a list of hosts (name, gpus)",
                                 param_hint="--cluster")
    if len(data) > MAX_HOSTS:
        raise click.BadParameter(f"{path}: {len(data):,} hosts is more than any fleet has (at "
                                 f"most {MAX_HOSTS:,})", param_hint="--cluster")
    out = []
    for i, item in enumerate(data):
        where = f"{path}: hosts[{i + 1}]"
        if not isinstance(item, dict):
            raise click.BadParameter(f"{where}: expected a table with name and gpus, got "
                                     f"{as_written(item)}", param_hint="--cluster")
        _known_keys(item, HOST_KEYS, f"{where}.", "a host")
        for key in ("name", "gpus"):
            if key not in item:
                raise click.BadParameter(f"{where}.{key}: missing", param_hint="--cluster")
        name, gpus = item["name"], item["gpus"]
        if not isinstance(name, str) or not name.strip():
            raise click.BadParameter(f"{where}.name: must be a non-empty string, got "
                                     f"{as_written(name)}", param_hint="--cluster")
        # read as typed: 8.7 is not 8 GPUs, nor true 1
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise click.BadParameter(f"{where}.gpus: must be a whole number >= 1, got "
                                     f"{as_written(gpus)}", param_hint="--cluster")
        if gpus > MAX_HOST_GPUS:  # the bound of HOSTSxGPUS: a typo, not a host
            raise click.BadParameter(f"{where}.gpus: {gpus:,} GPUs is more than any host has "
                                     f"(at most {MAX_HOST_GPUS:,})", param_hint="--cluster")
        try:
            out.append(Host(name, gpus))
        except CoreError as e:
            raise click.BadParameter(f"{where}: {e}", param_hint="--cluster") from None
    first: dict[str, int] = {}
    for i, host in enumerate(out):
        if first.setdefault(host.name, i) != i:
            raise click.BadParameter(f"{path}: hosts[{i + 1}].name: {host.name!r} is the name "
                                     f"of hosts[{first[host.name] + 1}] too",
                                     param_hint="--cluster")
    return tuple(out)


def parse_pools(text: str) -> Pools | None:
    """The pools of a ``--cluster`` host list whose hosts carry ``cluster`` and ``kind``
    (with optional top-level tables ``billing``, kind -> units per GPU-second, and
    ``overrides``, pool -> {budget: weight}); ``None`` for ``HOSTSxGPUS`` or a list without
    kinds (one pool)."""
    path = Path(text)
    if not path.exists():
        return None
    data = _read_table(path, "--cluster")
    hosts = data.get("hosts") if isinstance(data, dict) else data
    from apportion.core.fleet import FleetConfig
    from apportion.sim.fleet import read_pools

    try:
        of_host = read_pools(list(hosts or ()), str(path))
        if of_host is None:
            if isinstance(data, dict) and ("billing" in data or "overrides" in data):
                raise ValueError(f"{path}: billing and overrides need hosts with a cluster "
                                 "and kind")
            return None
        extra = data if isinstance(data, dict) else {}
        billing, overrides = extra.get("billing", {}), extra.get("overrides", {})
        if not isinstance(billing, dict) or not isinstance(overrides, dict) or not all(
                isinstance(v, dict) for v in overrides.values()):
            raise ValueError(f"{path}: billing: a table kind -> weight; overrides: a table "
                             "pool -> {budget: weight}")
        # read as typed: true is not weight 1 (the core takes a bool for the number it is)
        typed = [(f"billing: {k}", w, "> 0") for k, w in billing.items()] + [
            (f"overrides: {pool}: {b}", w, ">= 0")
            for pool, weights in overrides.items() for b, w in weights.items()]
        for where, w, bound in typed:
            if isinstance(w, bool):
                raise ValueError(f"{path}: {where}: must be a number {bound}, got {as_written(w)}")
        kinds = sorted({k for _, k in of_host.values()})
        for kind in billing:  # a mistyped kind (or its case) would bill that kind 1
            if kind not in kinds:
                raise ValueError(f"{path}: billing.{kind}: no host has GPU kind {kind} (the "
                                 f"hosts' kinds: {', '.join(kinds)})")
        there = sorted({f"{c}/{k}" for c, k in of_host.values()})
        for pool in overrides:  # a mistyped pool would silently fund nothing
            if pool not in there:
                raise ValueError(f"{path}: overrides.{pool}: no host is in pool {pool} (the "
                                 f"hosts' pools: {', '.join(there)})")
        return Pools(of_host, FleetConfig(billing=billing, overrides=overrides))
    except (ValueError, CoreError) as e:
        raise click.BadParameter(_of_file(path, e), param_hint="--cluster") from None


def _of_file(path: Path | str, error: Exception) -> str:
    """A fleet's error said of the ``--cluster`` file it came from: the core names no file
    (``fleet: billing: H100: ...``), the user wrote ``fleet.toml``."""
    return f"{path}: {str(error).removeprefix('fleet: ').removeprefix(f'{path}: ')}"


def _trace_hosts(trace: Path, derived: tuple[Host, ...], fmt: str,
                 size: int | None) -> tuple[Host, ...]:
    """The cluster of a trace given without --cluster: ``--size`` GPUs in hosts of 8 when
    asked for, else the hosts the trace names (sacct's NodeList), else a usage error: a
    guessed cluster would make every figure of the run meaningless."""
    if size is not None:  # a multiple of 8 (checked as the flag is read)
        return tuple(Host(f"h{i:03d}", 8) for i in range(size // 8))
    if derived:
        sizes = sorted({h.gpus for h in derived})
        each = (plural(sizes[0], "GPU") + " each" if len(sizes) == 1
                else f"{sizes[0]} to {plural(sizes[-1], 'GPU')} each")
        click.echo(f"{trace}: cluster from the trace's NodeList: "
                   f"{plural(len(derived), 'host')}, {each}, "
                   f"{plural(sum(h.gpus for h in derived), 'GPU')} (the most seen in use at "
                   "once on each host; pass --cluster to give the real one)", err=True)
        return derived
    why = ("it has no NodeList column; add NodeList to sacct's --format" if fmt == "sacct"
           else "the trace does not name its hosts")
    raise click.UsageError(
        f"{trace}: cannot tell which cluster it ran on ({why}); pass --cluster HOSTSxGPUS "
        "(e.g. --cluster 128x8), --cluster FILE (a host list) or --size GPUS (hosts of 8 "
        "GPUs)")


@contextlib.contextmanager
def _lines_of(path: Path | None, keys: Callable[[str], Iterable[str]]) -> Iterator[None]:
    """A refusal of the TOML file ``path`` (``path: key: problem``) names the line of its
    key, or of its table (``path:line: key: problem``), as the trace readers name lines;
    ``keys``: where :func:`~apportion.text.key_line` finds the key the message names."""
    try:
        yield
    except click.BadParameter as e:
        if path is None or path.suffix.lower() != ".toml":
            raise
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except (OSError, UnicodeDecodeError):
            text = ""  # refused as unreadable already: the message says so
        located = at_key_line(e.message, str(path), text, keys)
        if located == e.message:
            raise
        raise click.BadParameter(located, param_hint=e.param_hint) from None


def _tree_keys(message: str) -> list[str]:
    """Where a ``--tree`` file writes the budget a message names (``ai/vision: ...``) or
    its weight: as nested tables (``[ai]`` ``vision = 2``), or a quoted key
    (``"ai/vision" = 2``), at the top or under ``[budgets]``."""
    key = message.split(": ", 1)[0]
    return [f"{top}{node}.weight" for top in ("", "budgets.")
            for node in (key.replace("/", "."), key)]


def _host_keys(message: str) -> list[str]:
    """Where a ``--cluster`` file writes the key a message names: its hosts are counted
    from 1 there (``hosts[2].gpus``, ``host #2 (h2)``), from 0 in ``[[hosts]]``; a weight
    of ``billing`` or ``overrides`` is named in parts (``overrides: west/B200: llm: ...``)."""
    parts = message.split(": ")
    if parts[0] in ("billing", "overrides"):
        return [".".join(p.strip("'") for p in parts[:n]) for n in (3, 2, 1)]
    m = re.fullmatch(r"(?:hosts\[(\d+)\]|host #(\d+) \(.*\))(.*)", parts[0])
    if m is None:
        return [parts[0]]
    host = f"hosts[{int(m.group(1) or m.group(2)) - 1}]{m.group(3)}"
    # ``host #1 (a): kind: ...``: the key of the host the message goes on to name, if any
    field = [f"{host}.{parts[1]}"] if len(parts) > 2 and re.fullmatch(r"\w+", parts[1]) else []
    return [*field, host]


def build_scenario(
    scenario: str, trace: Path | None, fmt: str, maps: Sequence[str], budgets: int | None,
    budget_column: str | None, tree_file: Path | None, cluster: str | None, days: float | None,
    seed: int, size: int | None, max_min_runtime: float, warn: bool = True,
) -> Scenario:
    """The scenario the options describe: built-in or a trace, then tree and cluster. The
    trace's warnings (rows skipped or changed on the way in) go to stderr, unless ``warn``
    is false (a sweep's further seeds load the same rows again)."""
    with _lines_of(tree_file, _tree_keys):
        tree = load_tree(tree_file) if tree_file else None
    with _lines_of(Path(cluster) if cluster else None, _host_keys):
        hosts = parse_cluster(cluster) if cluster else None
        pools = parse_pools(cluster) if cluster else None
    if trace is not None:
        from apportion.sim.traces import NoBudgetColumn, TraceError, load_trace, parse_mapping

        if budgets is not None and budget_column is not None:
            raise click.UsageError("--budgets and --budget-column exclude each other")
        if size is not None and cluster is not None:  # --size is only a trace's cluster
            raise click.UsageError("--size and --cluster exclude each other with --trace (both "
                                   "give the trace's cluster)")
        if maps and fmt == "sacct":
            raise click.UsageError("--map is not used with --format sacct (its columns are fixed)")
        try:
            mapping = parse_mapping(maps)
        except TraceError as e:
            raise click.BadParameter(str(e).removeprefix("--map: "), param_hint="--map") from None
        if budget_column is not None and not budget_column.strip():
            raise click.BadParameter("must name a column", param_hint="--budget-column")
        try:
            loaded = load_trace(
                trace, fmt, mapping=mapping or None, budgets=budgets,
                budget_column=budget_column, tree=tree, seed=seed, rebase=True,
                max_min_runtime=max_min_runtime,
            )
        except NoBudgetColumn as e:
            raise click.UsageError(
                f"{e.source}: "
                + (f"{e.empty}: the budget column is empty on every row" if e.empty
                   else "the trace has no budget column")
                + "; pass --budgets N (N synthetic "
                "budgets) or --budget-column NAME (one budget per value of that column)"
            ) from None
        except TraceError as e:
            if str(e).startswith("mapping: "):  # an argument error: say it of the flag
                raise click.BadParameter(str(e).removeprefix("mapping: "),
                                         param_hint="--map") from None
            raise click.ClickException(str(e)) from None
        leaves = len(loaded.tree.leaves)
        if budget_column is not None and leaves > MAX_BUDGETS:  # as --budgets' bound
            raise click.BadParameter(
                f"{budget_column}: {leaves:,} distinct values, so {leaves:,} budgets (at most "
                f"{MAX_BUDGETS:,}, as --budgets): a column of ids rather than of teams?",
                param_hint="--budget-column")
        if warn:
            for line in loaded.warnings:
                click.echo(f"warning: {line}", err=True)
        if not loaded.jobs:
            raise click.ClickException(f"{trace}: no usable jobs in the trace")
        latest = max(loaded.jobs, key=lambda j: j.spec.submit_time)
        last = latest.spec.submit_time
        # by default every whole day up to the one of the last submission, included: the
        # replay takes what is submitted before its end, so one at exactly 2 d needs a third
        span = days if days is not None else last // 86400.0 + 1.0
        if span > MAX_DAYS:  # the run would keep a row per hour of it: refused, not tried
            raise click.ClickException(
                f"{trace}: workload {latest.spec.id!r} is submitted {last / 86400.0:,.0f} days "
                f"after the first; the simulator replays at most {MAX_DAYS:,} days (a time in "
                "milliseconds, or a mistyped year?). Give --days to replay the first days only")
        if hosts is None:
            hosts = _trace_hosts(trace, loaded.hosts, fmt, size)
        jobs = loaded.jobs if pools is None else _kinds_as_in_fleet(loaded.jobs, pools)
        return _fleet_checked(cluster, Scenario(
            name=_trace_name(trace), tree=loaded.tree, hosts=hosts, jobs=jobs, days=span,
            meta={"source": str(trace), "format": fmt}, pools=pools,
            min_runtime_lowered=loaded.min_runtime_lowered,
            time_origin=loaded.time_origin if loaded.wall_clock else None))
    if maps or budgets is not None or budget_column is not None:
        raise click.UsageError("--map, --budgets and --budget-column need --trace")
    from apportion.sim.scenarios import get_scenario

    if size is not None and scenario in ("small", "fleet"):
        raise click.BadParameter(f"scenario {scenario!r} has its own cluster; --size sizes "
                                 "the seed scenario and traces", param_hint="--size")
    try:
        sc = get_scenario(scenario, days=days, seed=seed, size=size)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--scenario") from None
    if tree is not None:
        used = sorted({j.spec.budget for j in sc.jobs})
        for budget in used:
            if not tree.is_leaf(budget):
                raise click.BadParameter(
                    f"budget {budget!r} of the scenario's workloads is not a leaf of the tree",
                    param_hint="--tree")
        sc = dataclasses.replace(sc, tree=tree)
    if hosts is not None:
        names = {h.name for h in hosts}
        kept = tuple(e for e in sc.host_events if e.host in names)
        dropped = len(sc.host_events) - len(kept)
        if warn:
            _warn_replaced_cluster(sc, hosts, dropped)
        # the report's Scenario table counts the hosts and host events that are replayed
        counted = {k: v for k, v in (("hosts", len(hosts)),
                                     ("host_failures", _count(kept, HostEventKind.FAIL)),
                                     ("host_drains", _count(kept, HostEventKind.UNHEALTHY)))
                   if k in sc.meta}
        sc = dataclasses.replace(sc, hosts=hosts, host_events=kept, pools=pools,
                                 dropped_host_events=dropped, meta={**sc.meta, **counted})
    return _fleet_checked(cluster, sc)


def _kinds_as_in_fleet(jobs: tuple[SimJob, ...], pools: Pools) -> tuple[SimJob, ...]:
    """``jobs``, each GPU kind a workload asks for spelt as the ``--cluster`` file spells it
    when the two differ only in case: the sacct importer upper-cases kinds (``A100``) and
    Slurm's gres.conf often names them in lower case (``a100``), the name a fleet file then
    copies. A kind the fleet spells two ways (``a100`` and ``A100``) is left as written."""
    spellings: dict[str, set[str]] = {}
    for _, kind in pools.of_host.values():
        spellings.setdefault(kind.lower(), set()).add(kind)
    fleet = {low: next(iter(s)) for low, s in spellings.items() if len(s) == 1}
    out = []
    for job in jobs:
        asked = job.spec.gpu_kinds
        kinds = tuple(dict.fromkeys(fleet.get(k.lower(), k) for k in asked))
        if kinds != asked:
            job = dataclasses.replace(job, spec=dataclasses.replace(job.spec, gpu_kinds=kinds))
        out.append(job)
    return tuple(out)


def warn_rejected(summaries: Sequence[dict[str, Any]], most: int = 10) -> None:
    """Say on stderr why workloads were rejected (refused at submission, so never run): one
    line per reason the policy core gave, with a count and the first workload refused for
    it, at most ``most`` reasons (all are in summary.json's ``rejected_reasons``). The
    reasons do not depend on the policy: each is said once."""
    reasons: dict[str, dict[str, Any]] = {}
    for s in summaries:
        for r in s.get("rejected_reasons", ()):
            reasons.setdefault(r["reason"], r)
    for r in list(reasons.values())[:most]:
        click.echo(f"warning: {plural(r['count'], 'workload')} rejected: {r['reason']} "
                   f"(first: workload {r['first']})", err=True)
    if len(reasons) > most:
        click.echo(f"warning: {plural(len(reasons) - most, 'more reason')} for rejected "
                   "workloads in summary.json (rejected_reasons)", err=True)


def _count(events: tuple[HostEvent, ...], kind: HostEventKind) -> int:
    return sum(e.kind is kind for e in events)


def _warn_replaced_cluster(sc: Scenario, hosts: tuple[Host, ...], dropped: int) -> None:
    """Say on stderr what a built-in scenario loses when ``--cluster`` replaces its hosts:
    the seed scenario's workload stays sized for its own GPUs (--size scales it), and the
    host events of hosts not in the new cluster are dropped."""
    sized, gpus = sum(h.gpus for h in sc.hosts), sum(h.gpus for h in hosts)
    if sc.name == "seed" and gpus != sized:
        fits = max(8, round(gpus / 8) * 8)  # --size takes hosts of 8
        click.echo(f"warning: --cluster: the seed scenario's workload is sized for "
                   f"{sized:,} GPUs; with {gpus:,} GPUs here give --size {fits} to scale it",
                   err=True)
    if dropped:
        click.echo(f"warning: --cluster: {plural(dropped, 'host event')} of hosts not in "
                   "--cluster were dropped (counted in ignored_host_events)", err=True)


def _fleet_checked(cluster: str | None, sc: Scenario) -> Scenario:
    """``sc``, once its pools' overrides are known to fit its tree (the error names them and
    ``cluster``, the file that gave them)."""
    if sc.pools is not None:
        from apportion.core.fleet import FleetState, pool_tree

        with _lines_of(Path(cluster) if cluster else None, _host_keys):
            try:
                FleetState(sc.tree, sc.pools.config)
                for pool, weights in sc.pools.config.overrides.items():
                    pool_tree(sc.tree, weights, pool)
            except CoreError as e:
                said = str(e) if cluster is None else _of_file(cluster, e)  # a built-in's
                raise click.BadParameter(said, param_hint="--cluster") from None
    return sc


def hosts_of_eight(_ctx: click.Context, _param: click.Parameter, size: int | None
                    ) -> int | None:
    """``--size``: GPUs in hosts of 8, so a multiple of 8 (not rounded down in silence)."""
    if size is not None and size % 8:
        raise click.BadParameter(f"{size} is not a multiple of 8 (hosts of 8 GPUs); "
                                 f"{size // 8 * 8 or 8} or {size // 8 * 8 + 8}?")
    if size is not None and size > MAX_HOSTS * 8:  # as --cluster's bound: a typo, not a fleet
        raise click.BadParameter(f"{size:,} GPUs is more than any fleet has (at most "
                                 f"{MAX_HOSTS * 8:,}: {MAX_HOSTS:,} hosts of 8)")
    return size


def input_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options shared by ``simulate`` and ``sweep`` that say what to replay."""
    opts = [
        click.option("--scenario", default="seed", show_default=True,
                     help="built-in scenario: seed, small or fleet"),
        click.option("--trace", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="replay this trace file instead of a built-in scenario"),
        click.option("--format", "fmt", default="canonical", show_default=True,
                     type=click.Choice(["canonical", "itp", "sacct", "csv"]),
                     help="trace format"),
        click.option("--map", "maps", multiple=True, metavar="FIELD=COLUMN",
                     help="map a canonical field to a trace column (repeatable)"),
        click.option("--budgets", type=click.IntRange(min=1, max=MAX_BUDGETS),
                     help="synthesise N budgets for a trace without a budget column"),
        click.option("--budget-column", help="trace column that names the budget"),
        click.option("--tree", "tree_file",
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="TOML/JSON budget tree (path -> weight) replacing the scenario's"),
        click.option("--cluster", help="HOSTSxGPUS (e.g. 128x8) or a TOML/JSON host list "
                     "(with cluster and kind per host: several pools, see docs/simulator.md); "
                     "a trace needs it unless it names its hosts (sacct's NodeList) or --size "
                     "is given"),
        days_option,
        click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
                     help="scenario seed"),
        click.option("--size", type=click.IntRange(min=8), callback=hosts_of_eight,
                     help="GPUs of the cluster in hosts of 8: the seed scenario's, or a "
                     "trace's when --cluster is not given"),
        click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
                     help="PolicyConfig or engine setting; durations accept 7d/8h/15m/30s"),
        click.option("--quiet", is_flag=True, help="no progress bar"),
        click.option("--out", required=True, type=OUTPUT_DIR,
                     callback=output_dir, help="output directory"),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def refuse_unused_input_flags(trace: Path | None) -> None:
    """Refuse, naming it, a flag typed that the input would not use: --scenario beside
    --trace (the trace was replayed and the scenario ignored), --format without --trace."""
    ctx = click.get_current_context()

    def typed(name: str) -> bool:
        return ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE

    if trace is not None and typed("scenario"):
        raise click.UsageError("--trace and --scenario exclude each other")
    if trace is None and typed("fmt"):
        raise click.UsageError("--format needs --trace")


def _scenario_from(kw: dict[str, Any], config: PolicyConfig, warn: bool = True) -> Scenario:
    refuse_unused_input_flags(kw["trace"])
    return build_scenario(
        kw["scenario"], kw["trace"], kw["fmt"], kw["maps"], kw["budgets"], kw["budget_column"],
        kw["tree_file"], kw["cluster"], kw["days"], kw["seed"], kw["size"],
        float(config.max_min_runtime), warn,
    )


# ---- commands -------------------------------------------------------------------------------
@click.command()
@input_options
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICY_CHOICES),
              help="policy to run (repeatable; default: fairshare and legacy)")
def simulate(policies: tuple[str, ...], **kw: Any) -> None:
    """Replay a scenario or trace against fair share and the legacy scheduler, side by side.

    Writes summary.json, workloads-P.csv, budget_hours-P.csv, cluster_hours-P.csv and
    report.html to --out."""
    from apportion.sim.run import format_table, run_policies

    config, sim = build_configs(parse_settings(kw["settings"]))
    scenario = _scenario_from(kw, config)
    out: Path = kw["out"]
    results = run_policies(
        scenario, list(dict.fromkeys(policies or POLICY_CHOICES)), config, seed=kw["seed"],
        progress=not kw["quiet"], sim=sim, out=out, keep_tables=False,
    )
    end = scenario.days * 86400.0
    replayed = sum(1 for j in scenario.jobs if j.spec.submit_time < end)
    of = "" if replayed == len(scenario.jobs) else f" (of {len(scenario.jobs):,} in it)"
    click.echo(f"scenario {scenario.name}: {plural(replayed, 'workload')} submitted in the "
               f"{format_duration(end)} replayed{of}, "
               f"{plural(len(scenario.hosts), 'host')}"
               + ("" if scenario.time_origin is None else
                  f"; hour 0 is {format_time(scenario.time_origin, UTC)}"))
    click.echo(format_table([r.summary for r in results]))
    if "pools" in results[0].summary:
        from apportion.sim.fleet import pools_table

        click.echo()
        click.echo(pools_table([r.summary for r in results]))
    click.echo(f"wrote {out}")
    warn_rejected([r.summary for r in results])
    ran = {r.policy for r in results}
    stale = sorted(p.name for p in out.glob("*_hours-*.csv") if p.stem.split("-", 1)[1] not in ran)
    stale += sorted(p.name for p in out.glob("workloads-*.csv") if p.stem[10:] not in ran)
    if stale:  # left by an earlier run into the same directory: not this run's
        click.echo(f"warning: {out}: {', '.join(stale)} are from an earlier run (this one ran "
                   f"{', '.join(sorted(ran))})", err=True)


@click.command()
@input_options
@click.option("--grid", "grid", multiple=True, required=True, metavar="KEY=V1,V2,...",
              help="a setting and the values to try (repeatable: every combination runs)")
@click.option("--seeds", metavar="S1,S2,...",
              help="run every combination on the scenario of each of these seeds "
                   "(default: --seed)")
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(min=1),
              help="parallel worker processes (--engine ray without --address: the CPUs "
                   "of the local Ray cluster)")
@click.option("--engine", default="process", show_default=True,
              type=click.Choice(["process", "ray"]),
              help="process: forked processes on this host; ray: one Ray task per point")
@click.option("--address", metavar="ADDR",
              help="Ray cluster to run on (default: RAY_ADDRESS, else a local cluster "
                   "started and stopped for the sweep)")
@click.option("--resume", is_flag=True,
              help="keep the points a stopped run of this same sweep finished (--out's "
                   "points.jsonl) and run only the rest")
def sweep(grid: tuple[str, ...], seeds: str | None, jobs: int, engine: str,
          address: str | None, resume: bool, **kw: Any) -> None:
    """Run fair share over every combination of the --grid values (and --seeds) and chart
    the trade-offs.

    Writes sweep.csv, sweep.json and sweep.png/svg to --out, and each point to
    --out/points.jsonl as it finishes (what --resume keeps)."""
    from apportion.sim.sweep import format_sweep, run_sweep, split_settings

    if address is not None and engine != "ray":
        raise click.UsageError("--address needs --engine ray")
    base = parse_settings(kw["settings"])
    build_configs(base)
    axes: dict[str, list[Any]] = {}
    labels: dict[str, dict[Any, str]] = {}
    for item in grid:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not text.strip():
            raise click.BadParameter(f"expected KEY=V1,V2,..., got {item!r}", param_hint="--grid")
        if key in axes:
            raise click.BadParameter(f"{key} is given twice", param_hint="--grid")
        if key in base:  # the grid's values would replace the --set one without a word
            raise click.BadParameter(f"{key} is given by --set too; give its values in --grid "
                                     "only", param_hint="--grid")
        axes[key], labels[key] = [], {}
        for typed in (v.strip() for v in text.split(",")):
            value = parse_settings([f"{key}={typed}"], option="--grid")[key]
            if value in labels[key]:
                raise click.BadParameter(f"{key}={labels[key][value]} and {key}={typed} are "
                                         "the same value", param_hint="--grid")
            try:  # every value must make a valid config
                split_settings({**base, key: value})
            except (CoreError, ValueError) as e:
                raise click.BadParameter(f"{key}={typed}: {_in_durations(e)}",
                                         param_hint="--grid") from None
            axes[key].append(value)
            labels[key][value] = typed
    seed_list = _seed_list(seeds, kw)
    _refuse_huge(axes, seed_list)
    _check_combinations(base, axes, labels)
    config, _ = build_configs(base)
    caps = [float(v) for v in axes.get("max_min_runtime", [])]
    scenarios: dict[int, Scenario | dict[float, Scenario]] = {}
    for s in seed_list:
        if kw["trace"] is None or not caps:
            scenarios[s] = _scenario_from({**kw, "seed": s}, config, warn=s == seed_list[0])
            continue
        # a trace swept over the cap: imported at each cap, as simulate with that setting
        # imports it (the import derives and lowers minimum runtimes to the cap, and the
        # summary counts what was lowered); its warnings once, those of the largest cap
        scenarios[s] = {cap: _scenario_from(
            {**kw, "seed": s}, dataclasses.replace(config, max_min_runtime=cap),
            warn=s == seed_list[0] and cap == max(caps)) for cap in caps}
    first = scenarios[seed_list[0]]
    days = (first if isinstance(first, Scenario) else next(iter(first.values()))).days
    _warn_lookback(days, kw["days"], base, axes, labels)
    if kw["trace"] is not None:
        _warn_same_seeds(scenarios, seeds)
    out: Path = kw["out"]
    try:
        rows = run_sweep(scenarios, base, axes, out, jobs=jobs, progress=not kw["quiet"],
                         engine=engine, address=address, labels=labels, resume=resume)
    except RuntimeError as e:  # the engine could not start (no Ray, no cluster at --address),
        # or --resume found no points of this sweep
        raise click.ClickException(str(e)) from None
    click.echo(format_sweep(rows, list(axes), labels))
    click.echo(f"wrote {out}")
    failed = sum(1 for r in rows if r["error"] is not None)
    if failed:
        raise click.ClickException(f"{failed} of {len(rows)} points failed (errors above)")


SECONDS = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:e[+-]?\d+)?) s\b")


def _in_durations(error: Exception) -> str:
    """A config error with its times in seconds (``7200 s``, as the policy says them) said
    as durations (``2 h``), as the grid's values are typed."""
    return SECONDS.sub(lambda m: format_duration(float(m[1])), str(error))


def _refuse_huge(axes: dict[str, list[Any]], seed_list: list[int]) -> None:
    """Refuse, before anything runs, a grid of more points than any sweep runs: a value
    list pasted too long or one --grid too many multiplies the points, and the combinations
    alone would be checked for minutes before the first point, without a word."""
    points = math.prod(len(v) for v in axes.values()) * len(seed_list)
    if points > MAX_POINTS:
        sizes = " x ".join(str(len(v)) for v in axes.values())
        raise click.BadParameter(
            f"{points:,} points ({sizes} values x {plural(len(seed_list), 'seed')}) is more "
            f"than a sweep runs (at most {MAX_POINTS:,}): give fewer values",
            param_hint="--grid")


def _check_combinations(base: dict[str, Any], axes: dict[str, list[Any]],
                        labels: dict[str, dict[Any, str]]) -> None:
    """Refuse, before anything runs, grid values that break a rule between two settings
    (checkpoint_wait over max_min_runtime) when combined: each value alone was checked.
    The refusal names the fewest values that break it, as typed (pairs are tried first)."""
    from apportion.sim.sweep import split_settings

    for size in range(2, len(axes) + 1):
        for keys in itertools.combinations(axes, size):
            for values in itertools.product(*(axes[k] for k in keys)):
                try:
                    split_settings({**base, **dict(zip(keys, values, strict=True))})
                except (CoreError, ValueError) as e:
                    typed = " with ".join(f"{k}={labels[k][v]}"
                                          for k, v in zip(keys, values, strict=True))
                    raise click.BadParameter(f"{typed}: {_in_durations(e)}",
                                             param_hint="--grid") from None


def _seed_list(seeds: str | None, kw: dict[str, Any]) -> list[int]:
    """``--seeds 0,1,2``, or the one ``--seed``; not both."""
    if seeds is None:
        return [kw["seed"]]
    source = click.get_current_context().get_parameter_source("seed")
    if source is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--seed and --seeds exclude each other")
    out: list[int] = []
    for text in seeds.split(","):
        try:
            out.append(int(text.strip()))
        except ValueError:
            raise click.BadParameter(f"not a whole number: {text.strip()!r}",
                                     param_hint="--seeds") from None
        if out[-1] < 0:  # the scenarios' random generators take none below 0
            raise click.BadParameter(f"a seed must be >= 0, got {text.strip()!r}",
                                     param_hint="--seeds")
    if len(set(out)) != len(out):
        raise click.BadParameter("a seed is given twice", param_hint="--seeds")
    return out


def _warn_same_seeds(scenarios: dict[int, Scenario | dict[float, Scenario]],
                     seeds: str | None) -> None:
    """Warn when a trace imports the same for every seed of --seeds: with a trace the seed
    only picks what the import synthesises (the budget of each job under --budgets), so a
    trace with budgets of its own gives every seed the same run, and each setting's rows (and
    the plot's "mean of N seeds") repeat one run."""
    if len(scenarios) < 2:
        return

    def key(entry: Scenario | dict[float, Scenario]) -> list[Any]:
        runs = [entry] if isinstance(entry, Scenario) else list(entry.values())
        return [(sc.jobs, sc.tree.as_dict()) for sc in runs]

    first, *rest = scenarios.values()
    if all(key(other) == key(first) for other in rest):
        click.echo(f"warning: --seeds {seeds}: the trace imports the same for every seed "
                   "(with a trace, the seed only changes budgets the import synthesises, as "
                   "with --budgets N), so each setting's rows are one run repeated; give one "
                   "seed", err=True)


def _warn_lookback(days: float, days_flag: float | None, base: dict[str, Any],
                   axes: dict[str, list[Any]], labels: dict[str, dict[Any, str]]) -> None:
    """Warn when a lookback window is not shorter than the simulated period: the whole run is
    then the window's warm-up, and rows that differ only in such lookbacks are the same."""
    from apportion.core import format_duration

    span = days * 86400.0
    values = axes.get("lookback") or [base.get("lookback", PolicyConfig().lookback)]
    long = [v for v in values if float(v) >= span]
    if not long:
        return
    typed = ", ".join(labels.get("lookback", {}).get(v) or format_duration(float(v))
                      for v in long)
    if days_flag is not None:
        period = f"--days {days_flag:g}"
    else:
        period = f"the scenario's {format_duration(span)}"
    same = (" so these rows are identical" if len(long) > 1
            else " so it never slides")
    click.echo(f"warning: lookback {typed} is not shorter than the simulated period "
               f"({period}): the window holds the whole run,{same}; simulate longer than "
               "the lookback", err=True)
