"""``apportion bench``: print the policy's speed figures."""

from __future__ import annotations

import dataclasses
import json

import click


@click.command()
@click.option("--passes", default=50, show_default=True, help="decide passes to time")
@click.option("--pending", default=10_000, show_default=True, help="pending workloads")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def bench(passes: int, pending: int, as_json: bool) -> None:
    """Time one scheduling pass on 128 hosts x 8 GPUs, 150 budgets, a full cluster and
    10,000 pending workloads (target: p99 <= 50 ms on one core)."""
    from apportion.bench.decide import run

    result = run(passes=passes, pending=pending)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(result)))
        return
    click.echo(
        f"decide: {result.hosts} hosts x {result.gpus_per_host} GPUs, {result.budgets} budgets, "
        f"{result.running} running, {result.pending} pending, {result.passes} passes, "
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
