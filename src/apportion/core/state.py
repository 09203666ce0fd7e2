"""The snapshot the policy decides on, kept up to date incrementally by a driver.

Both drivers (simulator and service) hold one :class:`ClusterState` and change it only
through the methods below, so both fold events into state the same way; :func:`decide`
only reads it. Indexes (pending work per budget in queue order and by shape, GPUs used,
free, stopping and unallocated per host, budgets and protection horizon per host, GPUs held
and work pending per budget node, the work rebalancing may take, the usage ledger) are
maintained on each change so a pass never rebuilds them from scratch; the consistency
property test in tests/core recomputes each of them from the work itself.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Iterable

from .ledger import UsageLedger
from .lifecycle import HOST_TRANSITIONS, check_transition
from .tree import BudgetTree, ancestors
from .types import CoreError, Host, HostState, Pending, Placement, Running, WorkloadSpec

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
            least = self._smallest[node] = min(sizes) if sizes else 1 << 30
        return least


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
    ) -> None:
        self.tree = tree
        self.hosts: dict[str, Host] = {}
        self.running: dict[str, Running] = {}
        self.pending: dict[str, Pending] = {}
        # leaf -> pending ids in queue order, allocated and unallocated kept apart because
        # the policy considers all allocated work before any unallocated work
        self.queues: dict[str, list[tuple[QueueKey, str]]] = {}
        self.unallocated_queues: dict[str, list[tuple[QueueKey, str]]] = {}
        # leaf -> {(gpus, min_runtime): count} of its pending allocated (and, apart,
        # unallocated) work, so a pass can tell at once that nothing left in a budget's queue
        # can succeed
        self.sizes: dict[str, dict[Shape, int]] = {}
        self.unallocated_sizes: dict[str, dict[Shape, int]] = {}
        # answers about those sizes, kept until the sizes of a queue change (see
        # :meth:`smallest_shapes`, :meth:`smallest_unallocated`)
        self._smallest: dict[str, list[Shape]] = {}
        self._smallest_unallocated: tuple[int, int] | None = None
        # budget node (and root) -> pending allocated workloads in its subtree
        self.pending_allocated: dict[str, int] = {}
        self.stopping: set[str] = set()  # running ids whose preemption was issued
        self.reservations: dict[str, tuple[str, ...]] = {}  # pending id -> hosts freed for it
        self.used: dict[str, int] = {}  # host -> GPUs held
        self.free: dict[str, int] = {}  # host -> GPUs not held (whatever the host's state)
        self.stopping_gpus: dict[str, int] = {}  # host -> GPUs held by stopping work
        # host -> GPUs held by unallocated work not stopping: victims anyone may take
        self.unallocated_used: dict[str, int] = {}
        # hosts holding no allocated work that is not stopping: any workload may empty them
        self.no_allocated: set[str] = set()
        self.idle: set[str] = set()  # hosts where nothing runs
        # host -> {budget: its allocated workloads there, not stopping}
        self.budgets_on: dict[str, dict[str, int]] = {}
        # budget node (and root) -> GPUs its allocated work holds, not stopping
        self.held: dict[str, int] = {}
        self.on_host: dict[str, set[str]] = {}  # host -> running ids
        # host -> when the last protection of work on it (not stopping) ends
        self.protected_until: dict[str, float] = {}
        self.ledger = UsageLedger(start, keep=ledger_keep)
        # allocated running work by when its protection ends, and what is released by the
        # time last asked (see :meth:`released`): kept as work starts and leaves, advanced as
        # the policy asks about later times
        self._protections: list[tuple[float, float, str]] = []  # (until, started_at, id)
        self._released = Released(float("-inf"))
        # derived from hosts, rebuilt when one changes: what every pass reads first
        self.schedulable: dict[str, int] = {}  # name -> GPUs of hosts taking work, by name
        self.schedulable_names: list[str] = []
        self.unschedulable: list[str] = []  # the others (draining, in repair, down)
        self.draining: list[str] = []
        self.max_host_gpus = 0  # of any host, whatever its state: the shape rule's limit
        self._healthy = 0
        self.time = start
        for h in hosts:
            self.add_host(h, start)

    def set_tree(self, tree: BudgetTree) -> None:
        """Swap in a changed budget tree (weights, new nodes). Usage history is kept; every
        budget that has queued or running work must still be a leaf."""
        for spec in [p.spec for p in self.pending.values()] + [
            r.spec for r in self.running.values()
        ]:
            if not tree.is_leaf(spec.budget):
                raise CoreError(
                    f"budget {spec.budget!r}: workload {spec.id} draws on it, it must stay a leaf"
                )
        self.tree = tree

    # ---- hosts -----------------------------------------------------------------------
    def add_host(self, host: Host, t: float) -> None:
        if host.name in self.hosts:
            raise CoreError(f"host {host.name}: name: duplicate")
        self._tick(t)
        self.hosts[host.name] = host
        self.used[host.name] = 0
        self.free[host.name] = host.gpus
        self.stopping_gpus[host.name] = 0
        self.no_allocated.add(host.name)
        self.idle.add(host.name)
        self.budgets_on[host.name] = {}
        self.unallocated_used[host.name] = 0
        self.on_host[host.name] = set()
        self.protected_until[host.name] = float("-inf")
        if host.state is HostState.HEALTHY:
            self.ledger.change_capacity(host.gpus, t)
        self._index_hosts()

    def set_host_state(self, name: str, state: HostState, t: float) -> Host:
        host = self._host(name)
        check_transition(HOST_TRANSITIONS, "host", name, host.state, state)
        self._tick(t)
        was, now = host.state is HostState.HEALTHY, state is HostState.HEALTHY
        if was != now:
            self.ledger.change_capacity(host.gpus if now else -host.gpus, t)
        new = Host(host.name, host.gpus, state)
        self.hosts[name] = new
        self._index_hosts()
        return new

    def _index_hosts(self) -> None:
        names = sorted(n for n, h in self.hosts.items() if h.schedulable)
        self.schedulable = {n: self.hosts[n].gpus for n in names}
        self.schedulable_names = names
        self.draining = sorted(n for n, h in self.hosts.items() if h.state is HostState.DRAINING)
        self.unschedulable = sorted(n for n, h in self.hosts.items() if not h.schedulable)
        self.max_host_gpus = max((h.gpus for h in self.hosts.values()), default=0)
        self._smallest.clear()  # they split shapes by the largest host
        self._smallest_unallocated = None
        self._healthy = sum(h.gpus for h in self.hosts.values() if h.state is HostState.HEALTHY)

    def _host(self, name: str) -> Host:
        try:
            return self.hosts[name]
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
        if spec.id in self.pending or spec.id in self.running:
            raise CoreError(f"workload {spec.id}: id: already queued or running")
        self.tree.require_leaf(spec.budget)
        self._tick(t)
        p = Pending(spec, t if queued_at is None else queued_at, restarted)
        self.pending[spec.id] = p
        insort(self._queue_of(spec).setdefault(spec.budget, []), (queue_key(spec), spec.id))
        sizes = self._sizes_of(spec).setdefault(spec.budget, {})
        shape = (spec.gpus, spec.min_runtime)
        sizes[shape] = sizes.get(shape, 0) + 1
        if sizes[shape] == 1:
            self._shapes_changed(spec)
        if spec.allocated:
            self._count_pending(spec.budget, 1)
        return p

    def _queue_of(self, spec: WorkloadSpec) -> dict[str, list[tuple[QueueKey, str]]]:
        return self.queues if spec.allocated else self.unallocated_queues

    def _sizes_of(self, spec: WorkloadSpec) -> dict[str, dict[Shape, int]]:
        return self.sizes if spec.allocated else self.unallocated_sizes

    def unqueue(self, workload: str) -> Pending:
        """Take a pending workload out of the queue (to start it, or because it was cancelled)."""
        p = self.pending.pop(workload, None)
        if p is None:
            raise CoreError(f"workload {workload}: not pending")
        self.reservations.pop(workload, None)
        self._queue_of(p.spec)[p.spec.budget].remove((queue_key(p.spec), workload))
        sizes = self._sizes_of(p.spec)[p.spec.budget]
        shape = (p.spec.gpus, p.spec.min_runtime)
        sizes[shape] -= 1
        if not sizes[shape]:
            del sizes[shape]
            self._shapes_changed(p.spec)
        if p.spec.allocated:
            self._count_pending(p.spec.budget, -1)
        return p

    def _count_pending(self, budget: str, one: int) -> None:
        counts = self.pending_allocated
        for node in ancestors(budget):
            counts[node] = counts.get(node, 0) + one

    def _shapes_changed(self, spec: WorkloadSpec) -> None:
        if spec.allocated:
            self._smallest.pop(spec.budget, None)
        else:
            self._smallest_unallocated = None

    def start(self, workload: str, placement: Placement, t: float) -> Running:
        """Pending -> running on ``placement``. Refuses to over-commit a host."""
        self._tick(t)
        p = self.pending.get(workload)
        if p is None:
            raise CoreError(f"workload {workload}: not pending")
        for s in placement:
            host = self._host(s.host)
            if self.used[s.host] + s.gpus > host.gpus:
                raise CoreError(f"host {s.host}: over-commit by workload {workload}")
            if not host.schedulable:
                raise CoreError(f"host {s.host}: is {host.state.value}, takes no new work")
        self.unqueue(workload)
        r = Running(p.spec, placement, t, restarted=p.restarted)
        self.running[workload] = r
        for s in placement:
            self.used[s.host] += s.gpus
            self.free[s.host] -= s.gpus
            self.idle.discard(s.host)
            if not p.spec.allocated:
                self.unallocated_used[s.host] += s.gpus
            else:
                self.no_allocated.discard(s.host)
                self._count_budget(s.host, p.spec.budget, 1)
            self.on_host[s.host].add(workload)
            until = r.protected_until()
            if until > self.protected_until[s.host]:
                self.protected_until[s.host] = until
        if p.spec.allocated:
            self._count_held(p.spec.budget, r.gpus_held)
        self.ledger.change(p.spec.budget, r.gpus_held, t, charged=p.spec.allocated)
        if p.spec.allocated:
            until = r.protected_until()
            if until <= self._released.time:
                self._released.add(r)
            else:
                heapq.heappush(self._protections, (until, t, workload))
        return r

    def reserve(self, workload: str, hosts: tuple[str, ...]) -> None:
        """Record that GPUs on ``hosts`` are being freed for pending ``workload``
        (a :class:`~apportion.core.types.Reservation` decision). Dropped when it starts or
        leaves the queue."""
        if workload not in self.pending:
            raise CoreError(f"workload {workload}: not pending, cannot hold a reservation")
        for h in hosts:
            self._host(h)
        self.reservations[workload] = tuple(hosts)

    def mark_stopping(self, workload: str) -> Running:
        r = self._running(workload)
        if workload in self.stopping:
            return r
        new = Running(
            r.spec, r.placement, r.started_at, stopping=True, restarted=r.restarted,
            checkpointed_at=r.checkpointed_at,
        )
        self.running[workload] = new
        self.stopping.add(workload)
        self._released.remove(r)
        for s in r.placement:
            self.stopping_gpus[s.host] += s.gpus
            if not r.spec.allocated:
                self.unallocated_used[s.host] -= s.gpus
            else:
                self._count_budget(s.host, r.spec.budget, -1)
            self._count_allocated(s.host)
        if r.spec.allocated:
            self._count_held(r.spec.budget, -r.gpus_held)
        self._refresh_protection(r)
        return new

    def finish(self, workload: str, t: float) -> Running:
        """Running -> gone (completed, failed, cancelled, preempted, lost). Stops charging."""
        self._tick(t)
        r = self.running.pop(workload, None)
        if r is None:
            raise CoreError(f"workload {workload}: not running")
        was_stopping = workload in self.stopping
        self.stopping.discard(workload)
        self._released.remove(r)
        for s in r.placement:
            self.used[s.host] -= s.gpus
            self.free[s.host] += s.gpus
            if not self.used[s.host]:
                self.idle.add(s.host)
            if was_stopping:
                self.stopping_gpus[s.host] -= s.gpus
            elif not r.spec.allocated:
                self.unallocated_used[s.host] -= s.gpus
            else:
                self._count_budget(s.host, r.spec.budget, -1)
            self._count_allocated(s.host)
            self.on_host[s.host].discard(workload)
        if r.spec.allocated and not was_stopping:
            self._count_held(r.spec.budget, -r.gpus_held)
        self._refresh_protection(r)
        self.ledger.change(r.spec.budget, -r.gpus_held, t, charged=r.spec.allocated)
        return r

    def requeue(self, workload: str, t: float) -> Pending:
        """Running -> pending again (resumable preemption, host failure). Keeps its place."""
        r = self.finish(workload, t)
        return self.submit(r.spec, t, restarted=True)

    def checkpoint(self, workload: str, t: float) -> Running:
        """A running workload reported a checkpoint written at ``t``: what a preemption would
        lose is counted from there (see :meth:`Running.at_risk`)."""
        r = self._running(workload)
        if t < r.started_at:
            raise CoreError(
                f"workload {workload}: checkpoint at {t:g} is before its run began "
                f"({r.started_at:g})"
            )
        new = Running(
            r.spec, r.placement, r.started_at, stopping=r.stopping, restarted=r.restarted,
            checkpointed_at=t,
        )
        self.running[workload] = new
        return new

    def _count_held(self, budget: str, gpus: int) -> None:
        held = self.held
        for node in ancestors(budget):
            held[node] = held.get(node, 0) + gpus

    def _count_budget(self, host: str, budget: str, one: int) -> None:
        on = self.budgets_on[host]
        on[budget] = on.get(budget, 0) + one
        if not on[budget]:
            del on[budget]

    def _count_allocated(self, host: str) -> None:
        allocated = self.used[host] - self.unallocated_used[host] - self.stopping_gpus[host]
        if allocated:
            self.no_allocated.discard(host)
        else:
            self.no_allocated.add(host)

    def _refresh_protection(self, gone: Running) -> None:
        """Recompute the protection horizon of the hosts ``gone`` ran on (it left or stops)."""
        for s in gone.placement:
            self.protected_until[s.host] = max(
                (
                    self.running[w].protected_until()
                    for w in self.on_host[s.host]
                    if w not in self.stopping
                ),
                default=float("-inf"),
            )

    def _running(self, workload: str) -> Running:
        try:
            return self.running[workload]
        except KeyError:
            raise CoreError(f"workload {workload}: not running") from None

    def _tick(self, t: float) -> None:
        if t < self.time:
            raise CoreError(f"state: time went backwards ({t} < {self.time})")
        self.time = t

    # ---- views -----------------------------------------------------------------------
    def released(self, now: float) -> Released:
        """Allocated work past its minimum runtime at ``now`` and not stopping (read only).
        Protection only ends as time passes, so for a time no earlier than the last asked
        this moves the work whose protection ended since; for an earlier time it is rebuilt.
        Either way it changes nothing ``decide`` decides on (it is not in
        :meth:`fingerprint`): it is the same whatever was asked before."""
        index = self._released
        if now < index.time:
            index = self._released = Released(float("-inf"))
            self._protections = [
                (r.protected_until(), r.started_at, wid)
                for wid, r in self.running.items()
                if r.spec.allocated and wid not in self.stopping
            ]
            heapq.heapify(self._protections)
        heap = self._protections
        while heap and heap[0][0] <= now:
            _, started_at, wid = heapq.heappop(heap)
            r = self.running.get(wid)
            if r is not None and r.started_at == started_at and wid not in self.stopping:
                index.add(r)
        index.time = now
        return index

    def smallest_shapes(self, leaf: str) -> list[Shape]:
        """The shapes of ``leaf``'s pending allocated work that no other of the same kind
        (one host, or whole hosts: larger than the largest host) is both smaller and
        shorter than, smallest first (read only). A request failing by size and charge
        fails for every shape such a one is smaller and shorter than, so these decide
        whether a whole queue is hopeless: a handful, however many lengths it holds."""
        shapes = self._smallest.get(leaf)
        if shapes is None:
            shapes = []
            shortest = {False: float("inf"), True: float("inf")}  # so far, per kind
            for gpus, min_runtime in sorted(self.sizes.get(leaf, ())):
                multi = gpus > self.max_host_gpus
                if min_runtime < shortest[multi]:
                    shortest[multi] = min_runtime
                    shapes.append((gpus, min_runtime))
            self._smallest[leaf] = shapes
        return shapes

    def smallest_unallocated(self) -> tuple[int, int]:
        """GPUs of the smallest pending unallocated request that fits on one host, and of the
        smallest that needs whole hosts (``1 << 30`` where there is none)."""
        if self._smallest_unallocated is None:
            single, multi = 1 << 30, 1 << 30
            for sizes in self.unallocated_sizes.values():
                for gpus, _ in sizes:
                    if gpus > self.max_host_gpus:
                        multi = min(multi, gpus)
                    else:
                        single = min(single, gpus)
            self._smallest_unallocated = (single, multi)
        return self._smallest_unallocated

    def healthy_gpus(self) -> int:
        return self._healthy

    def fingerprint(self) -> tuple[object, ...]:
        """Everything ``decide`` may read, as plain values: equal before and after a pass."""
        return (
            tuple(sorted(self.tree.as_dict().items())),
            tuple(sorted(self.hosts.items())),
            tuple(sorted(self.running.items())),
            tuple(sorted(self.pending.items())),
            tuple(sorted((k, tuple(v)) for k, v in self.queues.items())),
            tuple(sorted((k, tuple(v)) for k, v in self.unallocated_queues.items())),
            tuple(sorted(self.stopping)),
            tuple(sorted(self.reservations.items())),
            tuple(sorted((k, tuple(sorted(v.items()))) for k, v in self.sizes.items())),
            tuple(
                sorted((k, tuple(sorted(v.items()))) for k, v in self.unallocated_sizes.items())
            ),
            tuple(sorted(self.used.items())),
            tuple(sorted(self.unallocated_used.items())),
            tuple(sorted(self.stopping_gpus.items())),
            tuple(sorted(self.no_allocated)),
            tuple(sorted(self.idle)),
            tuple(sorted((h, tuple(sorted(b.items()))) for h, b in self.budgets_on.items())),
            tuple(sorted(self.pending_allocated.items())),
            tuple(sorted(self.held.items())),
            tuple(sorted((k, tuple(sorted(v))) for k, v in self.on_host.items())),
            tuple(sorted(self.protected_until.items())),
            self.ledger.fingerprint(),
            self.time,
        )
