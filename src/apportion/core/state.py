"""The snapshot the policy decides on, kept up to date incrementally by a driver.

Both drivers (simulator and service) hold one :class:`ClusterState` and change it only
through the methods below, so both fold events into state the same way; :func:`decide`
only reads it. Indexes (pending work per budget in queue order and by shape, GPUs used,
free, stopping and unallocated per host, budgets and protection horizon per host, GPUs held
and work pending per budget node, the time-limit deadlines of running work, the work
rebalancing may take, the usage ledger) are maintained on each change so a pass never
rebuilds them from scratch. Every one is exposed read-only (a ``Mapping``, ``Set`` or
``Sequence`` property: mypy refuses a write through it); the answers ``decide`` works out
and keeps live apart in a :class:`DerivedCache`, the one thing a pass writes, which
:meth:`ClusterState.fingerprint` leaves out. The index oracle in tests/core rebuilds every
index and every kept answer from the work itself after every event of the driven tests.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from .ledger import UsageLedger
from .lifecycle import HOST_TRANSITIONS, check_transition
from .queueindex import GpusQueue
from .tree import BudgetTree, ancestors
from .types import (
    NO_SIZE,
    CoreError,
    Host,
    HostState,
    Pending,
    Placement,
    Running,
    WorkloadSpec,
)

QueueKey = tuple[int, float, str]
Shape = tuple[int, float]  # (gpus, min_runtime) of a request


class Released:
    """Allocated work past its minimum runtime and not stopping, as of one time: the work
    rebalancing may take. Per budget node (every ancestor of the work's leaf but the root):
    the GPUs it holds, its workloads by size, and the hosts it runs on, with counts."""

    __slots__ = ("_smallest", "by_size", "gpus", "hosts", "ids", "time")

    def __init__(self, time: float) -> None:
        self.time = time
        self.ids: set[str] = set()
        self.gpus: dict[str, int] = {}
        self.by_size: dict[str, dict[int, int]] = {}  # node -> {gpus of a workload: count}
        self.hosts: dict[str, dict[str, int]] = {}  # node -> {host: workloads there}
        self._smallest: dict[str, int] = {}  # kept until the node's work changes

    def add(self, r: Running) -> None:
        if r.spec.id not in self.ids:
            self.ids.add(r.spec.id)
            self._count(r, 1)

    def remove(self, r: Running) -> None:
        if r.spec.id in self.ids:
            self.ids.discard(r.spec.id)
            self._count(r, -1)

    def _count(self, r: Running, one: int) -> None:
        held = r.gpus_held
        for node in ancestors(r.spec.budget)[:-1]:
            self._smallest.pop(node, None)
            self.gpus[node] = self.gpus.get(node, 0) + one * held
            sizes = self.by_size.setdefault(node, {})
            sizes[held] = sizes.get(held, 0) + one
            if not sizes[held]:
                del sizes[held]
            on = self.hosts.setdefault(node, {})
            for s in r.placement:
                on[s.host] = on.get(s.host, 0) + one
                if not on[s.host]:
                    del on[s.host]

    def smallest(self, node: str) -> int:
        """GPUs of the smallest such workload under ``node`` (a large number if none)."""
        least = self._smallest.get(node)
        if least is None:
            sizes = self.by_size.get(node)
            least = self._smallest[node] = min(sizes) if sizes else NO_SIZE
        return least


class DerivedCache:
    """Answers worked out from a :class:`ClusterState` on demand and kept until a change the
    state makes them stale (the only part of a state that :func:`~apportion.core.decide`
    writes): each queue's smallest shapes and its work by GPU count (for the pass to skip
    what cannot start, :mod:`apportion.core.queueindex`), the smallest unallocated
    requests, and the work released by the latest time asked about, with the heap of
    protection ends that advances it, and the budgets on each host as a set (for
    whole-host searches). Every one is derived: the index oracle of the tests
    rebuilds each from the work after every event, and :meth:`ClusterState.fingerprint`
    leaves this object out."""

    __slots__ = (
        "budget_sets", "by_gpus", "protections", "released", "smallest", "smallest_unallocated",
        "within",
    )

    def __init__(self) -> None:
        # leaf -> see ClusterState.gpus_queues; kept up to date as the leaf's allocated work
        # is queued and leaves
        self.by_gpus: dict[str, dict[int, GpusQueue]] = {}
        # leaf -> see ClusterState.smallest_shapes; dropped when a shape joining or leaving
        # the leaf's pending work changes it
        self.smallest: dict[str, list[Shape]] = {}
        self.smallest_unallocated: tuple[int, int] | None = None
        # allocated running work by when its protection ends, and what is released by the
        # time last asked (see ClusterState.released): kept as work starts and leaves,
        # advanced as the policy asks about later times
        self.protections: list[tuple[float, float, str]] = []  # (until, started_at, id)
        self.released = Released(float("-inf"))
        # host -> see ClusterState.budget_set; dropped when the host's budgets change
        self.budget_sets: dict[str, frozenset[str]] = {}
        # (GPUs, minimum runtime) -> see ClusterState.leaves_within; kept up to date leaf
        # by leaf as a leaf's shapes change
        self.within: dict[tuple[int, float], set[str]] = {}


def _has_within(sizes: Mapping[Shape, int], gpus: int, min_runtime: float) -> bool:
    """Is some shape among ``sizes`` of at most ``gpus`` GPUs and ``min_runtime``? A loop,
    not ``any`` over a generator: compiled, a generator is an object built per call."""
    for g, m in sizes:  # noqa: SIM110
        if g <= gpus and m <= min_runtime:
            return True
    return False


def queue_key(spec: WorkloadSpec) -> QueueKey:
    """Order inside one budget: higher priority first, then earlier submission, then id."""
    return (-spec.priority, spec.submit_time, spec.id)


class ClusterState:
    """Budgets, hosts, running and pending work, and usage: what ``decide`` reads."""

    def __init__(
        self,
        tree: BudgetTree,
        hosts: Iterable[Host] = (),
        start: float = 0.0,
        ledger_keep: float = 30 * 86400.0,
        ledger: UsageLedger | None = None,
        billing: float = 1.0,
    ) -> None:
        self._tree = tree
        # one pool of a fleet (core.fleet) shares the fleet's ledger and charges it
        # ``billing`` units per GPU-second; alone, a state keeps its own ledger in GPU-seconds
        self._billing = billing
        self._hosts: dict[str, Host] = {}
        self._running: dict[str, Running] = {}
        self._pending: dict[str, Pending] = {}
        # leaf -> pending ids in queue order, allocated and unallocated kept apart because
        # the policy considers all allocated work before any unallocated work
        self._queues: dict[str, list[tuple[QueueKey, str]]] = {}
        self._unallocated_queues: dict[str, list[tuple[QueueKey, str]]] = {}
        # leaf -> {(gpus, min_runtime): count} of its pending allocated (and, apart,
        # unallocated) work, so a pass can tell at once that nothing left in a budget's queue
        # can succeed
        self._sizes: dict[str, dict[Shape, int]] = {}
        self._unallocated_sizes: dict[str, dict[Shape, int]] = {}
        # budget node (and root) -> pending allocated workloads in its subtree
        self._pending_allocated: dict[str, int] = {}
        self._stopping: set[str] = set()  # running ids whose preemption was issued
        self._reservations: dict[str, tuple[str, ...]] = {}  # pending id -> hosts freed for it
        # pending id -> (its queued_at, until, victims) of the last checkpoint wait decided
        # for it (see checkpoints_awaited)
        self._awaited: dict[str, tuple[float, float, frozenset[str]]] = {}
        self._used: dict[str, int] = {}  # host -> GPUs held
        self._free: dict[str, int] = {}  # host -> GPUs not held (whatever the host's state)
        self._stopping_gpus: dict[str, int] = {}  # host -> GPUs held by stopping work
        # host -> GPUs held by unallocated work not stopping: victims anyone may take
        self._unallocated_used: dict[str, int] = {}
        # hosts holding no allocated work that is not stopping: any workload may empty them
        self._no_allocated: set[str] = set()
        self._idle: set[str] = set()  # hosts where nothing runs
        # the most hosts each of the two sets above held since it was last copied (_compact)
        self._peak_no_allocated = 0
        self._peak_idle = 0
        # host -> {budget: its allocated workloads there, not stopping}
        self._budgets_on: dict[str, dict[str, int]] = {}
        # budget node (and root) -> GPUs its allocated work holds, not stopping
        self._held: dict[str, int] = {}
        self._on_host: dict[str, set[str]] = {}  # host -> running ids
        self._running_of: dict[str, set[str]] = {}  # leaf -> its running allocated ids
        # running id -> when its time limit ends (only work that has one): what a pass
        # reads to stop work at its limit without looking at all running work
        self._deadlines: dict[str, float] = {}
        # host -> when the last protection of work on it (not stopping) ends
        self._protected_until: dict[str, float] = {}
        self._ledger = UsageLedger(start, keep=ledger_keep) if ledger is None else ledger
        self._cache = DerivedCache()
        # derived from hosts, rebuilt when one changes: what every pass reads first
        self._schedulable: dict[str, int] = {}  # name -> GPUs of hosts taking work, by name
        self._schedulable_names: list[str] = []
        self._unschedulable: list[str] = []  # the others (draining, in repair, down)
        self._draining: list[str] = []
        self._max_host_gpus = 0  # of any host, whatever its state: the shape rule's limit
        self._total_gpus = 0  # of all hosts, whatever their state
        self._healthy = 0
        # GPUs free -> the hosts taking work with that many free (none: no entry): what a
        # best-fit search reads instead of looking at every host
        self._free_hosts: dict[int, set[str]] = {}
        # GPUs free, stopping or held by unallocated work not stopping -> the hosts taking
        # work with that many: what a search for unallocated victims reads likewise
        self._open_hosts: dict[int, set[str]] = {}
        # GPUs free or stopping, summed over every host: what a pass's bound on the GPUs
        # it could hand out starts from, without adding up every host's counts each pass
        self._free_or_stopping = 0
        self._time = start
        for h in hosts:
            self._add_host(h, start)
        self._index_hosts()  # once for all of them, not once per host

    def set_tree(self, tree: BudgetTree) -> None:
        """Swap in a changed budget tree (weights, new nodes). Usage history is kept; every
        budget that has queued or running work must still be a leaf."""
        for spec in [p.spec for p in self._pending.values()] + [
            r.spec for r in self._running.values()
        ]:
            if not tree.is_leaf(spec.budget):
                raise CoreError(
                    f"budget {spec.budget!r}: workload {spec.id} draws on it, it must stay a leaf"
                )
        self._tree = tree

    # ---- hosts -----------------------------------------------------------------------
    def add_host(self, host: Host, t: float) -> None:
        self._add_host(host, t)
        self._index_hosts()

    def _add_host(self, host: Host, t: float) -> None:
        """Add ``host`` to every per-host count; the caller rebuilds the host indexes."""
        if host.name in self._hosts:
            raise CoreError(f"host {host.name}: name: duplicate")
        self._tick(t)
        self._hosts[host.name] = host
        self._used[host.name] = 0
        self._free[host.name] = host.gpus
        self._free_or_stopping += host.gpus
        self._stopping_gpus[host.name] = 0
        self._no_allocated.add(host.name)
        self._idle.add(host.name)
        self._budgets_on[host.name] = {}
        self._unallocated_used[host.name] = 0
        self._on_host[host.name] = set()
        self._protected_until[host.name] = float("-inf")
        if host.state is HostState.HEALTHY:
            self._ledger.change_capacity(host.gpus * self._billing, t)

    def set_host_state(self, name: str, state: HostState, t: float) -> Host:
        host = self._host(name)
        check_transition(HOST_TRANSITIONS, "host", name, host.state, state)
        self._tick(t)
        was, now = host.state is HostState.HEALTHY, state is HostState.HEALTHY
        if was != now:
            self._ledger.change_capacity((host.gpus if now else -host.gpus) * self._billing, t)
        new = Host(host.name, host.gpus, state)
        self._file(name, -1)  # the other hosts' free GPUs are filed as they were
        self._hosts[name] = new
        self._index_hosts(refile=False)
        self._file(name, 1)
        return new

    def _index_hosts(self, refile: bool = True) -> None:
        """Rebuild what is derived from the hosts; ``refile``: file every host taking work
        under its free GPUs afresh (else the caller files the one host that changed)."""
        names = sorted(n for n, h in self._hosts.items() if h.schedulable)
        self._schedulable = {n: self._hosts[n].gpus for n in names}
        self._schedulable_names = names
        self._draining = sorted(n for n, h in self._hosts.items() if h.state is HostState.DRAINING)
        self._unschedulable = sorted(n for n, h in self._hosts.items() if not h.schedulable)
        self._max_host_gpus = max((h.gpus for h in self._hosts.values()), default=0)
        self._total_gpus = sum(h.gpus for h in self._hosts.values())
        if refile:
            self._free_hosts, self._open_hosts = {}, {}
            for n in names:
                self._file(n, 1)
        self._cache.smallest.clear()  # they split shapes by the largest host
        self._cache.smallest_unallocated = None
        self._healthy = sum(h.gpus for h in self._hosts.values() if h.state is HostState.HEALTHY)

    def _host(self, name: str) -> Host:
        try:
            return self._hosts[name]
        except KeyError:
            raise CoreError(f"host {name!r}: unknown host") from None

    # ---- workloads -------------------------------------------------------------------
    def submit(
        self,
        spec: WorkloadSpec,
        t: float,
        queued_at: float | None = None,
        restarted: bool = False,
    ) -> Pending:
        """Queue a new (or requeued: ``restarted``) workload. The caller validated it (see
        ``validate``)."""
        if spec.id in self._pending or spec.id in self._running:
            raise CoreError(f"workload {spec.id}: id: already queued or running")
        self._tree.require_leaf(spec.budget)
        self._tick(t)
        p = Pending(spec, t if queued_at is None else queued_at, restarted)
        self._pending[spec.id] = p
        entry = (queue_key(spec), spec.id)
        insort(self._queue_of(spec).setdefault(spec.budget, []), entry)
        sizes = self._sizes_of(spec).setdefault(spec.budget, {})
        shape = (spec.gpus, spec.min_runtime)
        sizes[shape] = sizes.get(shape, 0) + 1
        if sizes[shape] == 1:
            self._shapes_changed(spec)
        if spec.allocated:
            self._count_pending(spec.budget, 1)
            self._queued_by_gpus(spec, entry)
        return p

    def _queue_of(self, spec: WorkloadSpec) -> dict[str, list[tuple[QueueKey, str]]]:
        return self._queues if spec.allocated else self._unallocated_queues

    def _sizes_of(self, spec: WorkloadSpec) -> dict[str, dict[Shape, int]]:
        return self._sizes if spec.allocated else self._unallocated_sizes

    def put_back(
        self,
        workload: str,
        order: Mapping[str, Pending],
        reservation: tuple[str, ...] | None,
        keys: Sequence[AbstractSet[str]],
    ) -> None:
        """Undo a what-if swap of one pending request (core.explain's advice), once the
        caller has queued the original request again: the pending work in ``order``, the
        workload's ``reservation``, and the queue and size indexes holding only the budget
        ``keys`` they had before (queues, unallocated queues, sizes, unallocated sizes,
        pending allocated, in that order)."""
        self._pending.clear()
        self._pending.update(order)
        if reservation is not None:
            self._reservations[workload] = reservation
        tables: tuple[dict[str, object], ...] = (
            self._queues, self._unallocated_queues,  # type: ignore[assignment]
            self._sizes, self._unallocated_sizes, self._pending_allocated,
        )
        for table, had in zip(tables, keys, strict=True):
            for key in [k for k in table if k not in had]:
                del table[key]
        self._cache.by_gpus.clear()  # the queues are the original's again
        self._cache.within.clear()

    def unqueue(self, workload: str) -> Pending:
        """Take a pending workload out of the queue (to start it, or because it was cancelled)."""
        p = self._pending.pop(workload, None)
        if p is None:
            raise CoreError(f"workload {workload}: not pending")
        self._reservations.pop(workload, None)
        entry = (queue_key(p.spec), workload)
        queue = self._queue_of(p.spec)[p.spec.budget]
        del queue[bisect_left(queue, entry)]  # in order (insort), so found by bisection
        sizes = self._sizes_of(p.spec)[p.spec.budget]
        shape = (p.spec.gpus, p.spec.min_runtime)
        sizes[shape] -= 1
        if not sizes[shape]:
            del sizes[shape]
            self._shapes_changed(p.spec)
        if p.spec.allocated:
            self._count_pending(p.spec.budget, -1)
            self._unqueued_by_gpus(p.spec, entry)
        return p

    def _queued_by_gpus(self, spec: WorkloadSpec, entry: tuple[QueueKey, str]) -> None:
        """Keep the leaf's :meth:`gpus_queues`, if asked for already, as ``spec`` joins."""
        kept = self._cache.by_gpus.get(spec.budget)
        if kept is None:
            return
        sub = kept.get(spec.gpus)
        if sub is not None:
            sub.add(entry, spec.min_runtime)
            return
        kept[spec.gpus] = GpusQueue([(entry, spec.min_runtime)])
        if max(kept) != spec.gpus:  # a new GPU count below another: by GPU count again
            self._cache.by_gpus[spec.budget] = dict(sorted(kept.items()))

    def _unqueued_by_gpus(self, spec: WorkloadSpec, entry: tuple[QueueKey, str]) -> None:
        """Keep the leaf's :meth:`gpus_queues`, if asked for already, as ``spec`` leaves."""
        kept = self._cache.by_gpus.get(spec.budget)
        if kept is None:
            return
        sub = kept.get(spec.gpus)
        if sub is None:  # never while the kept answers are right: rebuilt when next asked
            del self._cache.by_gpus[spec.budget]
            return
        sub.discard(entry)
        if not sub.live:
            del kept[spec.gpus]

    def _count_pending(self, budget: str, one: int) -> None:
        counts = self._pending_allocated
        for node in ancestors(budget):
            counts[node] = counts.get(node, 0) + one

    def _shapes_changed(self, spec: WorkloadSpec) -> None:
        """``spec``'s shape is new to its budget's pending work, or has just left it."""
        if spec.allocated:
            leaf = spec.budget
            sizes = self._sizes.get(leaf)
            kept = self._cache.smallest.get(leaf)
            if kept is not None and self._moves_smallest(kept, spec, sizes):
                del self._cache.smallest[leaf]
            for (gpus, min_runtime), leaves in self._cache.within.items():
                if sizes and _has_within(sizes, gpus, min_runtime):
                    leaves.add(leaf)
                else:
                    leaves.discard(leaf)
        else:
            self._cache.smallest_unallocated = None

    def _moves_smallest(
        self, kept: list[Shape], spec: WorkloadSpec, sizes: Mapping[Shape, int] | None
    ) -> bool:
        """Does ``spec``'s shape joining or leaving ``sizes`` change :meth:`smallest_shapes`
        as ``kept``? Not if it joins where a kept shape of its kind is no larger and no
        longer (it is not one of them, and it hides none: that one hides them already), nor
        if it leaves without being one of them (whatever it hid, a kept one hides)."""
        shape = (spec.gpus, spec.min_runtime)
        if sizes is None or shape not in sizes:  # it left
            return shape in kept
        multi = spec.gpus > self._max_host_gpus
        for gpus, min_runtime in kept:
            if (gpus > self._max_host_gpus) == multi and gpus <= spec.gpus \
                    and min_runtime <= spec.min_runtime:
                return False
        return True

    def start(self, workload: str, placement: Placement, t: float) -> Running:
        """Pending -> running on ``placement``. Refuses to over-commit a host."""
        self._tick(t)
        p = self._pending.get(workload)
        if p is None:
            raise CoreError(f"workload {workload}: not pending")
        for s in placement:
            host = self._host(s.host)
            if self._used[s.host] + s.gpus > host.gpus:
                raise CoreError(f"host {s.host}: over-commit by workload {workload}")
            if not host.schedulable:
                raise CoreError(f"host {s.host}: is {host.state.value}, takes no new work")
        self.unqueue(workload)
        self._awaited.pop(workload, None)
        r = Running(p.spec, placement, t, restarted=p.restarted)
        self._running[workload] = r
        for s in placement:
            self._file(s.host, -1)
            self._used[s.host] += s.gpus
            self._free[s.host] -= s.gpus
            self._free_or_stopping -= s.gpus
            self._idle.discard(s.host)
            if not p.spec.allocated:
                self._unallocated_used[s.host] += s.gpus
            else:
                self._no_allocated.discard(s.host)
                self._count_budget(s.host, p.spec.budget, 1)
            self._file(s.host, 1)
            self._on_host[s.host].add(workload)
            until = r.protected_until()
            if until > self._protected_until[s.host]:
                self._protected_until[s.host] = until
        if p.spec.allocated:
            self._count_held(p.spec.budget, r.gpus_held)
            self._running_of.setdefault(p.spec.budget, set()).add(workload)
        if p.spec.time_limit > 0:
            self._deadlines[workload] = t + p.spec.time_limit
        self._ledger.change(
            p.spec.budget, r.gpus_held * self._billing, t, charged=p.spec.allocated
        )
        if p.spec.allocated:
            until = r.protected_until()
            if until <= self._cache.released.time:
                self._cache.released.add(r)
            else:
                heapq.heappush(self._cache.protections, (until, t, workload))
        self._compact()
        return r

    def _compact(self) -> None:
        """Copy the idle or no-allocated hosts' set once it holds a quarter of the most it
        held since it was last copied. A set never gives back its table: one that held
        every idle host of a new cluster and holds a few now is iterated slot by slot, and
        passes iterate both (whole free hosts, hosts only unallocated work fills)."""
        idle, no_allocated = len(self._idle), len(self._no_allocated)
        self._peak_idle = max(self._peak_idle, idle)
        self._peak_no_allocated = max(self._peak_no_allocated, no_allocated)
        if 4 * idle < self._peak_idle:
            self._idle = set(self._idle)
            self._peak_idle = idle
        if 4 * no_allocated < self._peak_no_allocated:
            self._no_allocated = set(self._no_allocated)
            self._peak_no_allocated = no_allocated

    def reserve(self, workload: str, hosts: tuple[str, ...]) -> None:
        """Record that GPUs on ``hosts`` are being freed for pending ``workload``
        (a :class:`~apportion.core.types.Reservation` decision). Dropped when it starts or
        leaves the queue."""
        if workload not in self._pending:
            raise CoreError(f"workload {workload}: not pending, cannot hold a reservation")
        for h in hosts:
            self._host(h)
        self._reservations[workload] = tuple(hosts)

    def await_checkpoints(self, workload: str, until: float, victims: Iterable[str]) -> None:
        """Record that pending ``workload``'s rebalance waits until ``until`` for the
        checkpoints of ``victims`` (a :class:`~apportion.core.types.CheckpointWait`
        decision): see :meth:`checkpoints_awaited`. Kept while it stays queued from the same
        time (a what-if swap that takes it out and puts it back keeps it); a requeue makes
        a new wait."""
        p = self._pending.get(workload)
        if p is None:
            raise CoreError(f"workload {workload}: not pending, cannot wait for checkpoints")
        self._awaited[workload] = (p.queued_at, until, frozenset(victims))
        if len(self._awaited) > 2 * len(self._pending) + 16:  # drop the cancelled ones' waits
            self._awaited = {w: a for w, a in self._awaited.items() if w in self._pending}

    def checkpoints_awaited(self, workload: str, now: float) -> AbstractSet[str]:
        """The victims pending ``workload`` has already waited for, once that wait is over
        at ``now``: their checkpoint came (or should have) while it waited, so a pass then
        takes them without waiting for their next one. A driver's pass comes a little
        after the moment it was asked for (the service's wall clock, every ``interval_s``),
        when such a victim has a few seconds of progress at risk again; waiting for its
        next checkpoint would only put the rebalance off by a whole interval, again and
        again, until the share guarantee's bound."""
        kept = self._awaited.get(workload)
        if kept is None:
            return frozenset()
        queued_at, until, victims = kept
        p = self._pending.get(workload)
        if p is None or p.queued_at != queued_at or now < until:
            return frozenset()
        return victims

    def mark_stopping(self, workload: str) -> Running:
        r = self._running_one(workload)
        if workload in self._stopping:
            return r
        new = Running(
            r.spec, r.placement, r.started_at, stopping=True, restarted=r.restarted,
            checkpointed_at=r.checkpointed_at,
        )
        self._running[workload] = new
        self._stopping.add(workload)
        self._cache.released.remove(r)
        for s in r.placement:
            self._file(s.host, -1)
            self._stopping_gpus[s.host] += s.gpus
            self._free_or_stopping += s.gpus
            if not r.spec.allocated:
                self._unallocated_used[s.host] -= s.gpus
            else:
                self._count_budget(s.host, r.spec.budget, -1)
            self._file(s.host, 1)
            self._count_allocated(s.host)
        if r.spec.allocated:
            self._count_held(r.spec.budget, -r.gpus_held)
        self._refresh_protection(r)
        return new

    def finish(self, workload: str, t: float, ended_at: float | None = None) -> Running:
        """Running -> gone (completed, failed, cancelled, preempted, lost). Stops charging.
        ``ended_at`` (no later than ``t``): when it really ended, for a driver that learns
        of an exit after its clock moved on: it is charged up to then (never before its
        start), everything else changes at ``t``."""
        self._tick(t)
        r = self._running.pop(workload, None)
        if r is None:
            raise CoreError(f"workload {workload}: not running")
        was_stopping = workload in self._stopping
        self._stopping.discard(workload)
        self._deadlines.pop(workload, None)
        self._cache.released.remove(r)
        for s in r.placement:
            self._file(s.host, -1)
            self._used[s.host] -= s.gpus
            self._free[s.host] += s.gpus
            if not self._used[s.host]:
                self._idle.add(s.host)
            if was_stopping:  # its GPUs were counted stopping when it began to stop
                self._stopping_gpus[s.host] -= s.gpus
            else:
                self._free_or_stopping += s.gpus
                if not r.spec.allocated:
                    self._unallocated_used[s.host] -= s.gpus
                else:
                    self._count_budget(s.host, r.spec.budget, -1)
            self._file(s.host, 1)
            self._count_allocated(s.host)
            self._on_host[s.host].discard(workload)
        if r.spec.allocated and not was_stopping:
            self._count_held(r.spec.budget, -r.gpus_held)
        if r.spec.allocated:
            of = self._running_of[r.spec.budget]
            of.discard(workload)
            if not of:
                del self._running_of[r.spec.budget]
        self._refresh_protection(r)
        units = r.gpus_held * self._billing
        self._ledger.change(r.spec.budget, -units, t, charged=r.spec.allocated)
        if ended_at is not None and ended_at < t:
            self._ledger.amend(r.spec.budget, -units, max(ended_at, r.started_at), t,
                               charged=r.spec.allocated)
        return r

    def requeue(self, workload: str, t: float, ended_at: float | None = None) -> Pending:
        """Running -> pending again (resumable preemption, host failure). Keeps its place.
        ``ended_at`` as for :meth:`finish`; it is queued again from then."""
        r = self.finish(workload, t, ended_at)
        return self.submit(r.spec, t, queued_at=ended_at, restarted=True)

    def checkpoint(self, workload: str, t: float) -> Running:
        """A running workload reported a checkpoint written at ``t``: what a preemption would
        lose is counted from there (see :meth:`Running.at_risk`)."""
        r = self._running_one(workload)
        if t < r.started_at:
            raise CoreError(
                f"workload {workload}: checkpoint at {t:g} is before its run began "
                f"({r.started_at:g})"
            )
        new = Running(
            r.spec, r.placement, r.started_at, stopping=r.stopping, restarted=r.restarted,
            checkpointed_at=t,
        )
        self._running[workload] = new
        return new

    def _file(self, host: str, one: int) -> None:
        """File (``one`` = 1) or unfile (-1) ``host`` under its free GPUs and under its free,
        stopping and unallocated GPUs, if it takes work: after and before they change."""
        if host not in self._schedulable:
            return
        free = self._free[host]
        _file_under(self._free_hosts, free, host, one)
        _file_under(
            self._open_hosts,
            free + self._stopping_gpus[host] + self._unallocated_used[host], host, one,
        )

    def _count_held(self, budget: str, gpus: int) -> None:
        held = self._held
        for node in ancestors(budget):
            held[node] = held.get(node, 0) + gpus

    def _count_budget(self, host: str, budget: str, one: int) -> None:
        self._cache.budget_sets.pop(host, None)
        on = self._budgets_on[host]
        on[budget] = on.get(budget, 0) + one
        if not on[budget]:
            del on[budget]

    def _count_allocated(self, host: str) -> None:
        allocated = self._used[host] - self._unallocated_used[host] - self._stopping_gpus[host]
        if allocated:
            self._no_allocated.discard(host)
        else:
            self._no_allocated.add(host)

    def _refresh_protection(self, gone: Running) -> None:
        """Recompute the protection horizon of the hosts ``gone`` ran on (it left or stops)."""
        for s in gone.placement:
            self._protected_until[s.host] = max(
                (
                    self._running[w].protected_until()
                    for w in self._on_host[s.host]
                    if w not in self._stopping
                ),
                default=float("-inf"),
            )

    def _running_one(self, workload: str) -> Running:
        try:
            return self._running[workload]
        except KeyError:
            raise CoreError(f"workload {workload}: not running") from None

    def advance(self, t: float) -> None:
        """Move the clock to ``t`` with nothing else changing (never back)."""
        self._tick(t)

    def _tick(self, t: float) -> None:
        if t < self._time:
            raise CoreError(f"state: time went backwards ({t} < {self._time})")
        self._time = t

    # ---- views -----------------------------------------------------------------------
    def released(self, now: float) -> Released:
        """Allocated work past its minimum runtime at ``now`` and not stopping (read only).
        Protection only ends as time passes, so for a time no earlier than the last asked
        this moves the work whose protection ended since; for an earlier time it is rebuilt.
        Either way it changes nothing ``decide`` decides on (it is not in
        :meth:`fingerprint`): it is the same whatever was asked before."""
        if now < self._cache.released.time:
            self._restart_released()
        index = self._cache.released
        heap = self._cache.protections
        while heap and heap[0][0] <= now:
            _, started_at, wid = heapq.heappop(heap)
            r = self._running.get(wid)
            if r is not None and r.started_at == started_at and wid not in self._stopping:
                index.add(r)
        index.time = now
        return index

    def _restart_released(self) -> None:
        """Released work as of no time at all: every allocated workload not stopping waits
        in the heap of protection ends."""
        self._cache.released = Released(float("-inf"))
        self._cache.protections = [
            (r.protected_until(), r.started_at, wid)
            for wid, r in self._running.items()
            if r.spec.allocated and wid not in self._stopping
        ]
        heapq.heapify(self._cache.protections)

    def smallest_shapes(self, leaf: str) -> list[Shape]:
        """The shapes of ``leaf``'s pending allocated work that no other of the same kind
        (one host, or whole hosts: larger than the largest host) is both smaller and
        shorter than, smallest first (read only). A request failing by size and charge
        fails for every shape such a one is smaller and shorter than, so these decide
        whether a whole queue is hopeless: a handful, however many lengths it holds."""
        shapes = self._cache.smallest.get(leaf)
        if shapes is None:
            shapes = []
            shortest = {False: float("inf"), True: float("inf")}  # so far, per kind
            for gpus, min_runtime in sorted(self._sizes.get(leaf, ())):
                multi = gpus > self._max_host_gpus
                if min_runtime < shortest[multi]:
                    shortest[multi] = min_runtime
                    shapes.append((gpus, min_runtime))
            self._cache.smallest[leaf] = shapes
        return shapes

    def leaves_within(self, gpus: int, min_runtime: float) -> AbstractSet[str]:
        """The leaves with pending allocated work of at most ``gpus`` GPUs and at most
        ``min_runtime`` minimum runtime (read only): the debug lane's budgets, found without
        looking at every leaf each pass. Built when first asked for these bounds, then kept
        up to date as each leaf's shapes change."""
        key = (gpus, min_runtime)
        kept = self._cache.within.get(key)
        if kept is None:
            kept = self._cache.within[key] = {
                leaf for leaf, sizes in self._sizes.items()
                if _has_within(sizes, gpus, min_runtime)
            }
        return kept

    def gpus_queues(self, leaf: str) -> Mapping[int, GpusQueue]:
        """``leaf``'s pending allocated work by GPU count, each in queue order (read only;
        see :mod:`apportion.core.queueindex`). Built when first asked, then kept up to date
        as the leaf's allocated work is queued and leaves (a submission, a start, a
        cancellation), not rebuilt from the queue each time."""
        kept = self._cache.by_gpus.get(leaf)
        if kept is None:
            grouped: dict[int, list[tuple[tuple[QueueKey, str], float]]] = {}
            pending = self._pending
            for entry in self._queues.get(leaf, ()):
                spec = pending[entry[1]].spec
                grouped.setdefault(spec.gpus, []).append((entry, spec.min_runtime))
            kept = self._cache.by_gpus[leaf] = {
                gpus: GpusQueue(items) for gpus, items in sorted(grouped.items())
            }
        return kept

    def budget_set(self, host: str) -> frozenset[str]:
        """The budgets of the allocated work on ``host`` (not stopping), as a set (read
        only): what a whole-host search asks of every host it could empty. Kept until work
        of a budget starts on the host or leaves it (or stops), not rebuilt each pass."""
        kept = self._cache.budget_sets.get(host)
        if kept is None:
            kept = self._cache.budget_sets[host] = frozenset(self._budgets_on[host])
        return kept

    def smallest_unallocated(self) -> tuple[int, int]:
        """GPUs of the smallest pending unallocated request that fits on one host, and of the
        smallest that needs whole hosts (``NO_SIZE`` where there is none)."""
        if self._cache.smallest_unallocated is None:
            single, multi = NO_SIZE, NO_SIZE
            for sizes in self._unallocated_sizes.values():
                for gpus, _ in sizes:
                    if gpus > self._max_host_gpus:
                        multi = min(multi, gpus)
                    else:
                        single = min(single, gpus)
            self._cache.smallest_unallocated = (single, multi)
        return self._cache.smallest_unallocated

    def forget_derived(self) -> None:
        """Drop every answer the :class:`DerivedCache` keeps, as if none had been asked: the
        next reader works each out afresh from the indexes. Changes no decision (tests
        compare a pass on kept answers with one on fresh ones)."""
        self._cache = DerivedCache()
        self._restart_released()

    def healthy_gpus(self) -> int:
        return self._healthy

    def free_or_stopping_gpus(self) -> int:
        """GPUs free or held by stopping work on the hosts taking work."""
        total = self._free_or_stopping
        for name in self._unschedulable:  # the few hosts taking no work
            total -= self._free[name] + self._stopping_gpus[name]
        return total

    def fingerprint(self) -> dict[str, object]:
        """Everything the state holds but its :class:`DerivedCache`, as plain values, by
        attribute: equal before and after a pass (``decide`` may write only the cache)."""
        return {
            "tree": _plain(self._tree.as_dict()),
            "billing": self._billing,
            "hosts": _plain(self._hosts),
            "running": _plain(self._running),
            "pending": _plain(self._pending),
            "queues": _plain(self._queues),
            "unallocated_queues": _plain(self._unallocated_queues),
            "sizes": _plain(self._sizes),
            "unallocated_sizes": _plain(self._unallocated_sizes),
            "pending_allocated": _plain(self._pending_allocated),
            "stopping": _plain(self._stopping),
            "reservations": _plain(self._reservations),
            "awaited": _plain(self._awaited),
            "used": _plain(self._used),
            "free": _plain(self._free),
            "stopping_gpus": _plain(self._stopping_gpus),
            "unallocated_used": _plain(self._unallocated_used),
            "no_allocated": _plain(self._no_allocated),
            "idle": _plain(self._idle),
            "peak_no_allocated": self._peak_no_allocated,
            "peak_idle": self._peak_idle,
            "budgets_on": _plain(self._budgets_on),
            "held": _plain(self._held),
            "on_host": _plain(self._on_host),
            "running_of": _plain(self._running_of),
            "protected_until": _plain(self._protected_until),
            "deadlines": _plain(self._deadlines),
            "ledger": self._ledger.fingerprint(),
            "schedulable": _plain(self._schedulable),
            "schedulable_names": _plain(self._schedulable_names),
            "unschedulable": _plain(self._unschedulable),
            "draining": _plain(self._draining),
            "max_host_gpus": self._max_host_gpus,
            "total_gpus": self._total_gpus,
            "free_hosts": _plain(self._free_hosts),
            "open_hosts": _plain(self._open_hosts),
            "free_or_stopping": self._free_or_stopping,
            "healthy": self._healthy,
            "time": self._time,
        }

    # ---- read-only views of the indexes (written only by the methods above) -----------
    @property
    def tree(self) -> BudgetTree:
        return self._tree

    @property
    def time(self) -> float:
        """The latest time the state was changed at, or moved to by :meth:`advance`."""
        return self._time

    @property
    def billing(self) -> float:
        """Units charged per GPU-second on this state's hosts (1 but in a fleet's pools)."""
        return self._billing

    @property
    def ledger(self) -> UsageLedger:
        """Usage over time; changed only by the state's methods (drivers call no ``change``)."""
        return self._ledger

    @property
    def derived(self) -> DerivedCache:
        """The answers the state keeps for ``decide`` (see :class:`DerivedCache`)."""
        return self._cache

    @property
    def hosts(self) -> Mapping[str, Host]:
        return self._hosts

    @property
    def running(self) -> Mapping[str, Running]:
        return self._running

    @property
    def pending(self) -> Mapping[str, Pending]:
        return self._pending

    @property
    def queues(self) -> Mapping[str, Sequence[tuple[QueueKey, str]]]:
        """Leaf -> its pending allocated work in queue order (:func:`queue_key`)."""
        return self._queues

    @property
    def unallocated_queues(self) -> Mapping[str, Sequence[tuple[QueueKey, str]]]:
        return self._unallocated_queues

    @property
    def sizes(self) -> Mapping[str, Mapping[Shape, int]]:
        """Leaf -> {(gpus, min_runtime): count} of its pending allocated work."""
        return self._sizes

    @property
    def unallocated_sizes(self) -> Mapping[str, Mapping[Shape, int]]:
        return self._unallocated_sizes

    @property
    def pending_allocated(self) -> Mapping[str, int]:
        """Budget node (and root) -> pending allocated workloads in its subtree."""
        return self._pending_allocated

    @property
    def stopping(self) -> AbstractSet[str]:
        """Running work whose preemption was issued."""
        return self._stopping

    @property
    def awaited(self) -> Mapping[str, tuple[float, float, frozenset[str]]]:
        """Workload -> (its queued_at, until, victims) of the last checkpoint wait recorded
        for it (:meth:`await_checkpoints`); read it through :meth:`checkpoints_awaited`."""
        return self._awaited

    @property
    def reservations(self) -> Mapping[str, tuple[str, ...]]:
        """Pending workload -> the hosts being freed for it."""
        return self._reservations

    @property
    def used(self) -> Mapping[str, int]:
        return self._used

    @property
    def free(self) -> Mapping[str, int]:
        """Host -> GPUs not held, whatever the host's state."""
        return self._free

    @property
    def stopping_gpus(self) -> Mapping[str, int]:
        return self._stopping_gpus

    @property
    def unallocated_used(self) -> Mapping[str, int]:
        """Host -> GPUs held by unallocated work not stopping."""
        return self._unallocated_used

    @property
    def no_allocated(self) -> AbstractSet[str]:
        """Hosts holding no allocated work that is not stopping."""
        return self._no_allocated

    @property
    def idle(self) -> AbstractSet[str]:
        """Hosts where nothing runs."""
        return self._idle

    @property
    def budgets_on(self) -> Mapping[str, Mapping[str, int]]:
        """Host -> {budget: its allocated workloads there, not stopping}."""
        return self._budgets_on

    @property
    def held(self) -> Mapping[str, int]:
        """Budget node (and root) -> GPUs its allocated work holds, not stopping."""
        return self._held

    @property
    def on_host(self) -> Mapping[str, AbstractSet[str]]:
        return self._on_host

    @property
    def running_of(self) -> Mapping[str, AbstractSet[str]]:
        """Leaf -> its running allocated work (stopping too, until it has exited)."""
        return self._running_of

    @property
    def protected_until(self) -> Mapping[str, float]:
        """Host -> when the last protection of work on it (not stopping) ends."""
        return self._protected_until

    @property
    def deadlines(self) -> Mapping[str, float]:
        """Running work with a time limit -> when the limit ends."""
        return self._deadlines

    @property
    def schedulable(self) -> Mapping[str, int]:
        """Name -> GPUs of the hosts taking work, by name."""
        return self._schedulable

    @property
    def schedulable_names(self) -> Sequence[str]:
        return self._schedulable_names

    @property
    def unschedulable(self) -> Sequence[str]:
        """The hosts taking no work (draining, in repair, down), by name."""
        return self._unschedulable

    @property
    def draining(self) -> Sequence[str]:
        return self._draining

    @property
    def max_host_gpus(self) -> int:
        """GPUs of the largest host, whatever its state: the shape rule's limit."""
        return self._max_host_gpus

    @property
    def total_gpus(self) -> int:
        """GPUs of all hosts, whatever their state."""
        return self._total_gpus

    @property
    def free_hosts(self) -> Mapping[int, AbstractSet[str]]:
        """GPUs free -> the hosts taking work (``schedulable``) with that many free; no
        entry for none free."""
        return self._free_hosts

    @property
    def open_hosts(self) -> Mapping[int, AbstractSet[str]]:
        """GPUs free, stopping or held by unallocated work not stopping -> the hosts taking
        work with that many (what anyone may take there); no entry for none."""
        return self._open_hosts


def _file_under(index: dict[int, set[str]], count: int, host: str, one: int) -> None:
    """Add (``one`` = 1) or remove (-1) ``host`` under ``count`` (none under 0)."""
    if not count:
        return
    if one > 0:
        index.setdefault(count, set()).add(host)
        return
    hosts = index.get(count)
    if hosts is not None:  # (always, unless a count was corrupted: the oracle says so)
        hosts.discard(host)
        if not hosts:
            del index[count]


def _plain(value: object) -> object:
    """An index as nested sorted tuples, comparable and printable."""
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return tuple(sorted(value))
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    return value
