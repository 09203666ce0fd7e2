"""``apportion bench``: print the policy's speed figures: one scheduling pass on a large,
full cluster, or a whole replay (a trace or a built-in scenario) under fair share and legacy."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from .numbers import MAX_BUDGETS, days_option

POLICY_CHOICES = ("fairshare", "legacy")


def _of_eight(ctx: click.Context, param: click.Parameter, size: int | None) -> int | None:
    if size is None:
        return None
    from apportion.cli.simulate import hosts_of_eight  # imported when the flag is given

    return hosts_of_eight(ctx, param, size)


@click.command()
@click.option("--passes", default=50, show_default=True, type=click.IntRange(min=1),
              help="decide passes to time")
@click.option("--pending", default=10_000, show_default=True,
              type=click.IntRange(min=0, max=100_000), help="pending workloads (at most 100,000)")
@click.option("--pools", default=1, show_default=True, type=click.Choice(["1", "3"]),
              help="the pass over one pool, or the same hosts as three pools of GPU kinds")
@click.option("--trace", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="time a whole replay of this trace under fair share and legacy instead")
@click.option("--scenario",
              help="time a whole replay of this built-in scenario (seed, small or fleet)")
@click.option("--format", "fmt", default="canonical", show_default=True,
              type=click.Choice(["canonical", "itp", "sacct", "csv"]), help="trace format")
@click.option("--map", "maps", multiple=True, metavar="FIELD=COLUMN",
              help="map a canonical field to a trace column (repeatable)")
@click.option("--budgets", type=click.IntRange(min=1, max=MAX_BUDGETS),
              help="synthesise N budgets for a trace without a budget column")
@click.option("--budget-column", help="trace column that names the budget")
@click.option("--tree", "tree_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML/JSON budget tree (path -> weight)")
@click.option("--cluster", help="HOSTSxGPUS (e.g. 32x8) or a TOML/JSON host list")
@days_option
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
              help="scenario seed")
@click.option("--size", type=click.IntRange(min=8), callback=_of_eight,
              help="GPUs of the built-in scenario (a multiple of 8)")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="PolicyConfig setting (repeatable); with --trace or --scenario also an "
                   "engine setting")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICY_CHOICES),
              help="policy to time, in this order (repeatable; default: fairshare, legacy)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def bench(passes: int, pending: int, pools: str, trace: Path | None, scenario: str | None,
          policies: tuple[str, ...], as_json: bool, **kw: Any) -> None:
    """Time one scheduling pass on 128 hosts x 8 GPUs, 150 budgets, a full cluster and
    10,000 pending workloads (target: p99 <= 50 ms on one core); or, with --trace or
    --scenario, a whole replay under each policy in this process: CPU seconds, the ratio,
    and the process's peak resident memory."""
    ctx = click.get_current_context()
    if trace is None and scenario is None:
        for name in ("fmt", "maps", "budgets", "budget_column", "tree_file", "cluster", "days",
                     "size", "policies"):
            if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
                flag = "--" + {"fmt": "format", "maps": "map", "tree_file": "tree",
                               "settings": "set", "policies": "policy"}.get(name, name)
                raise click.UsageError(f"{flag.replace('_', '-')} needs --trace or --scenario")
        _decide(passes, pending, int(pools), as_json, kw["settings"])
        return
    for name in ("passes", "pending", "pools"):
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(f"--{name} times one pass: not with --trace or --scenario")
    if trace is not None and scenario is not None:
        raise click.UsageError("--trace and --scenario exclude each other")
    _replay(trace, scenario or "seed", list(dict.fromkeys(policies or POLICY_CHOICES)), as_json,
            kw)


def _decide(passes: int, pending: int, pools: int, as_json: bool,
            settings: tuple[str, ...]) -> None:
    from apportion.bench.decide import run
    from apportion.cli.simulate import build_configs, parse_settings

    parsed = parse_settings(settings)
    config, _ = build_configs(parsed)
    engine = sorted(k for k in parsed if not hasattr(config, k))
    if engine:  # the pass has no engine: such a setting would silently do nothing
        raise click.BadParameter(f"{', '.join(engine)}: an engine setting, timed only with "
                                 "--trace or --scenario", param_hint="--set")
    result = run(passes=passes, pending=pending, pools=pools, config=config)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(result)))
        return
    click.echo(
        f"decide: {result.hosts} hosts x {result.gpus_per_host} GPUs"
        f"{' in 3 pools' if result.pools == 3 else ''}, {result.budgets} budgets, "
        f"{result.running} running, {result.pending:,} pending, {result.passes} passes, "
        f"{result.core_build} core"
    )
    click.echo(
        f"  p50 {result.p50_ms:.1f} ms   p99 {result.p99_ms:.1f} ms   max {result.max_ms:.1f} ms"
        f"   (last pass: {result.starts} starts, {result.preemptions} preemptions)"
    )
    click.echo(
        f"  settling the random fill: first pass {result.first_pass_ms:.1f} ms with "
        f"{result.first_pass_preemptions} preemptions, quiet after {result.settle_rounds} rounds"
    )
    click.echo(f"  the {result.pending:,} pending timed: the {result.submitted:,} submitted, less "
               "what settling started, plus what it requeued")
    click.echo(f"  building the state: {result.build_s:.1f} s; peak resident memory "
               f"{result.peak_rss_mb:,.0f} MB")


def _replay(trace: Path | None, scenario: str, policies: list[str], as_json: bool,
            kw: dict[str, Any]) -> None:
    from apportion.bench.replay import run
    from apportion.cli.simulate import (
        build_configs,
        build_scenario,
        parse_settings,
        refuse_unused_input_flags,
    )
    from apportion.core import plural

    refuse_unused_input_flags(trace)
    config, sim = build_configs(parse_settings(kw["settings"]))
    sc = build_scenario(scenario, trace, kw["fmt"], kw["maps"], kw["budgets"],
                        kw["budget_column"], kw["tree_file"], kw["cluster"], kw["days"],
                        kw["seed"], kw["size"], float(config.max_min_runtime))
    result = run(sc, config, sim, policies, seed=kw["seed"])
    if as_json:
        click.echo(json.dumps({**dataclasses.asdict(result), "ratio": result.ratio}))
        return
    of = ("" if result.workloads == result.workloads_in_input
          else f" (of {result.workloads_in_input:,} in it)")
    click.echo(f"replay: {result.scenario}, {plural(result.workloads, 'workload')} submitted in "
               f"the {plural(result.days, 'day')} replayed{of}, {result.hosts} hosts "
               f"({result.gpus:,} GPUs), {result.budgets} budgets, {result.core_build} core")
    click.echo(f"  peak resident memory with the scenario built: {result.rss_before_mb:,.0f} MB")
    for r in result.runs:
        click.echo(f"  {r.policy:<9}  cpu {r.cpu_s:7.2f} s   wall {r.wall_s:7.2f} s   "
                   f"{r.calls:,} policy calls   {r.events:,} events   "
                   f"peak resident memory so far {r.peak_rss_mb:,.0f} MB")
    if result.ratio is not None:
        click.echo(f"  fair share / legacy CPU time: {result.ratio:.2f}x")
