"""Several clusters and GPU kinds under one budget tree: pools.

A host belongs to a cluster and has a GPU kind; a **pool** is the hosts of one
``(cluster, kind)``, named ``"cluster/kind"``. A :class:`FleetState` keeps one
:class:`~apportion.core.state.ClusterState` per pool, and every pool's state charges one
shared :class:`~apportion.core.ledger.UsageLedger` in **billed units**: GPU-seconds times the
kind's billing weight (:class:`FleetConfig`, e.g. a B200 GPU-second = 2.2 units). So:

* the usage ratio of every budget (charged units in the window over its share of the fleet's
  billed capacity) is **fleet-wide**, and so is the Fair Tree order it gives: a team under
  its share is first in whichever pool has room;
* the guarantee and the no-ping-pong rule read the GPUs a budget's work *holds now* against
  its share of the pool's healthy GPUs, so they hold **per pool** (a budget asking no more
  than its share of a pool gets it there within ``max_min_runtime``);
* a budget may have a per-pool weight (:attr:`FleetConfig.overrides`); weight 0 takes it out
  of that pool's tree (its work never goes there).

:func:`decide_fleet` runs the unchanged single-pool pass (:func:`~apportion.core.decide`)
over each pool. Work accepting several pools waits in each of them; when more than one pass
admits it, it goes where it starts now rather than where it waits for victims, then to the
kind its owner listed first, then by pool name, and the passes that lost it run again
without it. With one pool, :func:`decide_fleet` is :func:`~apportion.core.decide` itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from .config import PolicyConfig
from .ledger import UsageLedger
from .policy import TooLarge, decide, validate_spec
from .state import ClusterState
from .tree import BudgetNode, BudgetTree
from .types import (
    CoreError,
    Decisions,
    Host,
    HostState,
    Pending,
    Placement,
    Running,
    WaitReason,
    WorkloadSpec,
)


def pool_name(cluster: str, kind: str) -> str:
    return f"{cluster}/{kind}"


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """How pools are billed and funded.

    ``billing``: GPU kind -> units charged per GPU-second (a kind not listed: 1).
    ``overrides``: pool name (``"cluster/kind"``) -> {budget path: weight in that pool};
    weight 0 means not funded there (the budget and its subtree leave that pool's tree)."""

    billing: Mapping[str, float] = field(default_factory=dict)
    overrides: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind, w in self.billing.items():
            if not kind:
                raise CoreError("fleet: billing: a GPU kind must not be empty")
            if not (isinstance(w, int | float) and 0 < w < float("inf")):
                raise CoreError(f"fleet: billing: {kind}: must be a number > 0, got {w!r}")
        for pool, weights in self.overrides.items():
            if pool.count("/") != 1 or not all(pool.split("/")):
                raise CoreError(f"fleet: overrides: {pool!r}: must be a pool 'cluster/kind'")
            for path, w in weights.items():
                if not (isinstance(w, int | float) and 0 <= w < float("inf")):
                    raise CoreError(
                        f"fleet: overrides: {pool}: {path}: must be a number >= 0, got {w!r}"
                    )

    def weight(self, kind: str) -> float:
        return float(self.billing.get(kind, 1.0))


def pool_tree(tree: BudgetTree, overrides: Mapping[str, float], pool: str) -> BudgetTree:
    """``tree`` with the weights ``overrides`` sets for ``pool`` (0: the node and its subtree
    left out)."""
    if not overrides:
        return tree
    weights = tree.as_dict()
    for path in overrides:
        if path not in weights:
            raise CoreError(f"fleet: overrides: {pool}: {path!r}: unknown budget")
    gone = [p for p, w in overrides.items() if w == 0]
    nodes = [
        BudgetNode(p, float(overrides.get(p, w)))
        for p, w in weights.items()
        if not any(p == g or p.startswith(g + "/") for g in gone)
    ]
    try:
        return BudgetTree.build(nodes)
    except CoreError as e:
        raise CoreError(f"fleet: overrides: {pool}: {e}") from None


class FleetState:
    """Pools of one fleet, one budget tree, one ledger: what :func:`decide_fleet` reads.

    Drivers change it only through the methods below, which mirror
    :class:`~apportion.core.state.ClusterState`'s and keep every pool's state up to date:
    pending work waits in every pool it accepts (:meth:`accepts`) and leaves all of them when
    it starts in one."""

    def __init__(
        self,
        tree: BudgetTree,
        config: FleetConfig | None = None,
        start: float = 0.0,
        ledger_keep: float = 30 * 86400.0,
    ) -> None:
        self._tree = tree
        self._cfg = config or FleetConfig()
        self._ledger = UsageLedger(start, keep=ledger_keep)
        self._pools: dict[str, ClusterState] = {}
        self._where: dict[str, tuple[str, str]] = {}  # pool -> (cluster, kind)
        self._pool_of: dict[str, str] = {}  # host -> pool
        self._waits_in: dict[str, tuple[str, ...]] = {}  # pending id -> pools, by name
        # pending id -> its spec as submitted: each pool's copy keeps only its own hosts
        self._submitted: dict[str, WorkloadSpec] = {}
        self._runs_in: dict[str, str] = {}  # running id -> pool
        self._time = start
        for pool in self._cfg.overrides:
            for path in self._cfg.overrides[pool]:
                if path not in tree:
                    raise CoreError(f"fleet: overrides: {pool}: {path!r}: unknown budget")

    # ---- hosts -----------------------------------------------------------------------
    def add_host(self, host: Host, cluster: str, kind: str, t: float) -> None:
        """Add ``host`` to pool ``cluster/kind`` (made on its first host)."""
        if not cluster or "/" in cluster:
            raise CoreError(
                f"host {host.name}: cluster: must be a name without '/', got {cluster!r}"
            )
        if not kind or "/" in kind:
            raise CoreError(f"host {host.name}: kind: must be a name without '/', got {kind!r}")
        if host.name in self._pool_of:
            raise CoreError(f"host {host.name}: name: duplicate")
        self._tick(t)
        name = pool_name(cluster, kind)
        state = self._pools.get(name)
        if state is None:
            tree = pool_tree(self._tree, self._cfg.overrides.get(name, {}), name)
            state = ClusterState(tree, start=t, ledger=self._ledger, billing=self._cfg.weight(kind))
            self._pools[name] = state
            self._pools = dict(sorted(self._pools.items()))
            self._where[name] = (cluster, kind)
        state.add_host(host, t)
        self._pool_of[host.name] = name

    def set_host_state(self, name: str, state: HostState, t: float) -> Host:
        self._tick(t)
        return self._pools[self.pool_of(name)].set_host_state(name, state, t)

    def pool_of(self, host: str) -> str:
        try:
            return self._pool_of[host]
        except KeyError:
            raise CoreError(f"host {host!r}: unknown host") from None

    # ---- workloads -------------------------------------------------------------------
    def accepts(self, spec: WorkloadSpec, pool: str) -> bool:
        """May ``spec`` run in ``pool``: its kind and cluster are asked for (or any), the
        budget is funded there, and the pool's hosts can hold it (``validate_spec``'s shape
        rules)."""
        if not self._asks_for(spec, pool):
            return False
        try:
            validate_spec(self._local(spec, pool), self._pools[pool], _PERMISSIVE)
        except CoreError:
            return False
        return True

    def _asks_for(self, spec: WorkloadSpec, pool: str) -> bool:
        return (
            self._of_kind(spec, pool)
            and self._pools[pool].tree.is_leaf(spec.budget)
            and (not spec.hosts or any(self._pool_of.get(h) == pool for h in spec.hosts))
        )

    def _of_kind(self, spec: WorkloadSpec, pool: str) -> bool:
        """Is ``pool`` of a kind and cluster ``spec`` asks for (or any)."""
        cluster, kind = self._where[pool]
        return (not spec.gpu_kinds or kind in spec.gpu_kinds) and (
            not spec.cluster or spec.cluster == cluster)

    def validate(self, spec: WorkloadSpec, config: PolicyConfig) -> None:
        """Refuse work no pool could run, naming the field: an unknown kind, cluster or
        host, no pool of what it asks for funding its budget (or none holding the hosts it
        may use), then the single-pool rules (caps, shape) of the first such pool if it fits
        none; with several pools in the fleet, more GPUs than each pool it may use holds is
        said with what each holds."""
        self._tree.require_leaf(spec.budget)
        kinds = {k for _, k in self._where.values()}
        clusters = {c for c, _ in self._where.values()}
        for k in spec.gpu_kinds:
            if k not in kinds:
                raise CoreError(
                    f"workload {spec.id}: gpu_kinds: unknown GPU kind {k!r} "
                    f"(the fleet has {', '.join(sorted(kinds)) or 'none'})"
                )
        if spec.cluster and spec.cluster not in clusters:
            raise CoreError(
                f"workload {spec.id}: cluster: unknown cluster {spec.cluster!r} "
                f"(the fleet has {', '.join(sorted(clusters)) or 'none'})"
            )
        for h in spec.hosts:
            if h not in self._pool_of:  # as validate_spec says it
                raise CoreError(f"workload {spec.id}: hosts: unknown host {h!r}")
        asked = [p for p in self._pools if self._asks_for(spec, p)]
        if not asked:
            raise CoreError(f"workload {spec.id}: {self._no_pool(spec)}")
        errors: list[CoreError] = []
        for p in asked:
            try:
                validate_spec(self._local(spec, p), self._pools[p], config)
                return
            except CoreError as e:
                errors.append(e)
        if len(self._pools) > 1 and all(isinstance(e, TooLarge) for e in errors):
            # "the cluster's 4" said of a pool hid that another holds 8, or the one it may
            # use was which
            which = "any pool" if len(asked) == len(self._pools) else "any pool it may use"
            holds = ", ".join(f"{p}: {self._pools[p].total_gpus}" for p in asked)
            raise TooLarge(f"workload {spec.id}: gpus: {spec.gpus} is more than {which} "
                           f"holds ({holds})")
        raise errors[0]

    def _no_pool(self, spec: WorkloadSpec) -> str:
        """Why no pool takes ``spec`` (``field: why``), naming what rules the pools out:
        the hosts it may use, when a pool would take it without them; the cluster, when it
        has none of the kinds asked for or when a pool of them elsewhere funds the budget;
        else the kinds asked for (the budget, if it asked for any kind) fund it nowhere."""
        what = ",".join(spec.gpu_kinds) or "any kind"
        where = f" in cluster {spec.cluster}" if spec.cluster else ""
        anywhere = replace(spec, hosts=())
        if spec.hosts and any(self._asks_for(anywhere, p) for p in self._pools):
            return self._no_pool_on_hosts(spec, where)
        kinds = " or ".join(spec.gpu_kinds)
        if spec.cluster and not any(self._of_kind(spec, p) for p in self._pools):
            theirs = sorted({c for c, k in self._where.values() if k in spec.gpu_kinds})
            return (f"cluster: cluster {spec.cluster} has no {kinds} GPUs (the fleet has "
                    f"them in {', '.join(theirs)})")
        elsewhere = replace(anywhere, cluster="")
        if spec.cluster and any(self._asks_for(elsewhere, p) for p in self._pools):
            field = "cluster"
        else:
            field = "gpu_kinds" if spec.gpu_kinds else "budget"
        return f"{field}: no pool of {what}{where} funds budget {spec.budget}"

    def _no_pool_on_hosts(self, spec: WorkloadSpec, where: str) -> str:
        """Why the hosts ``spec`` may use leave it no pool, though some pool would take it
        without them."""
        hosts = ", ".join(spec.hosts)
        theirs = sorted(p for p in {self._pool_of[h] for h in spec.hosts}
                        if self._of_kind(spec, p))
        if not theirs:
            kinds = " or ".join(spec.gpu_kinds)
            return (f"hosts: the hosts it may use ({hosts}) have no "
                    f"{kinds + ' ' if kinds else ''}GPUs{where}")
        return (f"hosts: the pools of the hosts it may use ({', '.join(theirs)}) do not fund "
                f"budget {spec.budget}")

    def pools_for(self, spec: WorkloadSpec) -> tuple[str, ...]:
        return tuple(p for p in self._pools if self.accepts(spec, p))

    def submit(
        self, spec: WorkloadSpec, t: float, queued_at: float | None = None,
        restarted: bool = False,
    ) -> Pending:
        """Queue ``spec`` in every pool it accepts (the caller validated it); ``restarted``
        as :meth:`ClusterState.submit`."""
        if spec.id in self._waits_in or spec.id in self._runs_in:
            raise CoreError(f"workload {spec.id}: id: already queued or running")
        pools = self.pools_for(spec)
        if not pools:
            raise CoreError(f"workload {spec.id}: no pool accepts it")
        self._tick(t)
        out: Pending | None = None
        for p in pools:
            state = self._pools[p]
            out = state.submit(self._local(spec, p), t, queued_at, restarted)
        self._waits_in[spec.id] = pools
        self._submitted[spec.id] = spec
        assert out is not None
        return out

    def _local(self, spec: WorkloadSpec, pool: str) -> WorkloadSpec:
        """``spec`` as pool ``pool`` sees it: only that pool's hosts in its host list."""
        if not spec.hosts:
            return spec
        return replace(spec, hosts=tuple(h for h in spec.hosts if self._pool_of[h] == pool))

    def unqueue(self, workload: str) -> Pending:
        pools = self._waits_in.pop(workload, None)
        if pools is None:
            raise CoreError(f"workload {workload}: not pending")
        del self._submitted[workload]
        out = [self._pools[p].unqueue(workload) for p in pools]
        return out[0]

    def start(self, workload: str, placement: Placement, t: float) -> Running:
        """Pending -> running on ``placement``, all in one pool (a gang never spans pools)."""
        if not placement:
            raise CoreError(f"workload {workload}: placement: empty")
        pools = {self.pool_of(s.host) for s in placement}
        if len(pools) != 1:
            raise CoreError(
                f"workload {workload}: placement: spans pools {', '.join(sorted(pools))}"
            )
        (pool,) = pools
        waits = self._waits_in.get(workload)
        if waits is None or pool not in waits:
            raise CoreError(f"workload {workload}: not pending in pool {pool}")
        self._tick(t)
        for p in waits:
            if p != pool:
                self._pools[p].unqueue(workload)
        r = self._pools[pool].start(workload, placement, t)
        del self._waits_in[workload]
        del self._submitted[workload]
        self._runs_in[workload] = pool
        return r

    def reserve(self, workload: str, hosts: tuple[str, ...]) -> None:
        pools = {self.pool_of(h) for h in hosts}
        if len(pools) != 1:
            raise CoreError(f"workload {workload}: reservation: spans pools")
        self._pools[pools.pop()].reserve(workload, hosts)

    def await_checkpoints(self, workload: str, until: float, victims: Iterable[str]) -> None:
        """:meth:`ClusterState.await_checkpoints` in every pool ``workload`` waits in."""
        pools = self._waits_in.get(workload)
        if pools is None:
            raise CoreError(f"workload {workload}: not pending, cannot wait for checkpoints")
        kept = tuple(victims)
        for p in pools:
            self._pools[p].await_checkpoints(workload, until, kept)

    def mark_stopping(self, workload: str) -> Running:
        return self._pools[self._running_pool(workload)].mark_stopping(workload)

    def finish(self, workload: str, t: float, ended_at: float | None = None) -> Running:
        """Running -> gone; ``ended_at`` as for :meth:`ClusterState.finish`."""
        pool = self._running_pool(workload)
        self._tick(t)
        r = self._pools[pool].finish(workload, t, ended_at)
        del self._runs_in[workload]
        return r

    def requeue(self, workload: str, t: float, ended_at: float | None = None) -> Pending:
        """Running -> pending again, in every pool it accepts (it keeps its place);
        ``ended_at`` as for :meth:`ClusterState.requeue`."""
        r = self.finish(workload, t, ended_at)
        return self.submit(r.spec, t, queued_at=ended_at, restarted=True)

    def checkpoint(self, workload: str, t: float) -> Running:
        """A running workload reported a checkpoint (:meth:`ClusterState.checkpoint`)."""
        return self._pools[self._running_pool(workload)].checkpoint(workload, t)

    def advance(self, t: float) -> None:
        self._tick(t)

    def set_tree(self, tree: BudgetTree) -> None:
        """Swap in a changed budget tree; every pool's tree follows (with its overrides)."""
        trees = {p: pool_tree(tree, self._cfg.overrides.get(p, {}), p) for p in self._pools}
        for p, state in self._pools.items():
            state.set_tree(trees[p])
        self._tree = tree

    def _running_pool(self, workload: str) -> str:
        try:
            return self._runs_in[workload]
        except KeyError:
            raise CoreError(f"workload {workload}: not running") from None

    def _tick(self, t: float) -> None:
        if t < self._time:
            raise CoreError(f"fleet: time went backwards ({t} < {self._time})")
        self._time = t
        for state in self._pools.values():
            state.advance(t)

    # ---- views -----------------------------------------------------------------------
    @property
    def tree(self) -> BudgetTree:
        return self._tree

    @property
    def config(self) -> FleetConfig:
        return self._cfg

    @property
    def ledger(self) -> UsageLedger:
        """The one ledger of the fleet, in billed units."""
        return self._ledger

    @property
    def time(self) -> float:
        return self._time

    @property
    def pools(self) -> Mapping[str, ClusterState]:
        """Pool name -> its state, by name."""
        return self._pools

    def where(self, pool: str) -> tuple[str, str]:
        """(cluster, kind) of ``pool``."""
        return self._where[pool]

    def waits_in(self, workload: str) -> tuple[str, ...]:
        """The pools pending ``workload`` waits in (empty if it is not pending)."""
        return self._waits_in.get(workload, ())

    def submitted(self, workload: str) -> WorkloadSpec:
        """Pending ``workload``'s spec as submitted, its host list whole (the pools' pending
        specs hold only their own hosts)."""
        try:
            return self._submitted[workload]
        except KeyError:
            raise CoreError(f"workload {workload}: not pending") from None

    def runs_in(self, workload: str) -> str | None:
        return self._runs_in.get(workload)

    # With one pool, the views below are that pool's own (read-only) mappings: a driver
    # that reads them in a loop pays nothing for the fleet.
    def _alone(self) -> ClusterState | None:
        return next(iter(self._pools.values())) if len(self._pools) == 1 else None

    @property
    def hosts(self) -> Mapping[str, Host]:
        one = self._alone()
        if one is not None:
            return one.hosts
        return {n: h for s in self._pools.values() for n, h in s.hosts.items()}

    @property
    def running(self) -> Mapping[str, Running]:
        one = self._alone()
        if one is not None:
            return one.running
        return {w: self._pools[p].running[w] for w, p in self._runs_in.items()}

    @property
    def pending(self) -> Mapping[str, Pending]:
        one = self._alone()
        if one is not None:
            return one.pending
        return {w: self._pools[ps[0]].pending[w] for w, ps in self._waits_in.items()}

    @property
    def stopping(self) -> AbstractSet[str]:
        """Running work whose stop was issued, in every pool."""
        one = self._alone()
        if one is not None:
            return one.stopping
        return {w for s in self._pools.values() for w in s.stopping}

    def healthy_gpus(self) -> int:
        return sum(s.healthy_gpus() for s in self._pools.values())

    @property
    def reservations(self) -> Mapping[str, tuple[str, ...]]:
        one = self._alone()
        if one is not None:
            return one.reservations
        return {w: h for s in self._pools.values() for w, h in s.reservations.items()}

    @property
    def used(self) -> Mapping[str, int]:
        one = self._alone()
        if one is not None:
            return one.used
        return {n: g for s in self._pools.values() for n, g in s.used.items()}

    @property
    def on_host(self) -> Mapping[str, AbstractSet[str]]:
        one = self._alone()
        if one is not None:
            return one.on_host
        return {n: w for s in self._pools.values() for n, w in s.on_host.items()}

    @property
    def deadlines(self) -> Mapping[str, float]:
        one = self._alone()
        if one is not None:
            return one.deadlines
        return {w: t for s in self._pools.values() for w, t in s.deadlines.items()}

    def fingerprint(self) -> dict[str, object]:
        """Everything the fleet holds but the pools' derived caches (see
        :meth:`ClusterState.fingerprint`)."""
        return {
            "tree": tuple(sorted(self._tree.as_dict().items())),
            "pools": tuple((p, s.fingerprint()) for p, s in self._pools.items()),
            "where": tuple(sorted(self._where.items())),
            "pool_of": tuple(sorted(self._pool_of.items())),
            "waits_in": tuple(sorted(self._waits_in.items())),
            "submitted": tuple(sorted(self._submitted.items())),
            "runs_in": tuple(sorted(self._runs_in.items())),
            "ledger": self._ledger.fingerprint(),
            "time": self._time,
        }


# the shape rules of validate_spec only (the caps are checked once, by FleetState.validate)
_PERMISSIVE = PolicyConfig(max_min_runtime=float("inf"))


def pool_config(fleet: FleetState, pool: str, config: PolicyConfig) -> PolicyConfig:
    """``config`` as a pass over ``pool`` uses it: the admission charge in billed units."""
    w = fleet.pools[pool].billing
    return config if w == 1.0 else replace(config, admission_charge=config.admission_charge * w)


def decide_fleet(
    fleet: FleetState, now: float, config: PolicyConfig, reasons: bool = True
) -> Decisions:
    """One pass over every pool at ``now``. Pure: ``fleet`` is left exactly as it was
    (:meth:`FleetState.fingerprint` is equal before and after).

    Each pool's pass is :func:`~apportion.core.decide` on that pool's state. Work waiting in
    several pools and admitted (started, or given room by preemption) by more than one pass
    is given to one: where it starts now before where it waits for victims, then the kind
    listed first in its ``gpu_kinds``, then the pool name; every pass that admitted work
    given elsewhere runs again with that work out of its queue."""
    pools = list(fleet.pools)
    if len(pools) == 1:
        return decide(fleet.pools[pools[0]], now, pool_config(fleet, pools[0], config), reasons)
    result = {p: _pass(fleet, p, now, config, reasons, set()) for p in pools}
    chosen: dict[str, str] = {}
    for w, ranked in sorted(_offers(fleet, result).items()):
        chosen[w] = min(ranked)[-1]
    redo = [p for p in pools if any(chosen.get(w, p) != p for w in _admitted(result[p]))]
    for p in redo:
        hidden = {w for w in fleet.pools[p].pending if chosen.get(w, p) != p}
        result[p] = _pass(fleet, p, now, config, reasons, hidden)
        got = _admitted(result[p])
        for w in list(chosen):
            if chosen[w] == p and w not in got:
                del chosen[w]  # lost it to work the rerun ranked first: it waits
        for w in got:
            chosen.setdefault(w, p)
    return _merge(fleet, result)


def _pass(
    fleet: FleetState, pool: str, now: float, config: PolicyConfig, reasons: bool,
    hidden: set[str],
) -> Decisions:
    """``decide`` on ``pool`` with the pending work in ``hidden`` out of its queue (put back
    exactly as it was before returning)."""
    state = fleet.pools[pool]
    cfg = pool_config(fleet, pool, config)
    if not hidden:
        return decide(state, now, cfg, reasons)
    order = dict(state.pending)
    keys = (set(state.queues), set(state.unallocated_queues), set(state.sizes),
            set(state.unallocated_sizes), set(state.pending_allocated))
    saved = {w: (order[w], state.reservations.get(w)) for w in sorted(hidden)}
    for w in saved:
        state.unqueue(w)
    try:
        return decide(state, now, cfg, reasons)
    finally:
        for p, _ in saved.values():
            state.submit(p.spec, state.time, queued_at=p.queued_at)
        for w, (_, reservation) in saved.items():
            state.put_back(w, order, reservation, keys)


def _admitted(d: Decisions) -> set[str]:
    return ({s.workload for s in d.starts} | {r.workload for r in d.reservations}
            | {w.workload for w in d.checkpoint_waits})


def _offers(
    fleet: FleetState, result: Mapping[str, Decisions]
) -> dict[str, list[tuple[int, int, str, str]]]:
    """Work waiting in several pools -> the passes that admitted it, best first by
    (waits for victims, rank of the kind in its request, pool name, pool)."""
    out: dict[str, list[tuple[int, int, str, str]]] = {}
    for p, d in result.items():
        started = {s.workload for s in d.starts}
        kind = fleet.where(p)[1]
        for w in _admitted(d):
            if len(fleet.waits_in(w)) < 2:
                continue
            kinds = fleet.pools[p].pending[w].spec.gpu_kinds
            rank = kinds.index(kind) if kind in kinds else len(kinds)
            out.setdefault(w, []).append((0 if w in started else 1, rank, p, p))
    return out


def _merge(fleet: FleetState, result: Mapping[str, Decisions]) -> Decisions:
    """The pools' decisions (pool -> its pass's, in name order) as one, pool by pool. A
    workload some pool admits without starting it (it waits for victims to stop or
    checkpoint) has that pool's wait reason; one some pool starts has none; any other that
    of the first pool it waits in."""
    parts = list(result.values())
    started = {s.workload for d in parts for s in d.starts}
    admitted: set[str] = set()
    waiting: dict[str, WaitReason] = {}
    for d in parts:
        mine = _admitted(d)
        admitted |= mine
        for w, why in d.waiting.items():
            if w in mine and w not in started:
                waiting.setdefault(w, why)
    order: list[str] = []
    seen: set[str] = set()
    for d in parts:
        for w, why in d.waiting.items():
            if w not in admitted:
                waiting.setdefault(w, why)
        for w in d.order:
            if w not in seen:
                seen.add(w)
                order.append(w)
    return Decisions(
        starts=tuple(s for d in parts for s in d.starts),
        preemptions=tuple(x for d in parts for x in d.preemptions),
        host_changes=tuple(c for d in parts for c in d.host_changes),
        reservations=tuple(r for d in parts for r in d.reservations),
        order=tuple(order),
        waiting=waiting,
        timeouts=tuple(t for d in parts for t in d.timeouts),
        checkpoint_waits=tuple(w for d in parts for w in d.checkpoint_waits),
        recheck_at=min((d.recheck_at for d in parts if d.recheck_at is not None), default=None),
        pool_orders={p: d.order for p, d in result.items()},
    )


def advice(fleet: FleetState, now: float, config: PolicyConfig, workload: str) -> list[str]:
    """For pending ``workload``: the pools of kinds it does not ask for where the same
    request would start at this pass, as lines like ``waiting for a B200 host; H100 (in
    east) would start it now: --gpu-kind H100``. A pool its host list (``--nodelist``,
    ``--exclude``) leaves no host in is never named: the request changed as a line says
    is one :meth:`FleetState.validate` accepts. Pure (each try is undone)."""
    waits = fleet.waits_in(workload)
    spec = fleet.submitted(workload)
    queued_at = fleet.pools[waits[0]].pending[workload].queued_at
    asked = "/".join(spec.gpu_kinds) or "any"
    lines: list[str] = []
    for p, state in fleet.pools.items():
        cluster, kind = fleet.where(p)
        if p in waits or (spec.gpu_kinds and kind in spec.gpu_kinds and not spec.cluster):
            continue
        variant = replace(spec, gpu_kinds=(kind,), cluster=cluster if spec.cluster else "")
        if not fleet.accepts(variant, p):  # also: its host list leaves it hosts there
            continue
        local = fleet._local(variant, p)
        if _would_start(state, local, queued_at, now, pool_config(fleet, p, config)):
            flag = f"--gpu-kind {kind}" + (f" --cluster {cluster}" if spec.cluster else "")
            where = f" in {spec.cluster}" if spec.cluster else ""
            lines.append(
                f"waiting for {asked} GPUs{where}; {kind} in {cluster} would start it now "
                f"({flag})"
            )
    return lines


def _would_start(
    state: ClusterState, spec: WorkloadSpec, queued_at: float, now: float, config: PolicyConfig
) -> bool:
    order = dict(state.pending)
    keys = (set(state.queues), set(state.unallocated_queues), set(state.sizes),
            set(state.unallocated_sizes), set(state.pending_allocated))
    state.submit(spec, state.time, queued_at=queued_at)
    try:
        d = decide(state, now, config)
        return any(s.workload == spec.id for s in d.starts)
    finally:
        state.unqueue(spec.id)
        state.put_back(spec.id, order, None, keys)
