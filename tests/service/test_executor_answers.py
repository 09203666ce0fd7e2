"""How the scheduler takes each way an executor can answer (service/executor.py): only
``LaunchRefused`` ends a workload, ``ExecutorUnavailable`` means "look again", and any other
exception is a bug that neither ends work nor counts as an answer."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

import pytest
from sched_env import Env, make_env
from store_db import BACKENDS

from apportion.core import Status
from apportion.service.dashboard import explain_workload
from apportion.service.executor import (
    ExecutorUnavailable,
    HostSlots,
    InventoryHost,
    Launch,
    LaunchDeferred,
    LaunchRefused,
    Observation,
)
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.executors.slurm import SlurmExecutor
from apportion.service.scheduler import BACKOFF_FIRST_S


class _Scripted(MemoryExecutor):
    """The memory executor, with the next launch or inventory made to raise ``fail``;
    ``launch_first``: the launch goes through before the error (its answer is lost)."""

    fail_launch: Exception | None = None
    fail_inventory: Exception | None = None
    fail_find: Exception | None = None
    launch_first = False

    def launch(self, launch: Launch) -> str:
        error, self.fail_launch = self.fail_launch, None
        if error is None:
            return super().launch(launch)
        if self.launch_first:
            super().launch(launch)
        raise error

    def inventory(self) -> list[InventoryHost]:
        error, self.fail_inventory = self.fail_inventory, None
        if error is not None:
            raise error
        return super().inventory()

    def find(self, workload_id: str, attempt: int) -> str | None:
        error, self.fail_find = self.fail_find, None
        if error is not None:
            raise error
        return super().find(workload_id, attempt)


@pytest.fixture
def lite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    # make_env builds a MemoryExecutor: build the scripted one in its place
    monkeypatch.setattr("sched_env.MemoryExecutor", _Scripted)
    e = make_env("sqlite", tmp_path)
    assert isinstance(e.executor, _Scripted)
    yield e
    e.store.close()


def _scripted(env: Env) -> _Scripted:
    assert isinstance(env.executor, _Scripted)
    return env.executor


def test_launch_refused_fails_the_workload_after_one_try(lite: Env) -> None:
    """``LaunchRefused`` ends the workload ``failed`` with the executor's reason, after that
    one attempt, with nothing charged."""
    _scripted(lite).fail_launch = LaunchRefused("command not found: trian")
    wid = lite.submit(gpus=2)
    lite.at(0.0)
    lite.at(10.0)
    w = lite.store.get_workload(wid)
    assert w.status is Status.FAILED
    assert [(a.end_reason, a.gpu_seconds) for a in w.attempts] == [
        ("launch refused: command not found: trian", 0.0)]


def test_value_error_from_launch_is_not_a_refusal(lite: Env,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A ``ValueError`` (or any exception that is neither answer) does not end the workload:
    it is logged with its traceback, the attempt is undone uncharged, and the workload
    starts once the backoff has passed."""
    _scripted(lite).fail_launch = ValueError("bug in the executor")
    wid = lite.submit(gpus=2)
    with caplog.at_level(logging.ERROR, logger="apportion.scheduler"):
        lite.at(0.0)
    assert any(r.exc_info and "unexpected error" in r.getMessage() for r in caplog.records)
    w = lite.store.get_workload(wid)
    assert w.status is Status.PENDING
    assert [(a.end_reason, a.gpu_seconds) for a in w.attempts] == [("launch failed", 0.0)]
    lite.at(BACKOFF_FIRST_S / 2)
    assert lite.store.get_workload(wid).status is Status.PENDING  # still backing off
    lite.at(BACKOFF_FIRST_S)
    assert lite.store.get_workload(wid).status is Status.RUNNING


def test_unanswered_launch_that_went_through_is_adopted(lite: Env) -> None:
    """``ExecutorUnavailable`` from a launch the backend carried out all the same: the next
    pass finds it (``Executor.find``) and keeps it running, launched once."""
    ex = _scripted(lite)
    ex.fail_launch, ex.launch_first = ExecutorUnavailable("sbatch: timed out"), True
    wid = lite.submit(gpus=2)
    lite.at(0.0)
    lite.at(1.0)
    w = lite.store.get_workload(wid)
    assert w.status is Status.RUNNING
    assert w.attempt is not None and w.attempt.handle == f"mem:{wid}:1"
    assert len(w.attempts) == 1 and len(ex.launches) == 1


def test_unanswered_launch_that_never_happened_is_retried(lite: Env) -> None:
    """``ExecutorUnavailable`` from a launch that did not happen: the next pass finds
    nothing, ends that attempt as never launched (uncharged) and launches it again."""
    ex = _scripted(lite)
    ex.fail_launch = ExecutorUnavailable("sbatch: timed out")
    wid = lite.submit(gpus=2)
    lite.at(0.0)
    w = lite.store.get_workload(wid)
    assert (w.status, len(w.attempts), ex.launches) == (Status.RUNNING, 1, [])  # unconfirmed
    lite.at(1.0)
    w = lite.store.get_workload(wid)
    assert [(a.end_reason, a.gpu_seconds) for a in w.attempts[:1]] == [("never launched", 0.0)]
    assert w.status is Status.RUNNING and len(w.attempts) == 2 and len(ex.launches) == 1


def test_inventory_error_counts_as_unreachable(lite: Env,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """An inventory that fails with an error other than ``ExecutorUnavailable`` is logged
    with its traceback and the pass decides nothing (a host the executor cannot list may
    have died); the next pass that gets an inventory starts the work."""
    _scripted(lite).fail_inventory = KeyError("nodes")
    wid = lite.submit(gpus=2)
    with caplog.at_level(logging.ERROR, logger="apportion.scheduler"):
        assert lite.at(0.0) == []
    assert any(r.exc_info and "inventory failed" in r.getMessage() for r in caplog.records)
    assert lite.store.get_workload(wid).attempts == ()
    assert lite.sched.errors == 0  # the pass itself did not fail
    lite.at(1.0)
    assert lite.store.get_workload(wid).status is Status.RUNNING


def test_memory_executor_unavailable_raises_executor_unavailable() -> None:
    """A broken memory executor answers every call with ``ExecutorUnavailable``, as an
    unreachable backend does."""
    from apportion.service.clock import FakeClock

    ex = MemoryExecutor([("h0", 8)], FakeClock(0.0))
    ex.broken = True
    launch = Launch("w-000001", 1, ["true"], (HostSlots("h0", (0,)),))
    calls = [ex.inventory, lambda: ex.launch(launch), lambda: ex.stop("mem:w:1", 0),
             lambda: ex.observe(["mem:w:1"]), lambda: ex.find("w-000001", 1),
             lambda: ex.set_host_drain("h0", True, "x")]
    for call in calls:
        with pytest.raises(ExecutorUnavailable, match="backend unavailable"):
            call()


@pytest.mark.parametrize(("slots", "message"), [
    ((), "slots: empty"),
    ((HostSlots("n1", (0,)), HostSlots("n1", (1,))), "a host appears twice"),
    ((HostSlots("n1", (0,)), HostSlots("n2", (0, 1))), "same GPU count on every host"),
])
def test_slurm_launch_it_cannot_express_is_refused(
    tmp_path: Path, slots: tuple[HostSlots, ...], message: str
) -> None:
    """Slots one Slurm batch job cannot express are a ``LaunchRefused`` (checked before
    Slurm is asked anything), not a ``ValueError``."""
    ex = SlurmExecutor(tmp_path / "jobs")
    with pytest.raises(LaunchRefused, match=message):
        ex.launch(Launch("w-000001", 1, ["true"], slots))


def test_work_set_aside_after_a_failed_launch_stays_in_the_queue_and_why(lite: Env) -> None:
    """A workload set aside after a failed launch (backing off, out of the policy's state)
    is still listed by the queue view as pending, with ``wait_reason`` ``launch_failing``,
    ``hold`` ``launch failing: <error>`` and ``retry_at`` its next try, and ``why``
    explains it (``kind: held``, the error and the next try) instead of a 409; once it
    starts it is listed as running only."""
    _scripted(lite).fail_launch = OSError(2, "No such file or directory", "/srv/aplogs")
    wid = lite.submit(gpus=2)
    lite.at(0.0)
    assert wid not in lite.sched._st().pending  # the policy does not see it meanwhile
    [p] = [p for p in lite.sched.queue_view().pending if p.id == wid]
    assert (p.wait_reason, p.position, p.retry_at) == ("launch_failing", None, BACKOFF_FIRST_S)
    assert p.hold == "launch failing: [Errno 2] No such file or directory: '/srv/aplogs'"
    why = explain_workload(lite.store, lite.sched, wid)
    assert why.kind == "held"
    assert why.text[1].startswith(
        "launch failing: [Errno 2] No such file or directory: '/srv/aplogs', next try at ")
    lite.at(BACKOFF_FIRST_S)
    view = lite.sched.queue_view()
    assert [r.id for r in view.running] == [wid] and not view.pending


@pytest.mark.parametrize("backend", BACKENDS)
def test_launch_deferred_takes_the_attempt_back_and_the_pass_launches_no_more(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LaunchDeferred`` (the server's own files: here its logs directory full) leaves no
    attempt behind: the workload is pending with no attempt and its count as before, set
    aside with the backoff and listed ``launch failing: <error>``; the pass launches nothing
    more (the other workload waits for the next pass, not set aside); it is counted in
    ``launches_deferred``. Once launches go through, the workload runs as attempt 1."""
    monkeypatch.setattr("sched_env.MemoryExecutor", _Scripted)
    env = make_env(backend, tmp_path)
    try:
        ex = _scripted(env)
        ex.fail_launch = LaunchDeferred("logs directory /srv/aplogs: No space left on device")
        first = env.submit(gpus=2, priority=9)
        second = env.submit(gpus=2)
        env.at(0.0)
        w = env.store.get_workload(first)
        assert (w.status, w.attempts, w.attempts_count) == (Status.PENDING, (), 0)
        assert env.store.get_workload(second).status is Status.PENDING
        assert env.sched.launches_deferred == 1
        [p] = [p for p in env.sched.queue_view().pending if p.id == first]
        assert p.hold == "launch failing: logs directory /srv/aplogs: No space left on device"
        env.at(0.5)
        assert env.store.get_workload(second).status is Status.RUNNING
        env.at(BACKOFF_FIRST_S)
        w = env.store.get_workload(first)
        assert w.status is Status.RUNNING and [a.n for a in w.attempts] == [1]
    finally:
        env.store.close()


def test_each_pass_hands_the_executor_what_is_open_after_its_observe_to_stop_strays(
    lite: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pass that reaches the executor observes it (even with nothing open) and right
    after asks it to stop work of no open attempt (``stop_strays``), passing the open
    attempts' handles and, as launching, the attempts whose launch got no answer and that
    ``find`` could not look for yet; once ``find`` found nothing, that attempt (ended
    never launched) is no longer passed, so a job of it that shows up later is stopped."""
    ex = _scripted(lite)
    calls: list[tuple[object, ...]] = []
    real_observe = ex.observe

    def observe(handles: Sequence[str]) -> dict[str, Observation]:
        calls.append(("observe", sorted(handles)))
        return real_observe(handles)

    def stop_strays(known: Collection[str], launching: Collection[tuple[str, int]],
                    grace_s: float) -> None:
        calls.append(("strays", sorted(known), sorted(launching)))

    monkeypatch.setattr(ex, "observe", observe)
    monkeypatch.setattr(ex, "stop_strays", stop_strays)
    ex.fail_launch = ExecutorUnavailable("sbatch: timed out")
    wid = lite.submit(gpus=2)
    lite.at(0.0)  # nothing open before the launch, which gets no answer
    assert calls == [("observe", []), ("strays", [], [])]
    calls.clear()
    ex.fail_find = ExecutorUnavailable("squeue: timed out")
    lite.at(1.0)
    assert calls == [("observe", []), ("strays", [], [(wid, 1)])]
    calls.clear()
    lite.at(2.0)  # find: nothing; ended never launched, launched again as attempt 2
    assert calls[:2] == [("observe", []), ("strays", [], [])]
    calls.clear()
    lite.at(3.0)
    handle = f"mem:{wid}:2"
    assert calls[:2] == [("observe", [handle]), ("strays", [handle], [])]
