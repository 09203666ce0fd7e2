"""Where work goes (best fit, whole hosts) and which running work makes room for it."""

from __future__ import annotations

import random

import pytest

from apportion.core import (
    HostState,
    PolicyConfig,
    Preempt,
    PreemptReason,
    Slice,
    WaitReason,
    decide,
)
from apportion.core.placement import HostView, VictimPlan, _open_hosts, find_fit

from .helpers import HOUR, make_hosts, make_spec, make_state, make_tree, run_on

CFG = PolicyConfig()


def test_best_fit_keeps_an_empty_host_for_a_full_host_job() -> None:
    """A 4-GPU job goes on the half-used host, not the empty one, so the 8-GPU job behind it
    still fits in the same pass."""
    st = make_state(make_tree("x", "y"), make_hosts(8, 8))
    run_on(st, make_spec("busy", "y", 4, HOUR), 0.0, ("h1", 4))
    st.submit(make_spec("small", "x", 4, HOUR, 1.0), 1.0)
    st.submit(make_spec("big", "x", 8, HOUR, 2.0), 2.0)
    d = decide(st, 10.0, CFG)
    assert {s.workload: s.placement for s in d.starts} == {
        "small": (Slice("h1", 4),),
        "big": (Slice("h0", 8),),
    }


@pytest.mark.parametrize(
    ("used", "gpus", "expected"),
    [
        ({"h0": 6, "h1": 2}, 2, (Slice("h0", 2),)),  # the fullest host that fits
        ({"h0": 6, "h1": 2}, 3, (Slice("h1", 3),)),
        ({"h0": 0, "h1": 0}, 8, (Slice("h0", 8),)),  # tie: first by name
        ({"h0": 1, "h1": 1}, 8, None),  # 14 GPUs free, but never split below a host
        ({"h0": 0, "h1": 0, "h2": 0}, 16, (Slice("h0", 8), Slice("h1", 8))),
        ({"h0": 0, "h1": 1, "h2": 0}, 16, (Slice("h0", 8), Slice("h2", 8))),  # whole hosts
        ({"h0": 0, "h1": 0, "h2": 0}, 12, (Slice("h0", 8), Slice("h1", 8))),  # rounds up
        ({"h0": 0, "h1": 1, "h2": 1}, 16, None),
    ],
)
def test_find_fit(used: dict[str, int], gpus: int, expected: tuple[Slice, ...] | None) -> None:
    """Single-host requests go best fit on one host; larger ones take whole free hosts."""
    st = make_state(make_tree("x"), make_hosts(*([8] * len(used))))
    for i, (host, g) in enumerate(used.items()):
        if g:
            run_on(st, make_spec(f"r{i}", "x", g, HOUR), 0.0, (host, g))
    assert find_fit(HostView(st), gpus) == expected


def test_sixteen_gpus_take_two_whole_hosts_through_decide() -> None:
    """A 16-GPU job starts on the two empty hosts, never on the partly used one."""
    st = make_state(make_tree("x"), make_hosts(8, 8, 8))
    run_on(st, make_spec("r", "x", 1, HOUR), 0.0, ("h1", 1))
    st.submit(make_spec("big", "x", 16, HOUR, 1.0), 1.0)
    d = decide(st, 5.0, CFG)
    assert d.starts[0].placement == (Slice("h0", 8), Slice("h2", 8))


def test_whole_hosts_fit_after_a_single_host_request_failed_on_mixed_sizes() -> None:
    """Regression: a 6-GPU request finding no 8-GPU host with room must not stop a 12-GPU
    request from taking three empty 4-GPU hosts in the same pass."""
    st = make_state(make_tree("x", "y"), make_hosts(8, 4, 4, 4))
    run_on(st, make_spec("busy", "y", 4, HOUR), 0.0, ("h0", 4))
    st.submit(make_spec("six", "x", 6, HOUR, 1.0), 1.0)
    st.submit(make_spec("twelve", "x", 12, HOUR, 2.0), 2.0)
    d = decide(st, 10.0, CFG)
    assert d.starts[0].workload == "twelve"
    assert d.starts[0].placement == (Slice("h1", 4), Slice("h2", 4), Slice("h3", 4))
    assert d.waiting == {"six": WaitReason.NO_CAPACITY}


def test_no_start_on_draining_hosts() -> None:
    """Only healthy hosts take new work; a request larger than the healthy GPUs waits as
    too large."""
    st = make_state(make_tree("x"), make_hosts(8, 8))
    st.set_host_state("h0", HostState.DRAINING, 0.0)
    st.submit(make_spec("a", "x", 8, HOUR), 0.0)
    st.submit(make_spec("b", "x", 16, HOUR), 0.0)
    d = decide(st, 1.0, CFG)
    assert [s.placement for s in d.starts] == [(Slice("h1", 8),)]
    assert d.waiting == {"b": WaitReason.TOO_LARGE}


# ---- victims ---------------------------------------------------------------------------------


def victim_for(setup: list[tuple[str, float, float, bool, str, int]], ask: int = 4) -> list[str]:
    """Run ``(id, min_runtime, started_at, resumable, host, gpus)`` work of budget y on two
    8-GPU hosts (x and y share equally), let x ask for ``ask`` GPUs at 10 h, and return what
    the first pass preempts."""
    st = make_state(make_tree("x", "y"), make_hosts(8, 8))
    for wid, mrt, at, resumable, host, g in sorted(setup, key=lambda s: s[2]):
        run_on(st, make_spec(wid, "y", g, mrt, at, resumable=resumable), at, (host, g))
    st.submit(make_spec("p", "x", ask, HOUR, 10 * HOUR), 10 * HOUR)
    d = decide(st, 10 * HOUR, CFG)
    assert all(p.by == "p" for p in d.preemptions)
    return [p.workload for p in d.preemptions]


@pytest.mark.parametrize(
    ("name", "setup", "expected"),
    [
        (
            "unallocated before resumable, even with more progress lost",
            [
                ("unalloc", 0.0, 0.0, False, "h0", 4),
                ("res", HOUR, 9 * HOUR, True, "h1", 4),
                ("prot0", 12 * HOUR, 0.0, False, "h0", 4),
                ("prot1", 12 * HOUR, 0.0, False, "h1", 4),
            ],
            ["unalloc"],
        ),
        (
            "resumable before non-resumable",
            [
                ("nonres", HOUR, 9 * HOUR, False, "h0", 4),
                ("res", HOUR, 2 * HOUR, True, "h1", 4),
                ("prot0", 12 * HOUR, 0.0, False, "h0", 4),
                ("prot1", 12 * HOUR, 0.0, False, "h1", 4),
            ],
            ["res"],
        ),
        (
            "least progress lost: the later start",
            [
                ("old", HOUR, 2 * HOUR, False, "h0", 4),
                ("young", HOUR, 8 * HOUR, False, "h1", 4),
                ("prot0", 12 * HOUR, 0.0, False, "h0", 4),
                ("prot1", 12 * HOUR, 0.0, False, "h1", 4),
            ],
            ["young"],
        ),
        (
            "resumable progress lost is bounded by the checkpoint interval",
            [
                ("res_old", HOUR, 0.0, True, "h0", 4),  # loses 30 min (default interval)
                ("nonres_young", HOUR, 9 * HOUR, False, "h1", 4),  # loses 1 h
                ("prot0", 12 * HOUR, 0.0, False, "h0", 4),
                ("prot1", 12 * HOUR, 0.0, False, "h1", 4),
            ],
            ["res_old"],
        ),
        (
            "same progress lost: fewer victims (one 4-GPU job, not two 2-GPU jobs)",
            [
                ("a", 0.0, 9 * HOUR, False, "h0", 2),
                ("b", 0.0, 9 * HOUR, False, "h0", 2),
                ("c", 0.0, 9 * HOUR, False, "h1", 4),
                ("prot0", 12 * HOUR, 0.0, False, "h0", 4),
                ("prot1", 12 * HOUR, 0.0, False, "h1", 4),
            ],
            ["c"],
        ),
        (
            "protected work is never a victim",
            [
                ("prot0", 12 * HOUR, 0.0, False, "h0", 8),
                ("prot1", 12 * HOUR, 0.0, True, "h1", 8),
            ],
            [],
        ),
    ],
)
def test_victim_preference(
    name: str, setup: list[tuple[str, float, float, bool, str, int]], expected: list[str]
) -> None:
    """Victims: unallocated, then resumable, then least progress lost; never protected."""
    assert victim_for(setup) == expected, name


def test_unallocated_victim_reason_and_requeue() -> None:
    """Displacing unallocated work says so, names the preemptor, and requeues it only if it
    is resumable; the preemptor waits for the victims and starts on the next pass."""
    st = make_state(make_tree("x", "y"), make_hosts(8))
    run_on(st, make_spec("u1", "y", 4, 0.0, resumable=True), 0.0, ("h0", 4))
    run_on(st, make_spec("u2", "y", 4, 0.0), 0.0, ("h0", 4))
    st.submit(make_spec("p", "x", 8, HOUR, 5.0), 5.0)
    d = decide(st, 5.0, CFG)
    assert sorted(d.preemptions, key=lambda p: p.workload) == [
        Preempt("u1", PreemptReason.UNALLOCATED, True, by="p"),
        Preempt("u2", PreemptReason.UNALLOCATED, False, by="p"),
    ]
    assert d.starts == () and d.waiting["p"] is WaitReason.WAITING_FOR_PREEMPTION
    for p in d.preemptions:
        st.mark_stopping(p.workload)
    again = decide(st, 6.0, CFG)
    assert again.empty() and again.waiting["p"] is WaitReason.WAITING_FOR_PREEMPTION
    st.requeue("u1", 7.0)
    st.finish("u2", 7.0)
    third = decide(st, 7.0, CFG)
    assert [s.workload for s in third.starts] == ["p"]


def test_multi_host_victim_is_preempted_once() -> None:
    """Regression: an unallocated 16-GPU workload on two hosts, displaced by a 16-GPU
    request, is preempted once (not once per host)."""
    st = make_state(make_tree("x", "y"), make_hosts(8, 8))
    run_on(st, make_spec("v", "y", 16, 0.0), 0.0, ("h0", 8), ("h1", 8))
    st.submit(make_spec("p", "x", 16, HOUR, 10.0), 10.0)
    d = decide(st, 10.0, CFG)
    assert d.preemptions == (Preempt("v", PreemptReason.UNALLOCATED, False, by="p"),)


def test_whole_host_request_needs_every_workload_on_the_host_to_be_a_victim() -> None:
    """A 16-GPU request cannot use a host that holds any protected work."""
    st = make_state(make_tree("x", "y"), make_hosts(8, 8, 8))
    run_on(st, make_spec("u0", "y", 8, 0.0), 0.0, ("h0", 8))
    run_on(st, make_spec("u1", "y", 7, 0.0), 0.0, ("h1", 7))
    run_on(st, make_spec("prot", "y", 1, 8 * HOUR), 0.0, ("h1", 1))
    run_on(st, make_spec("u2", "y", 8, 0.0), 0.0, ("h2", 8))
    st.submit(make_spec("p", "x", 16, HOUR, 10.0), 10.0)
    d = decide(st, 10.0, CFG)
    assert sorted(p.workload for p in d.preemptions) == ["u0", "u2"]


def _random_views(seed: int) -> tuple[HostView, HostView]:
    """A state of 12 hosts (4 and 8 GPUs, one draining) with random allocated and
    unallocated work, some of it stopping, and two views of it with the same random GPUs
    taken: one that reads the state's indexes, and the reference pass's (full), which
    scans every host."""
    rng = random.Random(seed)
    st = make_state(make_tree("a", "b"), make_hosts(*(rng.choice((4, 8)) for _ in range(12))))
    n = 0
    for h in st.hosts.values():
        free = h.gpus
        while free and rng.random() < 0.7:
            gpus = rng.randint(1, free)
            spec = make_spec(f"w{n}", rng.choice("ab"), gpus, rng.choice((0.0, HOUR)))
            run_on(st, spec, 0.0, (h.name, gpus))
            if rng.random() < 0.2:
                st.mark_stopping(spec.id)
            free -= gpus
            n += 1
    st.set_host_state(rng.choice(sorted(st.hosts)), HostState.DRAINING, 1.0)
    fast, full = HostView(st), HostView(st, full=True)
    for name in rng.sample(list(fast.names), 4):
        if fast.free[name]:
            gpus = rng.randint(1, fast.free[name])
            for view in (fast, full):
                view.take((Slice(name, gpus),))
    return fast, full


@pytest.mark.parametrize("seed", range(40))
def test_searches_on_the_state_indexes_answer_as_a_scan_of_every_host(seed: int) -> None:
    """Best fit, whole free hosts, the most GPUs free on one host and the hosts an
    unallocated-only search looks at, read from ``ClusterState.free_hosts`` and
    ``open_hosts`` for the hosts a pass has not touched, equal what a scan of every host
    finds (the reference pass's view) after the pass has taken GPUs on some hosts."""
    fast, full = _random_views(seed)
    assert fast.own() and not fast.full and full.full
    for gpus in range(1, 25):
        assert find_fit(fast, gpus) == find_fit(full, gpus), gpus
        scanned = [
            n for n in full.names if full.free[n] + full.stopping[n] + full.unallocated[n] >= gpus
        ]
        assert _open_hosts(fast, gpus) == scanned, gpus
    assert fast.room(False) == max((full.free[n] for n in full.names), default=0)


def test_a_view_changes_its_own_copy_of_the_counts_never_the_states() -> None:
    """A view reads the state's free and stopping GPUs until the pass first hands some out;
    then it changes a copy of them (without the hosts taking no work), and the state's
    counts stay as they were."""
    st = make_state(make_tree("a"), make_hosts(8, 8, 8))
    run_on(st, make_spec("w0", "a", 4, HOUR), 0.0, ("h0", 4))
    st.mark_stopping("w0")
    st.set_host_state("h2", HostState.DRAINING, 1.0)
    before = (dict(st.free), dict(st.stopping_gpus))
    view = HostView(st)
    view.take((Slice("h1", 3),))
    view.claim(VictimPlan((("h0", 6),), (), (0.0, 0, 0)))
    assert (dict(st.free), dict(st.stopping_gpus)) == before
    assert view.free == {"h0": 0, "h1": 5}
    assert view.stopping == {"h0": 2, "h1": 0}
