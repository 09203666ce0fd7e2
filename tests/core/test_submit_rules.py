"""The rules of the submission vocabulary, on hand-built cases: time limits (``decide``
stops work at its limit), dependencies and array throttles (``core.gating`` keeps held work
out of the queue), and the parsers of ``--array`` and ``--dependency``."""

from __future__ import annotations

import dataclasses

import pytest

from apportion.core import (
    After,
    CoreError,
    Hold,
    PolicyConfig,
    PreemptReason,
    Slice,
    Status,
    WaitReason,
    WorkloadSpec,
    allowed_hosts,
    decide,
    decision_log,
    parse_array,
    parse_dependency,
    release,
    validate_spec,
)

from .helpers import HOUR, make_hosts, make_spec, make_state, make_tree, run_on

CFG = PolicyConfig()


# ---- time limits -------------------------------------------------------------------------
def test_work_is_stopped_once_its_time_limit_has_passed_and_not_before() -> None:
    """A run with a 1 h limit started at 0: no timeout at 1 h - 1 s, a timeout at 1 h (and
    after); work without a limit is never timed out; the decision log names it."""
    st = make_state(make_tree("a"), make_hosts(8))
    limited = dataclasses.replace(make_spec("lim", gpus=2, min_runtime=600), time_limit=HOUR)
    run_on(st, limited, 0.0, ("h0", 2))
    run_on(st, make_spec("free", gpus=2, min_runtime=600), 0.0, ("h0", 2))
    assert decide(st, HOUR - 1, CFG).timeouts == ()
    d = decide(st, HOUR, CFG)
    assert d.timeouts == ("lim",) and not d.empty()
    assert f"{HOUR:.3f} timeout lim" in decision_log(HOUR, d)
    assert decide(st, 5 * HOUR, CFG).timeouts == ("lim",)


def test_stopping_work_is_not_timed_out_again_and_finished_work_leaves_the_index() -> None:
    """Once its stop was issued (stopping) a run is not timed out again; when it ends, the
    state forgets its deadline."""
    st = make_state(make_tree("a"), make_hosts(8))
    spec = dataclasses.replace(make_spec("lim", min_runtime=60), time_limit=120)
    run_on(st, spec, 0.0, ("h0", 1))
    assert st.deadlines == {"lim": 120.0}
    st.mark_stopping("lim")
    assert decide(st, 200, CFG).timeouts == ()
    st.finish("lim", 200)
    assert st.deadlines == {}


def test_a_timed_out_workload_is_no_victim_in_the_same_pass() -> None:
    """Unallocated work past its limit is stopped for its limit only: the allocated request
    that needs its GPUs waits for it to exit instead of also preempting it (one stop, one
    reason)."""
    st = make_state(make_tree("a", "b"), make_hosts(4))
    spec = dataclasses.replace(make_spec("old", "a", 4, 0.0), time_limit=100)
    run_on(st, spec, 0.0, ("h0", 4))
    st.submit(make_spec("new", "b", 4, HOUR, 150), 150)
    d = decide(st, 150, CFG)
    assert d.timeouts == ("old",)
    assert all(p.workload != "old" for p in d.preemptions)
    assert d.starts == ()


def test_time_limits_are_checked_against_the_cap_and_the_minimum_runtime() -> None:
    """With a cap of 8 h, a 9 h limit and no limit are refused in human units; a limit
    shorter than the minimum runtime is refused; within the cap it is accepted."""
    st = make_state(make_tree("a"), make_hosts(8))
    cfg = PolicyConfig(max_time_limit=8 * HOUR, default_time_limit=HOUR)
    spec = make_spec("w", min_runtime=HOUR)
    with pytest.raises(CoreError, match=r"time_limit: 9 h is over the cap of 8 h"):
        validate_spec(dataclasses.replace(spec, time_limit=9 * HOUR), st, cfg)
    with pytest.raises(CoreError, match=r"time_limit: none is over the cap of 8 h"):
        validate_spec(spec, st, cfg)
    with pytest.raises(CoreError, match=r"30 min is shorter than its minimum runtime of 1 h"):
        validate_spec(dataclasses.replace(spec, time_limit=1800), st, CFG)
    validate_spec(dataclasses.replace(spec, time_limit=2 * HOUR), st, cfg)
    with pytest.raises(CoreError, match="default_time_limit"):
        PolicyConfig(max_time_limit=HOUR, default_time_limit=2 * HOUR)


def test_preemption_reasons_are_unchanged_by_time_limits() -> None:
    """A limit far away changes nothing: the same preemption as without one."""
    def run(limit: float) -> list[str]:
        st = make_state(make_tree("a", "b"), make_hosts(4))
        spec = dataclasses.replace(make_spec("u", "a", 4, 0.0), time_limit=limit)
        run_on(st, spec, 0.0, ("h0", 4))
        st.submit(make_spec("n", "b", 4, HOUR, 10), 10)
        d = decide(st, 10, CFG)
        assert [p.reason for p in d.preemptions] == [PreemptReason.UNALLOCATED]
        return decision_log(10, d)

    assert run(0.0) == run(100 * HOUR)


# ---- dependencies and arrays -------------------------------------------------------------
@pytest.mark.parametrize(
    ("after", "status", "outcome"),
    [
        (After.OK, Status.RUNNING, "wait"),
        (After.OK, Status.COMPLETED, "ready"),
        (After.OK, Status.FAILED, "never: dependency a failed (afterok)"),
        (After.OK, Status.TIMEOUT, "never: dependency a timeout (afterok)"),
        (After.ANY, Status.PENDING, "wait"),
        (After.ANY, Status.FAILED, "ready"),
        (After.ANY, Status.COMPLETED, "ready"),
        (After.NOTOK, Status.COMPLETED, "never: dependency a completed (afternotok)"),
        (After.NOTOK, Status.CANCELLED, "ready"),
        (After.NOTOK, Status.STOPPING, "wait"),
    ],
)
def test_one_dependency(after: After, status: Status, outcome: str) -> None:
    """Slurm's rules: afterok needs exit 0, afterany any end, afternotok any end but a
    completion; one that can no longer be met ends the dependent with the reason."""
    ready, ended = release([Hold("b", after=((after, "a"),))], {"a": status}.get, {})
    got = "ready" if ready else f"never: {ended[0][1]}" if ended else "wait"
    assert got == outcome


def test_a_dependency_that_fails_ends_the_dependent_even_while_others_wait() -> None:
    """afterok:a:b with a still running and b failed: it can never run, so it ends now."""
    hold = Hold("c", after=((After.OK, "a"), (After.OK, "b")))
    ready, ended = release([hold], {"a": Status.RUNNING, "b": Status.FAILED}.get, {})
    assert (ready, ended) == ([], [("c", "dependency b failed (afterok)")])


def test_an_unknown_dependency_ends_the_dependent() -> None:
    ready, ended = release([Hold("c", after=((After.ANY, "zz"),))], {}.get, {})
    assert ended == [("c", "dependency zz does not exist (afterany)")]


def test_array_throttle_releases_in_index_order_up_to_the_limit() -> None:
    """An array of 5 with throttle 2 and one element already released and unfinished:
    one more is released, the lowest index; with none active, two; another array's count
    is its own."""
    holds = [Hold(f"x{i}", array="x", index=i, throttle=2) for i in (4, 1, 3, 2)]
    assert release(holds, {}.get, {"x": 1}) == (["x1"], [])
    assert release(holds, {}.get, {}) == (["x1", "x2"], [])
    assert release(holds, {}.get, {"x": 2, "y": 0}) == ([], [])
    others = [Hold("y0", array="y", index=0, throttle=1)]
    assert release(holds + others, {}.get, {"x": 2}) == (["y0"], [])


def test_an_array_element_waits_for_its_dependency_before_counting_against_the_throttle() -> None:
    """A held element whose dependency is not met takes no room: the next index goes."""
    holds = [
        Hold("x0", after=((After.OK, "d"),), array="x", index=0, throttle=1),
        Hold("x1", array="x", index=1, throttle=1),
    ]
    assert release(holds, {"d": Status.RUNNING}.get, {}) == (["x1"], [])


@pytest.mark.parametrize(
    ("text", "indexes", "throttle"),
    [("0-3", (0, 1, 2, 3), 0), ("1,3,5-7", (1, 3, 5, 6, 7), 0), ("0-99%10", tuple(range(100)),
                                                                  10), ("7", (7,), 0)],
)
def test_parse_array(text: str, indexes: tuple[int, ...], throttle: int) -> None:
    assert parse_array(text) == (indexes, throttle)


@pytest.mark.parametrize(
    ("text", "message"),
    [("5-3", "ends before it starts"), ("a-b", "is not an index"), ("0-9%0", "throttle"),
     ("0-9%x", "throttle"), ("", "is not an index"),
     # a throttle too large to store, and digits int() refuses or reads (not ASCII): all
     # named errors, never a ValueError (a 500) nor an index read from '٣'
     ("0-2%99999999999999999999", "throttle after % must be a whole number from 1 to 10000"),
     ("0-2%²", "throttle"), ("²-3", "is not an index"), ("1-٣", "is not an index"),
     ("0-" + "9" * 5000, "index 9{5000} is over 2147483647")],
)
def test_parse_array_refuses_with_the_part_at_fault(text: str, message: str) -> None:
    with pytest.raises(CoreError, match=message):
        parse_array(text)


def test_parse_array_reads_a_ranges_step_as_slurm_does() -> None:
    """``0-6:2`` is every 2nd index of the range (0, 2, 4, 6), as sbatch's ``--array``
    reads a step, beside other parts and a throttle (``0-15:4,21%2``); it was refused as
    "'0-6:2' is not an index or a range". A step of 0, or one on a single index, is
    refused naming the part; the size bound counts the stepped indexes."""
    assert parse_array("0-6:2") == ((0, 2, 4, 6), 0)
    assert parse_array("0-15:4,21%2") == ((0, 4, 8, 12, 21), 2)
    assert parse_array("1-4:10") == ((1,), 0)
    assert len(parse_array("0-99990:10")[0]) == 10_000
    with pytest.raises(CoreError, match="the step after : in '0-6:0' must be at least 1"):
        parse_array("0-6:0")
    for bad in ("5:2", "0-6:", "0-6:x"):
        with pytest.raises(CoreError, match="is not an index or a range like 0-99"):
            parse_array(bad)


def test_an_array_error_names_the_value_once_when_the_part_refused_is_all_of_it() -> None:
    """``--array abc`` is refused as ``array: 'abc' is not an index ...`` (it said
    ``array: 'abc': 'abc' is not ...``); a part of a longer value is named after the whole
    value (``array: '1,abc': 'abc' is not ...``, ``'abc%2'`` likewise)."""
    cases = [("abc", "array: 'abc' is not an index or a range"),
             ("5-2", "array: range '5-2' ends before it starts"),
             ("0-6:0", "array: the step after : in '0-6:0' must be at least 1"),
             ("1,abc", "array: '1,abc': 'abc' is not an index or a range"),
             ("abc%2", "array: 'abc%2': 'abc' is not an index or a range")]
    for text, said in cases:
        with pytest.raises(CoreError) as e:
            parse_array(text)
        assert str(e.value).startswith(said), (text, str(e.value))


def test_parse_dependency() -> None:
    assert parse_dependency("afterok:w-1:w-2,afternotok:w-3") == (
        (After.OK, "w-1"), (After.OK, "w-2"), (After.NOTOK, "w-3"))
    with pytest.raises(CoreError, match="type must be one of afterok, afterany, afternotok"):
        parse_dependency("after:w-1")
    with pytest.raises(CoreError, match="names no workload"):
        parse_dependency("afterok")


# ---- host constraints --------------------------------------------------------------------
def limited(spec: WorkloadSpec, *hosts: str) -> WorkloadSpec:
    return dataclasses.replace(spec, hosts=tuple(sorted(hosts)))


def test_work_limited_to_some_hosts_is_placed_only_there() -> None:
    """Best fit alone would put 2 GPUs on the fuller host h0 (2 free); limited to h1 it
    goes to h1."""
    st = make_state(make_tree("a"), make_hosts(8, 8))
    run_on(st, make_spec("fill", gpus=6), 0.0, ("h0", 6))
    st.submit(limited(make_spec("w", gpus=2, submit_time=1), "h1"), 1)
    [start] = decide(st, 1, CFG).starts
    assert start.placement == (Slice("h1", 2),)
    free = make_state(make_tree("a"), make_hosts(8, 8))
    run_on(free, make_spec("fill", gpus=6), 0.0, ("h0", 6))
    free.submit(make_spec("w", gpus=2, submit_time=1), 1)
    assert decide(free, 1, CFG).starts[0].placement == (Slice("h0", 2),)


def test_a_limited_request_that_fails_does_not_stop_larger_ones_that_may_go_anywhere() -> None:
    """4 GPUs limited to h0 (2 free) cannot start; 6 GPUs of the same budget, ranked after
    it and free to use h1, still start in the same pass."""
    st = make_state(make_tree("a"), make_hosts(8, 8))
    run_on(st, make_spec("fill", gpus=6, min_runtime=8 * HOUR), 0.0, ("h0", 6))
    st.submit(limited(make_spec("small", gpus=4, submit_time=1), "h0"), 1)
    st.submit(make_spec("large", gpus=6, submit_time=2), 2)
    d = decide(st, 2, CFG)
    assert [s.workload for s in d.starts] == ["large"]
    assert d.starts[0].placement == (Slice("h1", 6),)
    assert d.waiting["small"] is WaitReason.NO_CAPACITY


def test_a_limited_request_displaces_unallocated_work_only_on_its_hosts() -> None:
    """Unallocated work fills h0 and h1; allocated work limited to h1 displaces the
    unallocated workload on h1, not the one on h0."""
    st = make_state(make_tree("a", "b"), make_hosts(4, 4))
    run_on(st, make_spec("u0", "a", 4, 0.0), 0.0, ("h0", 4))
    run_on(st, make_spec("u1", "a", 4, 0.0), 0.0, ("h1", 4))
    st.submit(limited(make_spec("n", "b", 4, HOUR, 10), "h1"), 10)
    d = decide(st, 10, CFG)
    assert [(p.workload, p.reason) for p in d.preemptions] == [
        ("u1", PreemptReason.UNALLOCATED)]


def test_host_limits_are_checked_and_worked_out_from_nodelist_and_exclude() -> None:
    """Unknown hosts and requests too large for the hosts allowed are refused naming the
    field; ``allowed_hosts`` keeps the nodelist less the excluded, or all hosts less the
    excluded, and refuses to leave none."""
    st = make_state(make_tree("a"), make_hosts(8, 4, 4))
    with pytest.raises(CoreError, match=r"hosts: unknown host 'h9'"):
        validate_spec(limited(make_spec("w"), "h9"), st, CFG)
    with pytest.raises(CoreError, match=r"hosts: 6 GPUs cannot fit on the hosts it may use "
                                        r"\(h1, h2\)"):
        validate_spec(limited(make_spec("w", gpus=6), "h1", "h2"), st, CFG)
    validate_spec(limited(make_spec("w", gpus=8), "h0"), st, CFG)
    with pytest.raises(CoreError, match="cannot fit"):
        validate_spec(limited(make_spec("w", gpus=13), "h0", "h1"), st, CFG)  # 12 there
    names = ["h0", "h1", "h2"]
    assert allowed_hosts(names) == ()
    assert allowed_hosts(names, ["h1", "h2"], ["h2"]) == ("h1",)
    assert allowed_hosts(names, (), ["h0"]) == ("h1", "h2")
    with pytest.raises(CoreError, match="leave no host"):
        allowed_hosts(names, ["h1"], ["h1"])


def test_a_pass_that_times_work_out_does_not_settle_the_instant() -> None:
    """GPUs of work stopped at its limit may be free at once (a driver without a grace
    period): the drivers pass again at the same instant, as after a preemption, so waiting
    work gets them without waiting for the next event."""
    st = make_state(make_tree("a"), make_hosts(4))
    spec = dataclasses.replace(make_spec("old", gpus=4, min_runtime=60), time_limit=100)
    run_on(st, spec, 0.0, ("h0", 4))
    st.submit(make_spec("next", gpus=4, submit_time=50), 50)
    d = decide(st, 100, CFG)
    assert d.timeouts == ("old",) and not d.settles()
    st.mark_stopping("old")
    st.finish("old", 100)
    assert [s.workload for s in decide(st, 100, CFG).starts] == ["next"]
