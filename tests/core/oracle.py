"""The index oracle: every index ``ClusterState`` keeps, rebuilt from scratch from its hosts,
running and pending work alone, and compared field by field with the state's own.

``ClusterState`` keeps about thirty indexes up to date incrementally so that a pass never
rebuilds them; a wrong update in one of them silently changes decisions. :func:`index_errors`
recomputes each with plain loops (no code shared with the state) and names every index,
and key, where the two disagree. The test driver (:class:`.helpers.Driver`) runs it after
every event it folds into a state, so every property and replay test built on the driver
checks it.

The primary data, which nothing rebuilds: the budget tree, ``hosts``, ``running``,
``pending``, ``reservations`` (recorded decisions), the ledger's history and the clock.
Everything else is derived. :data:`COVERED` lists each attribute of ``ClusterState`` and
what this module does with it; a test fails when the state gains one this module ignores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apportion.core import ROOT, ClusterState, HostState, ancestors
from apportion.core.fleet import FleetState
from apportion.core.ledger import CAPACITY
from apportion.core.state import queue_key

NONE = 1 << 30  # the state's "no such request / workload" size

# Every attribute of ClusterState (and of its cache) -> how the oracle treats it.
COVERED: dict[str, str] = {
    "_tree": "primary",
    "_billing": "constant: units charged per GPU-second; check_fleet_indexes reads it",
    "_hosts": "primary",
    "_running": "primary",
    "_pending": "primary",
    "_reservations": "primary: only pending work, only known hosts",
    "_awaited": "primary: recorded decisions; a wait of work queued again or gone is "
                "ignored (checkpoints_awaited matches its queued_at) and dropped as the "
                "table grows; started work has none",
    "_time": "primary: no running work started later",
    "_ledger": "primary history; its current rates are rebuilt",
    "_queues": "rebuilt",
    "_unallocated_queues": "rebuilt",
    "_sizes": "rebuilt",
    "_unallocated_sizes": "rebuilt",
    "_pending_allocated": "rebuilt",
    "_stopping": "rebuilt",
    "_used": "rebuilt",
    "_free": "rebuilt",
    "_stopping_gpus": "rebuilt",
    "_unallocated_used": "rebuilt",
    "_no_allocated": "rebuilt",
    "_idle": "rebuilt",
    "_peak_no_allocated": "bookkeeping of when to copy a set (ClusterState._compact): no answer "
                          "depends on it",
    "_peak_idle": "likewise",
    "_budgets_on": "rebuilt",
    "_held": "rebuilt",
    "_on_host": "rebuilt",
    "_running_of": "rebuilt",
    "_protected_until": "rebuilt",
    "_deadlines": "rebuilt",
    "_schedulable": "rebuilt",
    "_schedulable_names": "rebuilt",
    "_unschedulable": "rebuilt",
    "_draining": "rebuilt",
    "_max_host_gpus": "rebuilt",
    "_total_gpus": "rebuilt",
    "_free_hosts": "rebuilt",
    "_open_hosts": "rebuilt",
    "_free_or_stopping": "rebuilt (free_or_stopping_gpus(), over the hosts taking work)",
    "_healthy": "rebuilt (healthy_gpus())",
    "_cache": "the derived cache: every kept answer, and the released work as of the time it "
              "was last advanced to, rebuilt; every allocated workload not yet released is "
              "in its heap of protection ends",
}
# What the derived cache holds: all of it checked by _cache_errors.
CACHE_COVERED = {
    "smallest", "smallest_unallocated", "released", "protections", "by_gpus", "budget_sets",
    "within",
}


def state_attributes(obj: object) -> set[str]:
    """The attributes an object of the core has, pure or compiled."""
    attrs = getattr(type(obj), "__mypyc_attrs__", None)
    if attrs is not None:
        return set(attrs) - {"__dict__", "__weakref__"}
    slots = getattr(type(obj), "__slots__", None)
    if slots is not None and not hasattr(obj, "__dict__"):
        return set(slots)
    return set(vars(obj))


def _nonzero(d: Mapping[str, Any]) -> dict[str, Any]:
    """An index without its empty entries (a count of 0, an empty queue or map): the state
    keeps some of those after work leaves, and they mean the same as no entry."""
    return {k: v for k, v in d.items() if v}


def rebuild(state: ClusterState) -> dict[str, Any]:
    """Every derived index, worked out from the hosts, running and pending work alone."""
    hosts, running, pending = state.hosts, state.running, state.pending
    out: dict[str, Any] = {}
    queues: dict[str, list[Any]] = {}
    unallocated_queues: dict[str, list[Any]] = {}
    sizes: dict[str, dict[tuple[int, float], int]] = {}
    unallocated_sizes: dict[str, dict[tuple[int, float], int]] = {}
    pending_allocated: dict[str, int] = {}
    for wid, p in pending.items():
        spec = p.spec
        q = queues if spec.allocated else unallocated_queues
        q.setdefault(spec.budget, []).append((queue_key(spec), wid))
        s = (sizes if spec.allocated else unallocated_sizes).setdefault(spec.budget, {})
        shape = (spec.gpus, spec.min_runtime)
        s[shape] = s.get(shape, 0) + 1
        if spec.allocated:
            for node in ancestors(spec.budget):
                pending_allocated[node] = pending_allocated.get(node, 0) + 1
    out["queues"] = {k: sorted(v) for k, v in queues.items()}
    out["unallocated_queues"] = {k: sorted(v) for k, v in unallocated_queues.items()}
    out["sizes"] = sizes
    out["unallocated_sizes"] = unallocated_sizes
    out["pending_allocated"] = pending_allocated

    stopping = {wid for wid, r in running.items() if r.stopping}
    used = dict.fromkeys(hosts, 0)
    stopping_gpus = dict.fromkeys(hosts, 0)
    unallocated_used = dict.fromkeys(hosts, 0)
    allocated_used = dict.fromkeys(hosts, 0)
    budgets_on: dict[str, dict[str, int]] = {h: {} for h in hosts}
    on_host: dict[str, set[str]] = {h: set() for h in hosts}
    protected = dict.fromkeys(hosts, float("-inf"))
    held: dict[str, int] = {}
    for wid, r in running.items():
        live = not r.stopping
        for s in r.placement:
            used[s.host] += s.gpus
            on_host[s.host].add(wid)
            if not live:
                stopping_gpus[s.host] += s.gpus
                continue
            protected[s.host] = max(protected[s.host], r.protected_until())
            if r.spec.allocated:
                allocated_used[s.host] += s.gpus
                on = budgets_on[s.host]
                on[r.spec.budget] = on.get(r.spec.budget, 0) + 1
            else:
                unallocated_used[s.host] += s.gpus
        if live and r.spec.allocated:
            for node in ancestors(r.spec.budget):
                held[node] = held.get(node, 0) + r.gpus_held
    out["stopping"] = stopping
    out["used"] = used
    out["free"] = {h: hosts[h].gpus - n for h, n in used.items()}
    out["stopping_gpus"] = stopping_gpus
    out["unallocated_used"] = unallocated_used
    out["no_allocated"] = {h for h, n in allocated_used.items() if not n}
    out["idle"] = {h for h, n in used.items() if not n}
    out["budgets_on"] = budgets_on
    out["held"] = held
    out["on_host"] = on_host
    running_of: dict[str, set[str]] = {}
    for wid, r in running.items():
        if r.spec.allocated:
            running_of.setdefault(r.spec.budget, set()).add(wid)
    out["running_of"] = running_of
    out["protected_until"] = protected
    out["deadlines"] = {
        wid: r.started_at + r.spec.time_limit
        for wid, r in running.items()
        if r.spec.time_limit > 0
    }

    takes = sorted(n for n, h in hosts.items() if h.state is HostState.HEALTHY)
    out["schedulable"] = {n: hosts[n].gpus for n in takes}
    out["schedulable_names"] = takes
    out["unschedulable"] = sorted(n for n in hosts if n not in out["schedulable"])
    out["draining"] = sorted(n for n, h in hosts.items() if h.state is HostState.DRAINING)
    out["max_host_gpus"] = max((h.gpus for h in hosts.values()), default=0)
    out["total_gpus"] = sum(h.gpus for h in hosts.values())
    free_hosts: dict[int, set[str]] = {}
    for n in takes:
        if out["free"][n]:
            free_hosts.setdefault(out["free"][n], set()).add(n)
    out["free_hosts"] = free_hosts
    open_hosts: dict[int, set[str]] = {}
    for n in takes:
        reachable = out["free"][n] + stopping_gpus[n] + unallocated_used[n]
        if reachable:
            open_hosts.setdefault(reachable, set()).add(n)
    out["open_hosts"] = open_hosts
    out["healthy_gpus"] = sum(h.gpus for h in hosts.values() if h.state is HostState.HEALTHY)
    out["free_or_stopping_gpus"] = sum(out["free"][n] + stopping_gpus[n] for n in takes)
    return out


def smallest_shapes_by_hand(state: ClusterState, leaf: str) -> list[tuple[int, float]]:
    """Shapes of ``leaf``'s pending allocated work no other of the same kind (one host, or
    whole hosts) is both no larger and no longer than, smallest first."""
    largest = max((h.gpus for h in state.hosts.values()), default=0)
    shapes = {
        (p.spec.gpus, p.spec.min_runtime)
        for p in state.pending.values()
        if p.spec.allocated and p.spec.budget == leaf
    }
    return sorted(
        (g, m) for g, m in shapes
        if not any(
            (g2, m2) != (g, m) and g2 <= g and m2 <= m and (g2 > largest) == (g > largest)
            for g2, m2 in shapes
        )
    )


def smallest_unallocated_by_hand(state: ClusterState) -> tuple[int, int]:
    largest = max((h.gpus for h in state.hosts.values()), default=0)
    asked = [p.spec.gpus for p in state.pending.values() if not p.spec.allocated]
    return (
        min((g for g in asked if g <= largest), default=NONE),
        min((g for g in asked if g > largest), default=NONE),
    )


def released_by_hand(state: ClusterState, now: float) -> dict[str, tuple[int, dict[int, int],
                                                                        dict[str, int]]]:
    """Per budget node but the root: GPUs, workloads by size and workloads per host of the
    allocated work past its minimum runtime at ``now`` and not stopping."""
    out: dict[str, tuple[int, dict[int, int], dict[str, int]]] = {}
    for r in state.running.values():
        if r.spec.allocated and not r.stopping and now >= r.protected_until():
            for node in ancestors(r.spec.budget)[:-1]:
                gpus, by_size, on = out.setdefault(node, (0, {}, {}))
                by_size[r.gpus_held] = by_size.get(r.gpus_held, 0) + 1
                for s in r.placement:
                    on[s.host] = on.get(s.host, 0) + 1
                out[node] = (gpus + r.gpus_held, by_size, on)
    return out


def _diff(name: str, got: Any, want: Any) -> list[str]:
    if got == want:
        return []
    if isinstance(got, Mapping) and isinstance(want, Mapping):
        keys = sorted(set(got) | set(want), key=str)
        bad = [k for k in keys if got.get(k) != want.get(k)]
        return [
            f"index {name}[{k!r}]: the state has {got.get(k)!r}, the work says {want.get(k)!r}"
            for k in bad[:5]
        ]
    return [f"index {name}: the state has {got!r}, the work says {want!r}"]


def index_errors(state: ClusterState, ledger: bool = True) -> list[str]:
    """Every disagreement between the state's indexes and the ones rebuilt from its work
    (``ledger`` False: all but the ledger, which a pool of a fleet shares with the others;
    :func:`check_fleet_indexes` checks that one)."""
    want = rebuild(state)
    errors: list[str] = []
    # per host: every host has an entry, empty or not
    for name in ("used", "free", "stopping_gpus", "unallocated_used", "protected_until"):
        errors += _diff(name, dict(getattr(state, name)), want[name])
    errors += _diff("budgets_on", {h: dict(b) for h, b in state.budgets_on.items()},
                    want["budgets_on"])
    errors += _diff("on_host", {h: set(w) for h, w in state.on_host.items()}, want["on_host"])
    errors += _diff("running_of", {b: set(w) for b, w in state.running_of.items()},
                    want["running_of"])
    # per running workload with a time limit
    errors += _diff("deadlines", dict(state.deadlines), want["deadlines"])
    for name in ("stopping", "no_allocated", "idle"):
        errors += _diff(name, set(getattr(state, name)), want[name])
    # per budget: entries only where there is something
    for name in ("queues", "unallocated_queues"):
        errors += _diff(name, {k: list(v) for k, v in getattr(state, name).items() if v},
                        want[name])
    for name in ("sizes", "unallocated_sizes"):
        errors += _diff(name, {k: dict(v) for k, v in getattr(state, name).items() if v},
                        want[name])
    for name in ("pending_allocated", "held"):
        errors += _diff(name, _nonzero(getattr(state, name)), want[name])
    # per free count: only counts some host taking work has free
    for name in ("free_hosts", "open_hosts"):
        errors += _diff(name, {k: set(v) for k, v in getattr(state, name).items()}, want[name])
    for name in ("schedulable", "schedulable_names", "unschedulable", "draining",
                 "max_host_gpus", "total_gpus"):
        value = getattr(state, name)
        errors += _diff(name, dict(value) if isinstance(value, Mapping) else
                        list(value) if isinstance(value, list | tuple) else value, want[name])
    errors += _diff("healthy_gpus()", state.healthy_gpus(), want["healthy_gpus"])
    errors += _diff("free_or_stopping_gpus()", state.free_or_stopping_gpus(),
                    want["free_or_stopping_gpus"])
    errors += _cache_errors(state)
    if ledger:
        errors += _ledger_errors(state)
    errors += _primary_errors(state)
    return errors


def _cache_errors(state: ClusterState) -> list[str]:
    """The answers the state keeps between passes agree with the work now."""
    errors: list[str] = []
    cache = state.derived
    kept: Mapping[str, list[tuple[int, float]]] = cache.smallest
    for leaf, shapes in kept.items():
        errors += _diff(f"smallest_shapes({leaf!r}) (kept)", list(shapes),
                        smallest_shapes_by_hand(state, leaf))
    for leaf, by_gpus in cache.by_gpus.items():
        got_queues = {
            gpus: (q.items(), q.live,
                   [q.entries[at] if (at := q.first_below(0, m)) >= 0 else None
                    for m in sorted({m for _, m in q.items()})])
            for gpus, q in by_gpus.items()
        }
        if list(by_gpus) != sorted(by_gpus):
            errors.append(f"index gpus_queues({leaf!r}) (kept): GPU counts {list(by_gpus)} "
                          "are not smallest first")
        errors += _diff(f"gpus_queues({leaf!r}) (kept)", got_queues,
                        gpus_queues_by_hand(state, leaf))
    if cache.budget_sets:
        budgets_on = rebuild(state)["budgets_on"]
        for host, budgets in cache.budget_sets.items():
            errors += _diff(f"budget_set({host!r}) (kept)", set(budgets), set(budgets_on[host]))
    for (gpus, min_runtime), leaves in cache.within.items():
        want_leaves = {
            spec.budget for spec in (p.spec for p in state.pending.values())
            if spec.allocated and spec.gpus <= gpus and spec.min_runtime <= min_runtime
        }
        errors += _diff(f"leaves_within({gpus}, {min_runtime}) (kept)", set(leaves),
                        want_leaves)
    kept_unallocated = cache.smallest_unallocated
    if kept_unallocated is not None:
        errors += _diff("smallest_unallocated() (kept)", kept_unallocated,
                        smallest_unallocated_by_hand(state))
    index = cache.released
    want = released_by_hand(state, index.time)
    got = {
        node: (gpus, dict(index.by_size.get(node, {})), dict(index.hosts.get(node, {})))
        for node, gpus in index.gpus.items()
        if gpus
    }
    errors += _diff(f"released({index.time})", got, want)
    ids = {
        wid for wid, r in state.running.items()
        if r.spec.allocated and not r.stopping and index.time >= r.protected_until()
    }
    errors += _diff(f"released({index.time}).ids", set(index.ids), ids)
    for node, least in index._smallest.items():
        errors += _diff(f"released({index.time}).smallest({node!r}) (kept)", least,
                        min(want[node][1]) if node in want else NONE)
    # work released later must be waiting in the heap of protection ends, with its run
    waiting = {(until, started_at, wid) for until, started_at, wid in cache.protections}
    for wid, r in state.running.items():
        if r.spec.allocated and not r.stopping and wid not in ids:
            entry = (r.protected_until(), r.started_at, wid)
            if entry not in waiting:
                errors.append(f"index released: {wid} (protected until "
                              f"{r.protected_until()}) is missing from the protection heap")
    return errors


def gpus_queues_by_hand(state: ClusterState, leaf: str) -> dict[int, Any]:
    """Per GPU count: ``leaf``'s pending allocated work in queue order with its minimum
    runtimes, how many, and for each of those runtimes the first request holding a shorter
    one (None: none), found by a plain scan: what ``GpusQueue`` must hold and
    ``first_below`` answer from its tree, however many gaps it keeps."""
    out: dict[int, Any] = {}
    work = sorted(
        (queue_key(p.spec), wid) for wid, p in state.pending.items()
        if p.spec.allocated and p.spec.budget == leaf
    )
    for gpus in sorted({state.pending[wid].spec.gpus for _, wid in work}):
        items = [(e, state.pending[e[1]].spec.min_runtime) for e in work
                 if state.pending[e[1]].spec.gpus == gpus]
        firsts = [next((e for e, m in items if m < bound), None)
                  for bound in sorted({m for _, m in items})]
        out[gpus] = (items, len(items), firsts)
    return out


def _ledger_errors(state: ClusterState) -> list[str]:
    """The ledger's current rates: GPUs held by running work per node, and healthy GPUs."""
    charged: dict[str, float] = {}
    free: dict[str, float] = {}
    for r in state.running.values():
        into = charged if r.spec.allocated else free
        for node in ancestors(r.spec.budget):
            into[node] = into.get(node, 0.0) + r.gpus_held
    nodes = [ROOT, *state.tree.nodes()]
    led = state.ledger
    errors: list[str] = []
    errors += _diff("ledger.rate(charged)", _nonzero({n: led.rate(n) for n in nodes}), charged)
    errors += _diff("ledger.rate(free)",
                    _nonzero({n: led.rate(n, charged=False) for n in nodes}), free)
    errors += _diff("ledger capacity rate", led.rate(CAPACITY),
                    float(sum(h.gpus for h in state.hosts.values()
                              if h.state is HostState.HEALTHY)))
    return errors


def _primary_errors(state: ClusterState) -> list[str]:
    errors: list[str] = []
    for wid, hosts in state.reservations.items():
        if wid not in state.pending:
            errors.append(f"reservations: {wid} holds one but is not pending")
        errors += [f"reservations: {wid}: unknown host {h!r}" for h in hosts
                   if h not in state.hosts]
    waited = set(state.awaited) & set(state.running)
    if waited:
        errors.append(f"awaited: running work still has a checkpoint wait: {sorted(waited)}")
    both = set(state.running) & set(state.pending)
    if both:
        errors.append(f"running and pending at once: {sorted(both)}")
    for wid, r in state.running.items():
        if r.started_at > state.time:
            errors.append(f"running: {wid} started at {r.started_at}, after the clock "
                          f"({state.time})")
        for s in r.placement:
            if s.host not in state.hosts:
                errors.append(f"running: {wid} on unknown host {s.host!r}")
    for name, h in state.hosts.items():
        used = sum(s.gpus for r in state.running.values() for s in r.placement
                   if s.host == name)
        if used > h.gpus:
            errors.append(f"host {name}: over-committed ({used} of {h.gpus} GPUs)")
        if h.state in (HostState.REPAIR, HostState.DOWN) and used:
            errors.append(f"host {name}: is {h.state.value} but holds {used} GPUs")
    return errors


def check_indexes(state: ClusterState, after: str = "") -> None:
    """Fail, naming every index that disagrees, unless all agree with the work."""
    errors = index_errors(state)
    assert not errors, (f"after {after}: " if after else "") + "; ".join(errors)


def check_fleet_indexes(fleet: FleetState, after: str = "") -> None:
    """Every pool's indexes agree with its work, and the fleet's one ledger charges each
    node, at this moment, the GPUs its work holds in every pool times that pool's billing
    weight (healthy GPUs likewise for the capacity)."""
    errors: list[str] = []
    for name, pool in fleet.pools.items():
        errors += [f"pool {name}: {e}" for e in index_errors(pool, ledger=False)]
    charged: dict[str, float] = {}
    free: dict[str, float] = {}
    capacity = 0.0
    for pool in fleet.pools.values():
        for r in pool.running.values():
            into = charged if r.spec.allocated else free
            for node in ancestors(r.spec.budget):
                into[node] = into.get(node, 0.0) + r.gpus_held * pool.billing
        capacity += pool.billing * sum(
            h.gpus for h in pool.hosts.values() if h.state is HostState.HEALTHY
        )
    nodes = [ROOT, *fleet.tree.nodes()]
    led = fleet.ledger
    errors += _diff("fleet ledger.rate(charged)",
                    _nonzero({n: round(led.rate(n), 6) for n in nodes}),
                    {k: round(v, 6) for k, v in charged.items()})
    errors += _diff("fleet ledger.rate(free)",
                    _nonzero({n: round(led.rate(n, charged=False), 6) for n in nodes}),
                    {k: round(v, 6) for k, v in free.items()})
    errors += _diff("fleet ledger capacity rate", round(led.rate(CAPACITY), 6), round(capacity, 6))
    assert not errors, (f"after {after}: " if after else "") + "; ".join(errors)
