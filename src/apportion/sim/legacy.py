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
  gives up after ``scan_depth`` jobs that could not start (like Slurm's ``bf_max_job_test``).

It ignores budgets, usage and minimum runtimes (the metrics still use them). It returns core
``Decisions`` and places work with core's ``find_fit`` (best fit on one host; whole hosts
beyond one host's GPUs), so both policies obey the same shape rules.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping

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


class _FreeView(HostView):
    """Core's host view built from the policy's own incremental counts (not a state scan)."""

    def __init__(self, free: dict[str, int], size: dict[str, int], names: list[str],
                 max_size: int) -> None:  # no super().__init__: nothing else is used
        self.free = free
        self.size = size
        self.names = names
        self.max_size = max_size


class _Info:
    __slots__ = ("gpus", "key", "preemptible", "prio", "team")

    def __init__(self, job: SimJob, team: str) -> None:
        self.prio = int(job.legacy_priority)
        self.key: _Key = (-self.prio, job.spec.submit_time, job.spec.id)
        self.gpus = job.spec.gpus
        self.preemptible = job.legacy_preemptible
        self.team = team


class LegacyPolicy:
    """``policy(state, now, config) -> Decisions`` for the old scheduler.

    ``jobs`` maps workload ids to their :class:`SimJob` (the legacy priority and opt-out
    live there, not in the spec). The engine calls :meth:`observe` on every queue and host
    change, so the priority index, the free GPUs per host and the counts the cap and the
    preemption rule need are kept incrementally instead of being rebuilt on every pass.
    """

    def __init__(
        self,
        jobs: Mapping[str, SimJob],
        tree: BudgetTree,
        total_gpus: int,
        team_depth: int = 2,
        cap_factor: float = 1.0,
        scan_depth: int = 100,
    ) -> None:
        self.jobs = jobs
        self.team_depth = team_depth
        self.scan_depth = scan_depth
        teams = {team_of(leaf, team_depth) for leaf in tree.leaves}
        self.caps = {t: cap_factor * tree.share(t) * total_gpus for t in teams}
        self._info: dict[str, _Info] = {}
        self._pending: list[tuple[_Key, str]] = []
        # pending jobs by GPUs asked, for early exits: preemptible ones, and opted-out ones
        # per team (those of a team at its cap cannot start whatever their size)
        self._sizes: dict[str | None, dict[int, int]] = {None: {}}
        self._pre_gpus = [0] * (max(LegacyPriority) + 1)  # running preemptible GPUs by level
        self._np_used = dict.fromkeys(teams, 0)  # running non-preemptible GPUs by team
        self._held: dict[str, tuple[tuple[str, int], ...]] = {}  # running id -> its slices
        self._used: dict[str, int] = {}  # host -> GPUs held
        self._size: dict[str, int] = {}  # every host's GPUs
        self._free: dict[str, int] = {}  # healthy host -> free GPUs
        self._names: list[str] = []  # healthy hosts, sorted
        self._draining: set[str] = set()

    # ---- the index -------------------------------------------------------------------
    def _job(self, wid: str) -> _Info:
        info = self._info.get(wid)
        if info is None:
            job = self.jobs[wid]
            info = self._info[wid] = _Info(job, team_of(job.spec.budget, self.team_depth))
        return info

    def observe(self, kind: str, name: str, state: ClusterState) -> None:
        """``queued`` (submitted or requeued), ``started``, ``ended`` (stopped running) for a
        workload ``name``; ``host`` when host ``name`` was added or changed state."""
        if kind == "host":
            self._host(name, state)
            return
        info = self._job(name)
        if kind == "queued":
            insort(self._pending, (info.key, name))
            sizes = self._sizes.setdefault(None if info.preemptible else info.team, {})
            sizes[info.gpus] = sizes.get(info.gpus, 0) + 1
            return
        if kind == "started":
            entry = (info.key, name)
            i = bisect_left(self._pending, entry)
            if i < len(self._pending) and self._pending[i] == entry:
                del self._pending[i]
                sizes = self._sizes[None if info.preemptible else info.team]
                left = sizes[info.gpus] - 1
                if left:
                    sizes[info.gpus] = left
                else:
                    del sizes[info.gpus]
            slices = tuple((s.host, s.gpus) for s in state.running[name].placement)
            self._held[name] = slices
            sign = 1
        else:
            slices = self._held.pop(name)
            sign = -1
        held = 0
        for host, gpus in slices:
            held += gpus
            self._used[host] += sign * gpus
            if host in self._free:
                self._free[host] -= sign * gpus
        if info.preemptible:
            self._pre_gpus[info.prio] += sign * held
        else:
            self._np_used[info.team] += sign * held

    def _host(self, name: str, state: ClusterState) -> None:
        host = state.hosts[name]
        self._size[name] = host.gpus
        self._used.setdefault(name, 0)
        if host.state is HostState.HEALTHY:
            self._free[name] = host.gpus - self._used[name]
        else:
            self._free.pop(name, None)
        if host.state is HostState.DRAINING:
            self._draining.add(name)
        else:
            self._draining.discard(name)
        self._names = sorted(self._free)

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
        free = dict(self._free)
        view = _FreeView(free, self._size, self._names, max(self._size.values(), default=0))
        free_total = sum(free.values())
        below_of = [sum(self._pre_gpus[:p]) for p in range(len(self._pre_gpus))]
        starts: list[Start] = []
        np_planned: dict[str, int] = {}
        skipped = searches = 0
        fit_fail = search_fail = 1 << 30  # smallest request that failed (free only shrinks)
        smallest = self._smallest()  # no job that may start asks for fewer GPUs
        infos, caps, np_used = self._info, self.caps, self._np_used
        for _, wid in self._pending:
            info = infos[wid]
            gpus = info.gpus
            below = below_of[info.prio]
            may_fit = gpus <= free_total and gpus < fit_fail
            may_preempt = below > 0 and gpus < search_fail and searches < 3
            if (may_fit or may_preempt) and not info.preemptible:
                held = np_used[info.team] + np_planned.get(info.team, 0)
                if held + gpus > caps[info.team] + 1e-9:
                    may_fit = may_preempt = False
            if may_fit:
                placement = find_fit(view, gpus)
                if placement is not None:
                    starts.append(Start(wid, placement))
                    view.take(placement)
                    free_total -= sum(s.gpus for s in placement)
                    if not info.preemptible:
                        np_planned[info.team] = np_planned.get(info.team, 0) + gpus
                    continue
                fit_fail = gpus
            if may_preempt and gpus <= free_total + below:
                searches += 1
                victims = self._victims(state, free, view.max_size, gpus, info.prio)
                if victims:
                    preempts = tuple(
                        Preempt(v, PreemptReason.REBALANCE if state.running[v].spec.allocated
                                else PreemptReason.UNALLOCATED,
                                state.running[v].spec.resumable, by=wid)
                        for v in victims
                    )
                    return Decisions(starts=tuple(starts), preemptions=preempts)
                search_fail = gpus
            # later jobs have the same or lower priority (fewer victims) and ask >= smallest
            can_fit = free_total >= smallest and fit_fail > smallest
            can_preempt = below > 0 and searches < 3 and search_fail > smallest
            if not (can_fit or can_preempt):
                break
            skipped += 1
            if skipped >= self.scan_depth:
                break
        return Decisions(starts=tuple(starts))

    def _smallest(self) -> int:
        """GPUs of the smallest pending job that the team caps allow to start."""
        best = 1 << 30
        for team, sizes in self._sizes.items():
            if not sizes:
                continue
            least = min(sizes)
            if team is not None and self._np_used[team] + least > self.caps[team] + 1e-9:
                continue
            best = min(best, least)
        return best

    def _victims(self, state: ClusterState, free: dict[str, int], host_size: int, gpus: int,
                 prio: int) -> list[str] | None:
        """Preemptible running work of lower priority whose GPUs let ``gpus`` fit, or None."""
        def victim_key(wid: str) -> tuple[int, float, str]:
            return (self._info[wid].prio, -state.running[wid].started_at, wid)

        per_host: dict[str, list[str]] = {}
        reclaim: dict[str, int] = {}
        for name in self._names:
            cands = [
                w for w in state.on_host[name]
                if self._info[w].preemptible and self._info[w].prio < prio
                and not state.running[w].stopping
            ]
            cands.sort(key=victim_key)
            per_host[name] = cands
            reclaim[name] = free[name] + sum(
                g for w in cands for h, g in self._held[w] if h == name
            )
        if gpus <= host_size:
            best: tuple[int, str] | None = None
            for name in self._names:
                if reclaim[name] >= gpus and free[name] < gpus:
                    need = gpus - free[name]
                    if best is None or need < best[0]:
                        best = (need, name)
            if best is None:
                return None
            name = best[1]
            got, chosen = free[name], []
            for w in per_host[name]:
                if got >= gpus:
                    break
                chosen.append(w)
                got += sum(g for h, g in self._held[w] if h == name)
            return chosen
        # whole hosts: the ones that can be emptied, fewest victims first
        full = sorted((len(per_host[n]), n) for n in self._names if reclaim[n] == self._size[n])
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
            for w in per_host[name]:
                if w not in victims:
                    victims.append(w)
        return victims
