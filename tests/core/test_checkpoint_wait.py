"""A rebalance waits for its victims' checkpoints when they are due within
``checkpoint_wait`` (and within the share guarantee's bound), instead of destroying work.

The case of every test: budgets ``a`` and ``b`` share one 8-GPU host half and half; ``b``
holds all 8 GPUs with one resumable workload past its minimum runtime, checkpointing every
30 min from its start at 0; ``a`` asks for its share (4 GPUs), which the guarantee rule
grants by preempting ``b``'s workload.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.core import (
    ClusterState,
    CoreError,
    PolicyConfig,
    Slice,
    WaitReason,
    WorkloadSpec,
    explain,
)
from apportion.core import decide as decide_pass
from apportion.core.config import policy_from
from apportion.core.types import CheckpointWait, Decisions

from .helpers import HOUR, Driver, Job, make_hosts, make_spec, make_state, make_tree
from .strategies import DRIVEN_SETTINGS, Scenario, contended_scenarios

MIN = 60.0
CFG = PolicyConfig()  # checkpoint_wait: 10 min


def decide(st: ClusterState, now: float, cfg: PolicyConfig = CFG) -> Decisions:
    """Both passes (with and without shortcuts) decide the same here."""
    d = decide_pass(st, now, cfg)
    ref = decide_pass(st, now, replace(cfg, shortcuts=False))
    assert (d.preemptions, d.starts, d.checkpoint_waits) == (
        ref.preemptions, ref.starts, ref.checkpoint_waits)
    return d


def _case(ask_at: float, interval: float = 30 * MIN, resumable: bool = True,
          checkpoint_on_term: bool = False) -> ClusterState:
    st = ClusterState(make_tree("a", "b"), make_hosts(8))
    st.submit(WorkloadSpec("b1", "b", 8, 30 * MIN, 0.0, resumable=resumable,
                           checkpoint_interval=interval,
                           checkpoint_on_term=checkpoint_on_term), 0.0)
    st.start("b1", (Slice("h0", 8),), 0.0)
    st.submit(make_spec("a1", "a", 4, submit_time=ask_at), ask_at)
    return st


def test_rebalance_waits_for_a_checkpoint_due_within_the_bound_then_preempts() -> None:
    """At 52 min ``b1``'s next checkpoint is 8 min away (within 10 min): nothing is
    preempted, ``a1`` waits for it (reason, victims and moment in the decisions); at the
    checkpoint, with nothing at risk, ``b1`` is preempted for ``a1``."""
    st = _case(52 * MIN)
    d = decide(st, 52 * MIN)
    assert d.preemptions == ()
    assert d.checkpoint_waits == (CheckpointWait("a1", 60 * MIN, ("b1",)),)
    assert d.recheck_at == 60 * MIN
    assert d.waiting["a1"] is WaitReason.WAITING_FOR_CHECKPOINT
    due = decide(st, 60 * MIN)
    assert [(p.workload, p.by) for p in due.preemptions] == [("b1", "a1")]
    assert due.checkpoint_waits == ()


@pytest.mark.parametrize("late", [0.5, 5.0, 4 * MIN])
def test_a_pass_after_the_awaited_checkpoint_preempts_without_waiting_again(
    late: float,
) -> None:
    """``b1`` checkpoints every 5 min. The service's passes follow the wall clock: the one
    after ``a1``'s wait comes ``late`` seconds after ``b1``'s checkpoint at 55 min, when
    ``b1`` has ``late`` seconds at risk again and its next checkpoint (60 min) is within
    ``checkpoint_wait``. With the wait recorded (as drivers do), that pass preempts ``b1``
    for ``a1``; without it, it waited for the next checkpoint, and again at each, until
    the share guarantee's bound."""
    st = _case(52 * MIN, interval=5 * MIN)
    d = decide(st, 52 * MIN)
    [wait] = d.checkpoint_waits
    assert (wait.until, wait.victims) == (55 * MIN, ("b1",))
    unrecorded = decide(st, 55 * MIN + late)
    assert unrecorded.preemptions == () and [
        w.until for w in unrecorded.checkpoint_waits] == [60 * MIN]
    st.await_checkpoints(wait.workload, wait.until, wait.victims)
    assert st.checkpoints_awaited("a1", 55 * MIN - 1) == frozenset()
    assert st.checkpoints_awaited("a1", 55 * MIN) == {"b1"}
    due = decide(st, 55 * MIN + late)
    assert [(p.workload, p.by) for p in due.preemptions] == [("b1", "a1")]
    assert due.checkpoint_waits == ()


def test_a_recorded_wait_is_forgotten_when_its_workload_is_queued_again() -> None:
    """``a1`` waited for ``b1`` (checkpointing every 5 min) until 55 min, then left the
    queue and came back (queued from 56 min): its new time in the queue is a new request,
    which waits for ``b1``'s next checkpoint (60 min) rather than taking it with progress
    at risk; once it starts, the record is gone."""
    st = _case(52 * MIN, interval=5 * MIN)
    st.await_checkpoints("a1", 55 * MIN, ("b1",))
    p = st.unqueue("a1")
    st.submit(p.spec, 56 * MIN, queued_at=56 * MIN)
    assert st.checkpoints_awaited("a1", 56 * MIN) == frozenset()
    assert [w.until for w in decide(st, 56 * MIN).checkpoint_waits] == [60 * MIN]
    st.await_checkpoints("a1", 60 * MIN, ("b1",))
    st.finish("b1", 57 * MIN)
    st.start("a1", (Slice("h0", 4),), 57 * MIN)
    assert st.fingerprint()["awaited"] == ()


def test_rebalance_preempts_at_once_when_the_checkpoint_is_beyond_the_bound() -> None:
    """At 45 min the checkpoint is 15 min away, more than ``checkpoint_wait``: ``b1`` is
    preempted at once, as without the wait; with ``checkpoint_wait`` 20 min ``a1`` waits."""
    st = _case(45 * MIN)
    d = decide(st, 45 * MIN)
    assert [p.workload for p in d.preemptions] == ["b1"] and d.checkpoint_waits == ()
    longer = decide(st, 45 * MIN, replace(CFG, checkpoint_wait=20 * MIN))
    assert longer.preemptions == () and longer.recheck_at == 60 * MIN


def test_checkpoint_wait_zero_never_waits() -> None:
    """``checkpoint_wait = 0`` turns the wait off: ``b1`` is preempted at once."""
    st = _case(52 * MIN)
    d = decide(st, 52 * MIN, replace(CFG, checkpoint_wait=0.0))
    assert [p.workload for p in d.preemptions] == ["b1"] and d.checkpoint_waits == ()


def test_the_wait_never_ends_after_the_share_guarantee_bound() -> None:
    """``a1`` asked at 0 with ``max_min_runtime`` 1 h: a checkpoint due at 70 min (past
    0 + 1 h) is not waited for, one due at 60 min is."""
    cfg = replace(CFG, max_min_runtime=HOUR, checkpoint_wait=30 * MIN)
    late = _case(0.0, interval=70 * MIN)
    assert [p.workload for p in decide(late, 50 * MIN, cfg).preemptions] == ["b1"]
    on_time = _case(0.0, interval=60 * MIN)
    assert decide(on_time, 50 * MIN, cfg).recheck_at == 60 * MIN


@pytest.mark.parametrize(
    ("victim", "why"),
    [
        ({"resumable": False}, "not resumable: it loses its whole run whenever it stops"),
        ({"checkpoint_on_term": True}, "checkpoints on SIGTERM: nothing at risk"),
    ],
)
def test_no_wait_when_waiting_saves_nothing(victim: dict[str, object], why: str) -> None:
    """A victim that loses nothing when stopped now, or loses everything whenever it is
    stopped, is preempted at once."""
    st = _case(52 * MIN, **victim)  # type: ignore[arg-type]
    d = decide(st, 52 * MIN)
    assert [p.workload for p in d.preemptions] == ["b1"], why
    assert d.checkpoint_waits == ()


def test_no_wait_for_a_restarted_run_that_reported_no_checkpoint() -> None:
    """A restarted run's checkpoints fall after its set-up time, unknown to the policy: it is
    not waited for; once it reports a checkpoint, its next one is."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8))
    st.submit(make_spec("b1", "b", 8, min_runtime=30 * MIN, resumable=True,
                        checkpoint_interval=30 * MIN), 0.0)
    st.start("b1", (Slice("h0", 8),), 0.0)
    st.requeue("b1", 10 * MIN)
    st.start("b1", (Slice("h0", 8),), 10 * MIN)
    now = 10 * MIN + CFG.restart_protection + 12 * MIN  # 8 min before the 30-min mark
    st.submit(make_spec("a1", "a", 4, submit_time=now), now)
    assert [p.workload for p in decide(st, now).preemptions] == ["b1"]
    st.checkpoint("b1", now - 25 * MIN)  # reported: next one 5 min from now
    assert decide(st, now).recheck_at == pytest.approx(now + 5 * MIN)


def test_checkpoint_wait_over_the_cap_is_refused() -> None:
    """A wait longer than ``max_min_runtime`` could break the share guarantee's bound:
    refused, naming the field."""
    with pytest.raises(CoreError, match="checkpoint_wait"):
        PolicyConfig(checkpoint_wait=9 * HOUR)


def test_explain_shows_the_checkpoint_wait() -> None:
    """``explain`` says what the workload waits for, whom, and when they are preempted."""
    st = _case(52 * MIN)
    e = explain(st, 52 * MIN, CFG, "a1")
    assert e.wait_reason is WaitReason.WAITING_FOR_CHECKPOINT
    assert e.awaiting == ("b1",) and e.earliest_start == 60 * MIN
    text = "\n".join(e.lines())
    assert "waiting for the work it displaces to checkpoint" in text
    assert "b1 checkpoints in 8 min" in text


def test_a_wait_with_two_victims_ends_at_the_last_checkpoint() -> None:
    """``b`` holds the host with ``b1`` and ``b2`` (2 GPUs each, resumable, started at 0,
    checkpointing every 30 and 27 min) and ``b3`` (4 GPUs, not resumable); ``a`` asks at
    52 min for its share, 4 GPUs. The cheapest room is ``b1`` and ``b2`` (``b3`` would lose
    its whole run): the rebalance waits for both until 60 min, ``b1``'s checkpoint, the
    last; ``b2``, which checkpoints at 54, keeps running meanwhile and is preempted with
    ``b1`` at 60 (losing the 6 min since its checkpoint); ``explain`` names both."""
    st = ClusterState(make_tree("a", "b"), make_hosts(8))
    for wid, gpus, interval, resumable in (("b1", 2, 30 * MIN, True), ("b2", 2, 27 * MIN, True),
                                           ("b3", 4, 0.0, False)):
        st.submit(WorkloadSpec(wid, "b", gpus, 30 * MIN, 0.0, resumable=resumable,
                               checkpoint_interval=interval), 0.0)
        st.start(wid, (Slice("h0", gpus),), 0.0)
    st.submit(make_spec("a1", "a", 4, submit_time=52 * MIN), 52 * MIN)
    for now in (52 * MIN, 54 * MIN):
        d = decide(st, now)
        assert d.preemptions == ()
        assert [(w.workload, w.until, set(w.victims)) for w in d.checkpoint_waits] == [
            ("a1", 60 * MIN, {"b1", "b2"})]
        assert d.recheck_at == 60 * MIN
    d = decide(st, 60 * MIN)
    assert sorted((p.workload, p.by) for p in d.preemptions) == [("b1", "a1"), ("b2", "a1")]
    assert d.checkpoint_waits == ()
    text = "\n".join(explain(st, 52 * MIN, CFG, "a1").lines())
    assert "b1, b2 checkpoint in 8 min: then they are preempted for this workload" in text


def _check_waits(state: ClusterState, now: float, d: Decisions) -> None:
    """Each wait ends at a checkpoint of its victims: every victim with progress at risk now
    writes a checkpoint during the wait (at ``until`` it has at most the time since ``now``
    at risk), and the wait ends at the last of those checkpoints (one of them has nothing at
    risk at ``until``: a victim that checkpointed earlier in the wait loses what it did
    since); ``recheck_at`` is the first ``until``. (check_pass checks the bound, the
    guarantee's bound and that the victims run unprotected.)"""
    for w in d.checkpoint_waits:
        left_at_end = []
        for v in w.victims:
            r = state.running[v]
            if r.at_risk(now, CFG.default_checkpoint_interval) <= 0.0:
                continue  # nothing to save: it only frees GPUs with the others
            assert r.spec.resumable, f"{w.workload} waits for non-resumable {v}"
            interval = r.spec.checkpoint_interval or CFG.default_checkpoint_interval
            at_end = r.at_risk(w.until, CFG.default_checkpoint_interval)
            assert at_end <= w.until - now + 1e-6, (
                f"{w.workload} waits until {w.until} for {v}, which writes no checkpoint "
                f"in the wait ({at_end:g} s at risk then)"
            )
            # by rounding, a checkpoint exactly at ``until`` may read as a whole interval
            left_at_end.append(min(at_end, abs(interval - at_end)))
        assert not left_at_end or min(left_at_end) < 1e-6, (
            f"{w.workload}'s wait until {w.until} ends at no victim's checkpoint "
            f"({left_at_end} s at risk then)"
        )
    firsts = [w.until for w in d.checkpoint_waits]
    assert d.recheck_at == (min(firsts) if firsts else None)


@st.composite
def checkpointing_scenarios(
    draw: st.DrawFn, intervals: tuple[float, ...] = (0.0, 700.0, 900.0, 1300.0)
) -> Scenario:
    """Contended scenarios whose submissions and checkpoint intervals (of ``intervals``)
    do not line up with the minimum runtimes (so rebalances find victims between
    checkpoints), with more resumable work that checkpoints on its interval only."""
    sc = draw(contended_scenarios())
    jobs = [
        Job(replace(j.spec, submit_time=j.spec.submit_time + draw(st.integers(0, 599)),
                    checkpoint_interval=draw(st.sampled_from(intervals)),
                    resumable=j.spec.resumable or draw(st.booleans()),
                    checkpoint_on_term=draw(st.integers(0, 3)) == 0),
            j.duration)
        for j in sc.jobs
    ]
    return Scenario(sc.tree, sc.hosts, jobs, [])


@DRIVEN_SETTINGS
@given(checkpointing_scenarios())
def test_checkpoint_waits_end_at_checkpoints_and_keep_every_invariant(sc: Scenario) -> None:
    """Over a contended replay (random checkpoint intervals and SIGTERM checkpoints), every
    pass keeps every invariant with rebalances waiting for checkpoints (check_pass: no
    protected victim, waits within ``checkpoint_wait`` and the share guarantee's bound),
    and every wait ends where its victims have saved their progress; the driver passes at
    each ``recheck_at``, as the simulator does."""
    drv = Driver(make_state(sc.tree, sc.hosts), config=CFG, on_pass=_check_waits)
    drv.add_jobs(sc.jobs)
    drv.run(until=14 * 3600.0, start=0.0)


@DRIVEN_SETTINGS
@given(checkpointing_scenarios(intervals=(0.0, 240.0, 300.0, 500.0)))
def test_late_passes_never_wait_twice_for_the_same_victim(sc: Scenario) -> None:
    """Replays like the above, with checkpoint intervals within ``checkpoint_wait`` and
    every asked-for pass coming 7 s late (as the service's, on the wall clock): every
    invariant still holds, and once a request's wait for a victim is over, no later pass
    of the same time in the queue makes it wait for that victim again (it takes it, or
    does without it)."""
    waits: list[tuple[float, str, float, frozenset[str]]] = []  # until, request, queued_at

    def check(state: ClusterState, now: float, d: Decisions) -> None:
        for w in d.checkpoint_waits:
            queued_at = state.pending[w.workload].queued_at
            again = {v for until, wid, at, victims in waits
                     if (wid, at) == (w.workload, queued_at) and until <= now
                     for v in victims & set(w.victims)}
            assert not again, f"{w.workload} waits again at {now} for {sorted(again)}"
        waits.extend((w.until, w.workload, state.pending[w.workload].queued_at,
                      frozenset(w.victims)) for w in d.checkpoint_waits)

    drv = Driver(make_state(sc.tree, sc.hosts), config=CFG, on_pass=check, recheck_late=7.0)
    drv.add_jobs(sc.jobs)
    drv.run(until=14 * 3600.0, start=0.0)
    assert drv.passes, "the replay decided nothing"


def test_settings_without_checkpoint_wait_default_it_to_a_shorter_max_min_runtime() -> None:
    """``policy_from``: settings that give a ``max_min_runtime`` under 10 min and no
    ``checkpoint_wait`` get that as its default (the 10 min was refused as over it); with
    a longer one, or none, it is the 10 min of PolicyConfig; one given is kept (and refused
    if over)."""
    short = {"max_min_runtime": 120.0, "restart_protection": 60.0}
    assert policy_from(short).checkpoint_wait == 120.0
    assert policy_from({"max_min_runtime": HOUR}).checkpoint_wait == PolicyConfig().checkpoint_wait
    assert policy_from({}) == PolicyConfig()
    with pytest.raises(CoreError, match="checkpoint_wait: 15 min is over max_min_runtime"):
        policy_from({**short, "checkpoint_wait": 900.0})
