"""The service's pools: one :class:`~apportion.core.fleet.FleetState` made the same way
for the scheduler and for the checks of a submission.

A host's cluster and GPU kind come from the store (or the executor's inventory), ``""``
meaning the config's ``[pools]`` defaults; billing weights and per-pool budget weights
from the config (:class:`~apportion.service.config.PoolsConfig`)."""

from __future__ import annotations

from collections.abc import Iterable

from apportion.core import BudgetTree, ClusterState, Host, PolicyConfig, validate_spec
from apportion.core.fleet import FleetState
from apportion.core.types import WorkloadSpec

from .config import PoolsConfig


def fleet_of(tree: BudgetTree, pools: PoolsConfig, hosts: Iterable[tuple[Host, str, str]],
             start: float, ledger_keep: float = 30 * 86400.0) -> FleetState:
    """A fleet of ``hosts`` (each with its cluster and kind as stored) at ``start``, with
    the per-pool weights of the budgets ``tree`` has."""
    fleet = FleetState(tree, pools.fleet(tree), start=start, ledger_keep=ledger_keep)
    for host, cluster, kind in hosts:
        fleet.add_host(host, *pools.of(cluster, kind), start)
    return fleet


def validate(fleet: FleetState, spec: WorkloadSpec, config: PolicyConfig) -> None:
    """Raise ``CoreError`` naming the field if no pool of ``fleet`` could ever run
    ``spec`` (:meth:`FleetState.validate`); with no host yet, the single-pool rules
    against none, as before pools."""
    if fleet.pools:
        fleet.validate(spec, config)
    else:
        validate_spec(spec, ClusterState(fleet.tree), config)


__all__ = ["fleet_of", "validate"]
