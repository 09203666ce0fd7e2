"""The old priority scheduler, as a policy the engine can drive like ``core.decide``.

Rules modelled (the baseline apportion replaces):

* four priorities (urgent > high > normal > low, ``SimJob.legacy_priority``), FIFO within a
  priority (original submission time, so requeued work keeps its place);
* a job may opt out of preemption (``legacy_preemptible=False``): it is then never
  preempted, not even to drain a host (a human must kill it, see the engine);
* each team (the first ``team_depth`` path levels of its budget) may hold at most
  ``cap_factor x team share x cluster GPUs`` GPUs in non-preemptible jobs at once; jobs over
  the cap wait, preemptible ones spill onto any idle GPU;
* a pending job that does not fit may preempt *preemptible* jobs of strictly lower priority
  (lowest priority first, then the most recently started: least progress lost);
* a backfill scan: a job that cannot start does not block smaller ones behind it, but a pass
  gives up after ``scan_depth`` jobs that were tried and could not start (like Slurm's
  ``bf_max_job_test``); jobs too large for the free GPUs are passed over without a try.

It ignores budgets, usage and minimum runtimes (the metrics still use them). It returns core
``Decisions`` and places work with core's ``find_fit`` (best fit on one host; whole hosts
beyond one host's GPUs), so both policies obey the same shape rules.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator, Mapping
from itertools import islice

from apportion.core import (
    BudgetTree,
    ClusterState,
    Decisions,
    HostChange,
    HostState,
    PolicyConfig,
    Preempt,
    PreemptReason,
    Start,
)
from apportion.core.placement import HostView, find_fit

from .metrics import team_of
from .model import LegacyPriority, SimJob

_Key = tuple[int, float, str]


def _free_view(blank: ClusterState, free: dict[str, int], size: dict[str, int],
               names: list[str], max_size: int) -> HostView:
    """A core host view holding the policy's own incremental counts in the fields that
    ``find_fit`` reads (names, free, size, max_size), without a state scan: it is built on
    ``blank``, a state with no hosts, then given the counts. A genuine ``HostView``, not a
    subclass: the compiled core (docs/simulator.md) accepts no Python subclass of its classes.
    Only handed to ``find_fit``; the pass updates ``free`` itself."""
    view = HostView(blank)
    view.free, view.size, view.names, view.max_size = free, size, names, max_size
    return view


class _Info:
    __slots__ = ("gpus", "key", "preemptible", "prio", "queue", "team")

    def __init__(self, job: SimJob, team: str) -> None:
        self.prio = int(job.legacy_priority)
        self.key: _Key = (-self.prio, job.spec.submit_time, job.spec.id)
        self.gpus = job.spec.gpus
        self.preemptible = job.legacy_preemptible
        self.team = team
        self.queue = (self.gpus, None if self.preemptible else team)


class _LegacyPass:
    """Working data of one legacy pass (free GPUs handed out, what failed, what started).

    It starts on the policy's own counts (free GPUs per host, how many hosts have each number
    free) and copies them at its first start: most passes start nothing."""

    def __init__(self, policy: LegacyPolicy, state: ClusterState) -> None:
        self.policy = policy
        self.free = policy._free
        self.hosts_with = policy._hosts_with  # hosts having n free GPUs, by n
        self.view = policy._view
        self.view.free = self.free
        self.free_total = policy._free_total
        self.max_free = _top(self.hosts_with)
        pre = policy._pre_gpus
        self.below_of = [sum(pre[:prio]) for prio in range(len(pre))]
        self.starts: list[Start] = []
        # opted-out GPUs each team may still start in this pass (its cap minus what it holds)
        self.room = {t: cap - policy._np_used[t] + 1e-9 for t, cap in policy.caps.items()}
        self.skipped = 0
        self.searches = 0
        self.fit_fail = self.search_fail = 1 << 30  # smallest request that failed

    def capped(self, info: _Info) -> bool:
        """An opted-out job whose team is at its cap of opted-out GPUs."""
        return not info.preemptible and info.gpus > self.room[info.team]


    def try_fit(self, wid: str, info: _Info) -> bool:
        if info.gpus <= self.view.max_size and info.gpus > self.max_free:
            return False  # no single host has that many free GPUs
        placement = find_fit(self.view, info.gpus)
        if placement is None:
            return False
        if not self.starts:  # the first start: from here on the pass's own counts
            self.free = self.view.free = dict(self.free)
            self.hosts_with = list(self.hosts_with)
        self.starts.append(Start(wid, placement))
        free, hosts_with = self.free, self.hosts_with
        for sl in placement:  # our own bookkeeping: find_fit only reads the view
            hosts_with[free[sl.host]] -= 1
            free[sl.host] -= sl.gpus
            hosts_with[free[sl.host]] += 1
        self.max_free = _top(hosts_with, self.max_free)
        self.free_total -= sum(s.gpus for s in placement)
        if not info.preemptible:
            self.room[info.team] -= info.gpus
        return True

    def give_up(self) -> bool:
        """Count a job that was tried and could not start; True when the pass should stop
        (``scan_depth`` reached)."""
        self.skipped += 1
        return self.skipped >= self.policy.scan_depth

    def decisions(self, preemptions: tuple[Preempt, ...] = ()) -> Decisions:
        return Decisions(starts=tuple(self.starts), preemptions=preemptions)


class LegacyPolicy:
    """``policy(state, now, config) -> Decisions`` for the old scheduler.

    ``jobs`` maps workload ids to their :class:`SimJob` (the legacy priority and opt-out
    live there, not in the spec). ``remember``: skip a victim search that found nothing
    before on the same running work and hosts (``False``: every search runs; the decisions
    are the same, tests/sim/test_legacy.py checks it). The engine calls :meth:`observe` on
    every queue and host change, so the priority index, the free GPUs per host and the
    counts the cap and the preemption rule need are kept incrementally instead of being
    rebuilt on every pass.
    """

    def __init__(
        self,
        jobs: Mapping[str, SimJob],
        tree: BudgetTree,
        total_gpus: int,
        team_depth: int = 2,
        cap_factor: float = 1.0,
        scan_depth: int = 100,
        remember: bool = True,
    ) -> None:
        self.jobs = jobs
        self.remember = remember  # False: no victim search is skipped (tests compare both)
        self.team_depth = team_depth
        self.scan_depth = scan_depth
        teams = {team_of(leaf, team_depth) for leaf in tree.leaves}
        self.caps = {t: cap_factor * tree.share(t) * total_gpus for t in teams}
        self._info: dict[str, _Info] = {}
        self._pending: list[tuple[_Key, str]] = []  # all pending, in legacy order
        # the same, split by (GPUs asked, team for opted-out jobs / None for preemptible ones),
        # so a pass visits only jobs that could fit and whose team is not at its cap
        self._queues: dict[tuple[int, str | None], list[tuple[_Key, str]]] = {}
        self._pre_gpus = [0] * (max(LegacyPriority) + 1)  # running preemptible GPUs by level
        self._np_used = dict.fromkeys(teams, 0)  # running non-preemptible GPUs by team
        self._held: dict[str, tuple[tuple[str, int], ...]] = {}  # running id -> its slices
        self._used: dict[str, int] = {}  # host -> GPUs held
        self._size: dict[str, int] = {}  # every host's GPUs
        self._free: dict[str, int] = {}  # healthy host -> free GPUs
        self._free_total = 0  # their sum
        self._hosts_with: list[int] = [0]  # how many healthy hosts have n free GPUs, by n
        self._names: list[str] = []  # healthy hosts, sorted
        # the host view each pass hands find_fit (built on a state with no hosts)
        self._view = _free_view(ClusterState(tree), self._free, self._size, self._names, 0)
        # Victim searches that found nothing, as (GPUs, priority): until running work or a
        # host changes (``_changes`` counts those), the same search on the same free GPUs
        # finds nothing again. Valid for passes that have started nothing yet.
        self._changes = 0
        self._no_victims: set[tuple[int, int]] = set()
        self._no_victims_at = -1
        self.searches_skipped = 0  # searches answered from what was remembered
        self._draining: set[str] = set()
        self._pre_host: dict[str, list[int]] = {}  # host -> preemptible GPUs by priority

    # ---- the index -------------------------------------------------------------------
    def _job(self, wid: str) -> _Info:
        info = self._info.get(wid)
        if info is None:
            job = self.jobs[wid]
            info = self._info[wid] = _Info(job, team_of(job.spec.budget, self.team_depth))
        return info

    def observe(self, kind: str, name: str, state: ClusterState) -> None:
        """``queued`` (submitted or requeued), ``started``, ``ended`` (stopped running),
        ``unqueued`` (left the queue without starting) for a workload ``name``; ``host`` when
        host ``name`` was added or changed state."""
        if kind == "host":
            self._host(name, state)
            return
        info = self._job(name)
        if kind == "queued":
            insort(self._pending, (info.key, name))
            insort(self._queues.setdefault(info.queue, []), (info.key, name))
            return
        if kind == "unqueued":
            self._dequeue(info, name)
            return
        if kind == "started":
            self._dequeue(info, name)
            slices = tuple((s.host, s.gpus) for s in state.running[name].placement)
            self._held[name] = slices
            sign = 1
        else:
            slices = self._held.pop(name)
            sign = -1
        held = 0
        self._changes += 1
        free, hosts_with = self._free, self._hosts_with
        for host, gpus in slices:
            held += gpus
            self._used[host] += sign * gpus
            if host in free:
                hosts_with[free[host]] -= 1
                free[host] -= sign * gpus
                hosts_with[free[host]] += 1
                self._free_total -= sign * gpus
            if info.preemptible:
                self._pre_host[host][info.prio] += sign * gpus
        if info.preemptible:
            self._pre_gpus[info.prio] += sign * held
        else:
            self._np_used[info.team] += sign * held

    def _dequeue(self, info: _Info, name: str) -> None:
        entry = (info.key, name)
        i = bisect_left(self._pending, entry)
        if i < len(self._pending) and self._pending[i] == entry:
            del self._pending[i]
            same = self._queues[info.queue]
            del same[bisect_left(same, entry)]
            if not same:
                del self._queues[info.queue]

    def _host(self, name: str, state: ClusterState) -> None:
        host = state.hosts[name]
        self._changes += 1
        self._size[name] = host.gpus
        self._used.setdefault(name, 0)
        self._pre_host.setdefault(name, [0] * len(self._pre_gpus))
        if host.state is HostState.HEALTHY:
            self._free[name] = host.gpus - self._used[name]
        else:
            self._free.pop(name, None)
        if host.state is HostState.DRAINING:
            self._draining.add(name)
        else:
            self._draining.discard(name)
        # rare (host changes): the derived counts are rebuilt from the free GPUs
        self._names[:] = sorted(self._free)
        self._free_total = sum(self._free.values())
        self._hosts_with = [0] * (max(self._size.values()) + 1)
        for n in self._free.values():
            self._hosts_with[n] += 1
        self._view.max_size = max(self._size.values())

    # ---- one pass --------------------------------------------------------------------
    def __call__(self, state: ClusterState, now: float, config: PolicyConfig) -> Decisions:
        if not self._size:  # not told about hosts (driven without observe): learn them now
            for name in state.hosts:
                self._host(name, state)
        changes: list[HostChange] = []
        drains: list[Preempt] = []
        for name in sorted(self._draining):
            on = state.on_host[name]
            if not on:
                changes.append(HostChange(name, HostState.REPAIR, "drained"))
            for wid in sorted(on):
                r = state.running[wid]
                if self._job(wid).preemptible and not r.stopping:
                    drains.append(Preempt(wid, PreemptReason.DRAIN, r.spec.resumable))
        if changes or drains:
            return Decisions(preemptions=tuple(drains), host_changes=tuple(changes))
        if not self._pending:
            return Decisions()
        return self._schedule(state)

    def _schedule(self, state: ClusterState) -> Decisions:
        """Two phases. While preemption is still possible (lower-priority preemptible work
        below the job, victim searches left), jobs are scanned in order. After that only
        free GPUs can be handed out, so the rest of the order is visited through a merge of
        the queues of jobs small enough to fit whose team is not at its cap, instead of
        walking past every job that cannot start."""
        p = _LegacyPass(self, state)
        after: tuple[_Key, str] | None = None  # last entry the preemption phase handled
        infos, below_of, room = self._info, p.below_of, p.room  # hot loop: locals
        for entry in self._pending:
            info = infos[entry[1]]
            below = below_of[info.prio]
            if below == 0 or p.searches >= 3 or p.search_fail <= 1:
                break  # nothing from here on can preempt: the fit phase takes over
            after = entry
            wid = entry[1]
            if not info.preemptible and info.gpus > room[info.team]:  # team at its cap
                if p.give_up():
                    return p.decisions()
                continue
            may_fit = info.gpus <= p.free_total and info.gpus < p.fit_fail
            if may_fit and p.try_fit(wid, info):
                continue
            if may_fit:
                p.fit_fail = info.gpus
            if info.gpus < p.search_fail and info.gpus <= p.free_total + below:
                p.searches += 1
                victims = self._search(p, state, info)
                if victims:
                    return p.decisions(tuple(
                        Preempt(v, PreemptReason.REBALANCE if state.running[v].spec.allocated
                                else PreemptReason.UNALLOCATED,
                                state.running[v].spec.resumable, by=wid)
                        for v in victims
                    ))
                p.search_fail = info.gpus
            if p.give_up():
                return p.decisions()
        self._fit_phase(p, after)
        return p.decisions()

    def _fit_phase(self, p: _LegacyPass, after: tuple[_Key, str] | None) -> None:
        """Hand out free GPUs to the jobs after ``after``, in order, trying only the ones
        that could fit; restarts the merge without the sizes that just failed."""
        while True:
            limit, room = min(p.free_total, p.fit_fail - 1), p.room
            chosen = [
                (gpus, q) for (gpus, team), q in self._queues.items()
                if gpus <= limit and (team is None or gpus <= room[team])
            ]
            if not chosen:
                return
            largest = max(gpus for gpus, _ in chosen)
            heads = [_tail(q, after) for _, q in chosen]
            restart = False
            for entry in heapq.merge(*heads):
                after = entry
                info = self._info[entry[1]]
                if p.capped(info):  # reached its cap during this pass
                    if p.give_up():
                        return
                    continue
                if p.try_fit(entry[1], info):
                    if p.free_total < largest:
                        restart = True  # drop the queues that no longer fit
                        break
                    continue
                p.fit_fail = info.gpus
                if p.give_up():
                    return
                restart = True  # drop the queues of this size and larger
                break
            if not restart:
                return

    def _search(self, p: _LegacyPass, state: ClusterState, info: _Info) -> list[str] | None:
        """:meth:`_victims` for ``info`` on the pass's free GPUs, remembering what found
        nothing while the policy's counts are the pass's (it started nothing yet)."""
        if p.starts or not self.remember:
            return self._victims(state, p.free, p.view.max_size, info.gpus, info.prio)
        if self._no_victims_at != self._changes:
            self._no_victims.clear()
            self._no_victims_at = self._changes
        key = (info.gpus, info.prio)
        if key in self._no_victims:
            self.searches_skipped += 1
            return None
        victims = self._victims(state, p.free, p.view.max_size, info.gpus, info.prio)
        if not victims:
            self._no_victims.add(key)
        return victims

    def _victims(self, state: ClusterState, free: dict[str, int], host_size: int, gpus: int,
                 prio: int) -> list[str] | None:
        """Preemptible running work of lower priority whose GPUs let ``gpus`` fit, or None.
        Hosts are sized up from the per-host counts; only the chosen ones are looked into."""
        pre = self._pre_host  # preemptible GPUs by priority per host: below prio reclaimable
        if gpus <= host_size:
            best: tuple[int, str] | None = None
            for name in self._names:
                have = free[name]
                if have < gpus and have + sum(pre[name][:prio]) >= gpus:
                    need = gpus - have
                    if best is None or need < best[0]:
                        best = (need, name)
            if best is None:
                return None
            name = best[1]
            got, chosen = free[name], []
            for w in self._candidates(state, name, prio):
                if got >= gpus:
                    break
                chosen.append(w)
                got += sum(g for h, g in self._held[w] if h == name)
            return chosen
        # whole hosts: the ones that can be emptied, least work to preempt first
        size = self._size
        full = sorted(
            (size[n] - free[n], n) for n in self._names
            if free[n] + sum(pre[n][:prio]) == size[n]
        )
        chosen_hosts, total = [], 0
        for _, name in full:
            if total >= gpus:
                break
            chosen_hosts.append(name)
            total += self._size[name]
        if total < gpus:
            return None
        victims: list[str] = []
        for name in chosen_hosts:
            for w in self._candidates(state, name, prio):
                if w not in victims:
                    victims.append(w)
        return victims

    def _candidates(self, state: ClusterState, host: str, prio: int) -> list[str]:
        """Victims on ``host`` for priority ``prio``: lowest priority first, then the most
        recently started (least progress lost)."""
        cands = [
            w for w in state.on_host[host]
            if self._info[w].preemptible and self._info[w].prio < prio
            and not state.running[w].stopping
        ]
        cands.sort(key=lambda w: (self._info[w].prio, -state.running[w].started_at, w))
        return cands


def _top(hosts_with: list[int], start: int | None = None) -> int:
    """The most free GPUs a host has (``start``: an upper bound already known)."""
    n = len(hosts_with) - 1 if start is None else start
    while n > 0 and hosts_with[n] == 0:
        n -= 1
    return n


def _tail(queue: list[tuple[_Key, str]], after: tuple[_Key, str] | None
          ) -> Iterator[tuple[_Key, str]]:
    """The entries of a sorted queue after ``after``, without copying the list (``islice``:
    compiled, a generator expression here would be built as a list of re-made tuples)."""
    start = bisect_right(queue, after) if after is not None else 0
    return islice(queue, start, None)
