"""Where work goes: gang placement on healthy hosts, and the cheapest room to make.

Shape rule: a workload asking for at most one host's GPUs goes on one host; a larger one
takes whole hosts. Single-host work is placed *best fit* (the host with the fewest free GPUs
that still fits), which keeps empty hosts empty for the large runs that need them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Final, cast

from .preemption import UNALLOCATED, Candidate
from .state import ClusterState
from .tree import ROOT
from .types import Placement, Running, Slice, WorkloadSpec

Allowed = Callable[[Candidate, dict[str, int]], bool]


class HostView:
    """Free GPUs per healthy host as the pass hands them out, and victims per host."""

    def __init__(
        self, state: ClusterState, default_checkpoint: float = 1800.0, full: bool = False
    ) -> None:
        self.state = state
        self.default_checkpoint = default_checkpoint
        # the reference pass's: searches skip no host by a bound (see PolicyConfig.shortcuts)
        self.full = full
        self.size = state.schedulable  # read only: the state's own index
        self.names = state.schedulable_names
        # the state's per-host counts, read only until the pass first changes one; then
        # copies, less the few hosts taking no work (_own_counts): most passes hand nothing
        # out, and at thousands of hosts copying every host's counts is much of a pass
        self.free = cast(dict[str, int], state.free)
        self.stopping = cast(dict[str, int], state.stopping_gpus)  # GPUs of stopping work
        self._shared = True  # free and stopping are the state's own
        # GPUs held by unallocated work that is not stopping: victims anyone may take (read
        # only, and only for hosts taking work: a pass changes none of it, so no copy)
        self.unallocated: Mapping[str, int] = state.unallocated_used
        self.healthy_total = state.healthy_gpus()  # the GPUs of the hosts taking work
        self.max_size = state.max_host_gpus
        self.claimed: set[str] = set()
        self._cands: dict[str, list[Candidate]] = {}
        self._cand_gpus: dict[str, int] = {}
        self._costs: dict[str, tuple[float, int, int]] = {}
        self._clearable: list[str] | None = None
        self._promised: set[str] | None = None
        self._clear_ok: dict[str, bool] = {}  # host -> promised to no one, nothing protected
        self.touched: set[str] = set()  # hosts this pass started work on or promised
        # Did a whole-host search refuse a host's victim while it had victims taken already?
        # Then its failure proves nothing for a request whose rules allow fewer victims
        # (a lower limit, a victim size bound): refused the host it took first, such a
        # search keeps room under its limits for others, and may succeed. Set by the search,
        # reset by the caller before one.
        self.refused_after_taking = False
        self._unallocated_clearable: int | None = None
        self._unallocated_hosts: set[str] = set()  # the hosts it counts
        self._reclaimable: int | None = None
        self._handed = 0  # free and stopping GPUs the pass has handed out (or promised)
        self._room: dict[bool, int] = {}

    def may_be_victim(self, r: Running, now: float) -> bool:
        """Protected work (allocated, inside its minimum runtime) is never a victim: every
        victim search gets its candidates through here."""
        return now >= r.protected_until()

    def has_protected(self, host: str, now: float) -> bool:
        """Is some work on ``host`` (not stopping) still inside its minimum runtime?"""
        return now < self.state.protected_until[host]

    def candidates(self, host: str, now: float) -> list[Candidate]:
        """Running work on ``host`` that could be a victim now (not stopping, not protected),
        cheapest victim first. Built once per host per pass."""
        cands = self._cands.get(host)
        if cands is None:
            st = self.state
            running, stopping = st.running, st.stopping
            cands = []
            held = 0
            # loops, not generators, in the searches: asked for every host a search weighs
            for wid in st.on_host[host]:
                if wid in stopping:
                    continue
                r = running[wid]
                if self.may_be_victim(r, now):
                    c = Candidate.of(r, now, self.default_checkpoint)
                    cands.append(c)
                    held += c.gpus
            if len(cands) > 1:  # most hosts hold one victim or none
                cands.sort(key=lambda c: (c.klass, c.lost, c.id))
            self._cands[host] = cands
            self._cand_gpus[host] = held
        return cands

    def cost(self, host: str, now: float) -> tuple[float, int, int]:
        """What emptying ``host`` would cost (see :func:`_cost`), once per host per pass."""
        cost = self._costs.get(host)
        if cost is None:
            cost = self._costs[host] = _cost(self.candidates(host, now))
        return cost

    def sort_by_cost(self, hosts: list[str], now: float) -> None:
        """Sort ``hosts`` by what emptying each costs, then by name. By name first, then (a
        stable sort keeps that order among equal costs) by the kept cost alone: the sort
        compares plain cost tuples, and its key is a dict lookup rather than a call that
        builds a tuple per host (a whole-host search sorts hundreds of hosts)."""
        for name in hosts:
            self.cost(name, now)
        hosts.sort()
        hosts.sort(key=self._costs.__getitem__)

    def victim_gpus(self, host: str, now: float) -> int:
        """GPUs held by the possible victims on ``host`` (each counted whole, wherever else
        it runs): what emptying the host takes from the sides' limits."""
        self.candidates(host, now)
        return self._cand_gpus[host]

    def reachable(self, host: str, now: float) -> int:
        """GPUs of ``host`` that free space, stopping work and unclaimed victims add up to."""
        self.candidates(host, now)
        return self.free[host] + self.stopping[host] + self._cand_gpus[host]

    def room(self, whole_hosts: bool, fresh: bool = False) -> int:
        """At least the most GPUs free on one host, or (``whole_hosts``) the GPUs of the
        wholly free hosts: exact when first asked in a pass, upper bounds after (free GPUs
        only fall during a pass), exact again when asked ``fresh``."""
        got = None if fresh else self._room.get(whole_hosts)
        if got is None:
            if whole_hosts:  # wholly free: idle when the pass began, untouched since
                got = 0
                size, touched = self.size, self.touched
                for n in self.state.idle:  # a loop, not a generator: asked every pass
                    if n in size and n not in touched:
                        got += size[n]
            elif self.own():
                got = _most_free(self)
            else:
                got = max((self.free[n] for n in self.names), default=0)
            self._room[whole_hosts] = got
        return got

    def own(self) -> bool:
        """Are the view's hosts and counts the state's own (not filled in by a caller, as
        the legacy policy does)? Then searches may read the state's indexes for the hosts
        the pass has not touched: their counts are still the state's."""
        return self.names is self.state.schedulable_names

    def reclaimable_unallocated(self) -> int:
        """Upper bound on the GPUs free, stopping or held by unallocated work right now.
        Worked out once a pass, then lowered as the pass hands out GPUs."""
        if self._reclaimable is None:
            unallocated = int(self.state.ledger.rate(ROOT, charged=False))
            # what ``free`` and ``stopping`` add up to, from the state's sum of them
            free_or_stopping = self.state.free_or_stopping_gpus() - self._handed
            self._reclaimable = free_or_stopping + unallocated
        return self._reclaimable

    def clearable(self, now: float) -> list[str]:
        """Hosts that could be emptied now (:meth:`clearable_host`), by name: every host
        looked at, as the reference pass's whole-host search does. Built once per pass; a
        host leaves the list when the pass starts work on it or promises its GPUs."""
        if self._clearable is None:
            self._clearable = [name for name in self.names if self.clearable_host(name, now)]
        return self._clearable

    def clearable_host(self, name: str, now: float) -> bool:
        """Could ``name`` be emptied now: schedulable, nothing protected on it, nothing
        promised to another workload, and the pass has neither started work on it nor
        promised its GPUs? From the state's indexes alone, once per host and pass (but
        for the hosts touched since, checked each time): the victims and costs are worked
        out only for the hosts a search can use."""
        if name in self.touched or name not in self.size:
            return False
        ok = self._clear_ok.get(name)
        if ok is None:
            ok = self._clear_ok[name] = (
                name not in self.promised() and not self.has_protected(name, now)
            )
        return ok

    def promised(self) -> set[str]:
        """Hosts of the work claimed when first asked in a pass (stopped at its time limit,
        drained): promised to another workload. Work claimed later is claimed by
        :meth:`claim`, which marks its hosts touched."""
        if self._promised is None:
            st = self.state
            self._promised = {s.host for wid in self.claimed for s in st.running[wid].placement}
        return self._promised

    def unallocated_clearable(self) -> int:
        """Upper bound on the GPUs of hosts that only unallocated victims, free and stopping
        GPUs fill: what a whole-host request may take without rebalancing. From the state's
        per-host counts, without looking at any workload."""
        if self._unallocated_clearable is None:
            self._unallocated_hosts = {
                name
                for name in self.state.no_allocated
                if name in self.size and name not in self.touched
            }
            self._unallocated_clearable = sum(self.size[n] for n in self._unallocated_hosts)
        return self._unallocated_clearable

    def unallocated_hosts(self) -> set[str]:
        """The hosts :meth:`unallocated_clearable` counts: schedulable, untouched this pass,
        no allocated work on them (read only)."""
        self.unallocated_clearable()
        return self._unallocated_hosts

    def _not_clearable(self, hosts: set[str]) -> None:
        self.touched |= hosts
        if self._unallocated_clearable is not None:
            for name in hosts & self._unallocated_hosts:
                self._unallocated_hosts.discard(name)
                self._unallocated_clearable -= self.size[name]
        if self._clearable is not None:
            self._clearable = [name for name in self._clearable if name not in hosts]

    def _own_counts(self) -> None:
        """Copy ``free`` and ``stopping`` before the pass first changes them."""
        if self._shared:
            self._shared = False
            self.free, self.stopping = dict(self.free), dict(self.stopping)
            for name in self.state.unschedulable:
                del self.free[name], self.stopping[name]

    def take(self, placement: Placement) -> None:
        self._own_counts()
        for s in placement:
            self.free[s.host] -= s.gpus
            self._handed_out(s.gpus)
        self._not_clearable({s.host for s in placement})

    def _handed_out(self, gpus: int) -> None:
        self._handed += gpus
        if self._reclaimable is not None:
            self._reclaimable -= gpus

    def give_back(self, host: str, gpus: int) -> None:
        """Free ``gpus`` on ``host`` again that the pass had promised (to a reservation);
        an upper bound already worked out is left as it is."""
        self._own_counts()
        self.free[host] += gpus
        self._handed -= gpus

    def claim(self, plan: VictimPlan) -> None:
        """Promise the plan's GPUs to its workload: nobody else gets them this pass."""
        self._own_counts()
        for host, gpus in plan.hosts:
            from_free = min(self.free[host], gpus)
            from_stopping = min(self.stopping[host], gpus - from_free)
            self.free[host] -= from_free
            self.stopping[host] -= from_stopping
            self._handed_out(from_free + from_stopping)
        for v in plan.victims:
            self.claimed.add(v.id)
            for host, _ in plan.hosts:
                if host in self._cand_gpus and any(c.id == v.id for c in self._cands[host]):
                    self._cand_gpus[host] -= v.gpus
        self._not_clearable({h for h, _ in plan.hosts} | {h for v in plan.victims for h in v.hosts})


class VictimPlan:
    """Room for one workload: the hosts and GPUs it gets, and the work to preempt for it."""

    __slots__ = ("cost", "hosts", "victims")

    def __init__(
        self,
        hosts: tuple[tuple[str, int], ...],  # host and GPUs the workload will get there
        victims: tuple[Candidate, ...],  # to preempt now (none: waiting for stopping work only)
        cost: tuple[float, int, int],
    ) -> None:
        self.hosts: Final = hosts
        self.victims: Final = victims
        self.cost: Final = cost


def find_fit(view: HostView, gpus: int, only: Sequence[str] | None = None) -> Placement | None:
    """A placement on free GPUs only (of the hosts in ``only``, if given), or None."""
    if only is None and not view.full and view.own():
        return _fit_indexed(view, gpus)
    names = view.names if only is None else sorted(h for h in only if h in view.size)
    if gpus <= view.max_size:
        best: str | None = None
        for name in names:
            free = view.free[name]
            if free >= gpus and (best is None or free < view.free[best]):
                best = name
        return None if best is None else (Slice(best, gpus),)
    return _largest_first([n for n in names if view.free[n] == view.size[n]], view.size, gpus)


def _fit_indexed(view: HostView, gpus: int) -> Placement | None:
    """:func:`find_fit` on any host, the same answer without looking at every host: the
    hosts the pass touched (the only ones whose counts the pass changed) one by one, the
    others through the state's hosts by free GPUs (``ClusterState.free_hosts``) and its
    idle hosts (the wholly free ones: nothing runs there)."""
    st, touched, free, size = view.state, view.touched, view.free, view.size
    if gpus <= view.max_size:
        # best fit: fewest free GPUs that still fit, then the first by name
        best: str | None = None
        best_free = view.max_size + 1
        for name in touched:
            if name in size and gpus <= free[name] and (
                free[name] < best_free or (free[name] == best_free and best is not None
                                           and name < best)
            ):
                best, best_free = name, free[name]
        by_free = st.free_hosts
        for k in range(gpus, best_free + 1):
            hosts = by_free.get(k)
            if not hosts:
                continue
            first = _first_untouched(hosts, touched)
            if first is not None:
                if k < best_free or best is None or first < best:
                    best = first
                break
        return None if best is None else (Slice(best, gpus),)
    whole = [n for n in st.idle if n in size and n not in touched]
    whole += [n for n in touched if n in size and free[n] == size[n]]
    return _largest_first(whole, size, gpus)


def _largest_first(whole: list[str], size: Mapping[str, int], gpus: int) -> Placement | None:
    """Wholly free hosts for a gang of ``gpus``: the largest first (then by name) until they
    hold it; None if all of them do not."""
    whole.sort(key=lambda n: (-size[n], n))
    chosen: list[str] = []
    total = 0
    for name in whole:
        if total >= gpus:
            break
        chosen.append(name)
        total += size[name]
    if total < gpus:
        return None
    return tuple(Slice(n, size[n]) for n in sorted(chosen))


def _first_untouched(hosts: AbstractSet[str], touched: set[str]) -> str | None:
    """The first by name of ``hosts`` the pass has not touched, if any."""
    first = min(hosts)
    if first not in touched:
        return first
    return min((n for n in hosts if n not in touched), default=None)


def _open_hosts(view: HostView, gpus: int) -> list[str]:
    """By name, the hosts where free, stopping and unallocated GPUs reach ``gpus``: those an
    unallocated-only search for a request of ``gpus`` does not skip (:func:`_one_host`).
    The touched hosts one by one, the others through ``ClusterState.open_hosts``."""
    touched = view.touched
    names = [
        n for n in touched
        if n in view.size and view.free[n] + view.stopping[n] + view.unallocated[n] >= gpus
    ]
    for k, hosts in view.state.open_hosts.items():
        if k >= gpus:
            for n in hosts:
                if n not in touched:
                    names.append(n)
    names.sort()
    return names


def _most_free(view: HostView) -> int:
    """The most GPUs free on one host taking work, as the pass has handed them out: the
    touched hosts one by one, the others through the state's hosts by free GPUs."""
    touched, size, free = view.touched, view.size, view.free
    most = 0
    for n in touched:  # loops, not generators: asked every pass
        if n in size and free[n] > most:
            most = free[n]
    by_free = view.state.free_hosts
    for k in sorted(by_free, reverse=True):
        if k <= most:
            break
        for n in by_free[k]:  # any one untouched host of k free GPUs will do
            if n not in touched:
                return k
    return most


def find_victims(
    view: HostView,
    spec: WorkloadSpec,
    now: float,
    allowed: Allowed | None,
    only: Collection[str] | None = None,
    budget_ok: Callable[[str], bool] | None = None,
) -> VictimPlan | None:
    """The cheapest room for ``spec`` made of free GPUs, stopping work and victims that
    ``allowed`` accepts (``None``: unallocated victims only), on the hosts in ``only`` if
    given. Protected work (inside its minimum runtime) is never a victim, whatever
    ``allowed`` says: this is the one place that guarantees it (see
    :meth:`HostView.candidates`). ``budget_ok``, if given, is a cheap
    necessary condition on a victim's budget that lets whole-host searches discard hosts
    before asking ``allowed`` about each victim."""
    if spec.gpus <= view.max_size:
        names: Sequence[str]
        if only is None and allowed is None and not view.full and view.own():
            names = _open_hosts(view, spec.gpus)  # the only hosts the search would not skip
        else:
            names = view.names if only is None else sorted(h for h in only if h in view.size)
        return _one_host(view, names, spec.gpus, now, allowed)
    wanted = None if only is None else only if isinstance(only, set) else set(only)
    return _whole_hosts(view, wanted, spec.gpus, now, allowed, budget_ok)


def _cost(victims: list[Candidate]) -> tuple[float, int, int]:
    """Least progress lost (GPU-seconds at risk) first, then unallocated before resumable
    before other work, then fewest victims."""
    lost = 0.0
    worst = 0
    for v in victims:  # a loop, not generators: asked for every host a search weighs
        lost += v.lost
        if v.klass > worst:
            worst = v.klass
    return (lost, worst, len(victims))


def _one_host(
    view: HostView, names: Sequence[str], gpus: int, now: float, allowed: Allowed | None
) -> VictimPlan | None:
    best: VictimPlan | None = None
    best_key: tuple[tuple[float, int, int], str] | None = None
    claimed = view.claimed
    bounded = not view.full
    for name in names:
        if view.size[name] < gpus:
            continue
        gone = view.free[name] + view.stopping[name] + view.unallocated[name]
        if bounded and allowed is None and gone < gpus:
            continue  # not enough even if all its unallocated work went
        if bounded and view.reachable(name, now) < gpus:
            continue
        need = gpus - view.free[name] - view.stopping[name]
        chosen: list[Candidate] = []
        taken: dict[str, int] = {}
        if need > 0:
            for c in view.candidates(name, now):
                if c.id in claimed:
                    continue
                if allowed is None:
                    if c.klass != UNALLOCATED:
                        break  # sorted by class: no unallocated victims left on this host
                elif not allowed(c, taken):
                    continue
                chosen.append(c)
                taken[c.budget] = taken.get(c.budget, 0) + c.gpus
                need -= c.gpus
                if need <= 0:
                    break
            if need > 0:
                continue
        key = (_cost(chosen), name)
        if best_key is None or key < best_key:
            best_key = key
            best = VictimPlan(((name, gpus),), tuple(chosen), key[0])
            if bounded and key[0] == (0.0, 0, 0):
                break  # only waiting for stopping work: cannot do better
    return best


def _whole_hosts(
    view: HostView,
    wanted: set[str] | None,  # None: any host
    gpus: int,
    now: float,
    allowed: Allowed | None,
    budget_ok: Callable[[str], bool] | None = None,
) -> VictimPlan | None:
    verdict: dict[str, bool] = {}
    budget_set = view.state.budget_set

    def usable(name: str) -> bool:
        budgets = budget_set(name)  # of its allocated work (empty: unallocated only)
        if allowed is None:
            return not budgets
        if budget_ok is None:
            return True
        for b in budgets:
            if b not in verdict:
                verdict[b] = budget_ok(b)
            if not verdict[b]:
                return False
        return True

    bounded = not view.full
    if bounded and allowed is None and view.unallocated_clearable() < gpus:
        return None  # too few hosts hold nothing but unallocated or stopping work
    if bounded and wanted is not None and sum(
        view.size[n] for n in wanted if n in view.size and n not in view.touched
    ) < gpus:
        return None  # the hosts allowed are too few, emptied or not
    if bounded:
        # only the hosts the search may use are looked at: those allowed, or, with
        # unallocated victims only, those with no allocated work (no other is usable);
        # their order does not matter, they are sorted by cost and name below
        among: Collection[str] = (
            wanted if wanted is not None
            else view.unallocated_hosts() if allowed is None
            else view.names
        )
        options = [n for n in among if view.clearable_host(n, now) and usable(n)]
    else:  # the reference pass: every host
        options = [
            n for n in view.clearable(now) if (wanted is None or n in wanted) and usable(n)
        ]
    left = 0  # GPUs of the options not yet looked at
    for name in options:
        left += view.size[name]
    if bounded and left < gpus:
        return None  # not enough hosts could be emptied, whoever asks
    view.sort_by_cost(options, now)  # cheapest to empty first
    refused = view.refused_after_taking
    view.refused_after_taking = False
    plan = _take_hosts(view, options, left, gpus, now, allowed, bounded)
    if plan is None and view.refused_after_taking:
        # The cheapest hosts first used up a side's limit on a host whose victims hold many
        # GPUs for its room, and no other host fit under it after: the hosts whose victims
        # hold the fewest GPUs first fit the most under every limit.
        options.sort(key=lambda name: (view.victim_gpus(name, now), view.cost(name, now), name))
        plan = _take_hosts(view, options, left, gpus, now, allowed, bounded)
    view.refused_after_taking = view.refused_after_taking or refused
    return plan


def _take_hosts(
    view: HostView, options: Sequence[str], left: int, gpus: int, now: float,
    allowed: Allowed | None, bounded: bool,
) -> VictimPlan | None:
    """Whole hosts for ``gpus`` GPUs taken in the order of ``options`` (``left``: their
    GPUs), each if ``allowed`` accepts all its victims with those of the hosts taken before."""
    taken: dict[str, int] = {}
    hosts: list[tuple[str, int]] = []
    victims: list[Candidate] = []
    total = 0
    chosen: set[str] = set()
    for name in options:
        if total >= gpus or (bounded and total + left < gpus):
            break  # room enough, or no more to be had
        left -= view.size[name]
        trial = dict(taken)
        ok = True
        # a victim spanning several of the chosen hosts is preempted (and counted) once
        cands = [c for c in view.candidates(name, now) if c.id not in chosen]
        if allowed is not None:
            for c in cands:
                if not allowed(c, trial):
                    ok = False
                    if trial:
                        view.refused_after_taking = True
                    break
                trial[c.budget] = trial.get(c.budget, 0) + c.gpus
        if not ok:
            continue
        taken = trial
        hosts.append((name, view.size[name]))
        victims.extend(cands)
        chosen.update(c.id for c in cands)
        total += view.size[name]
    if total < gpus:
        return None
    return VictimPlan(tuple(sorted(hosts)), tuple(victims), _cost(victims))
