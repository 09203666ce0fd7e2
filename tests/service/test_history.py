"""What ``why`` says about ended work, from hand-built store rows: every attempt in order
with hosts, start, length and how it ended; preemptions with their reason and preemptor
(audit ``workload.preempt``); requeues; who cancelled; the final exit code."""

from __future__ import annotations

from apportion.core import Status
from apportion.service.history import workload_history
from apportion.service.store import AttemptRow, AuditRow, WorkloadRow


def row(status: Status, attempts: tuple[AttemptRow, ...], end_reason: str | None,
        exit_code: int | None = None, min_runtime: float = 3600.0) -> WorkloadRow:
    return WorkloadRow(
        id="w-000007", budget="ai/llm", user="alice", gpus=8, min_runtime=min_runtime,
        resumable=True, priority=0, checkpoint_interval=0.0, command=("x",),
        submit_time=100.0, queued_at=100.0, status=status, cancel_requested=False,
        attempts_count=len(attempts), exit_code=exit_code, end_reason=end_reason,
        created_at=100.0, attempts=attempts)


def attempt(n: int, start: float, end: float, reason: str, code: int | None = None,
            hosts: tuple[str, ...] = ("h1",)) -> AttemptRow:
    return AttemptRow("w-000007", n, tuple((h, 8, tuple(range(8))) for h in hosts), 8 * len(hosts),
                      start, end, "handle", code, reason, 0.0)


def clock(t: float) -> str:
    return f"t={t:g}"


def test_requeued_after_a_rebalance_then_completed() -> None:
    """Attempt 1 preempted to rebalance for w-000009 (from the audit), requeued; attempt 2
    on two hosts exits 0. The audit entry's time (the store's clock) may fall after the
    attempt's recorded end: it belongs to the attempt it follows, up to the next start."""
    w = row(Status.COMPLETED, (attempt(1, 200, 3800, "preempted: rebalance"),
                               attempt(2, 4000, 11200, "exited 0", 0, ("h1", "h2"))),
            "exited 0", 0)
    audit = [AuditRow(5, 3800.2, "scheduler", "workload.preempt", "w-000007", None,
                      {"reason": "rebalance", "by": "w-000009"})]
    h = workload_history(w, audit, clock)
    assert h["text"] == [
        "w-000007 (completed, 8 GPUs, budget ai/llm, allocated, minimum runtime 1 h): "
        "submitted by alice at t=100",
        "attempt 1: ran on h1 (8 GPUs) from t=200 for 1 h; preempted past its minimum "
        "runtime to rebalance: its budget was more over-used than the preemptor's, for "
        "w-000009; requeued (it kept its place in its budget's queue)",
        "attempt 2: ran on h1 (8 GPUs), h2 (8 GPUs) from t=4000 for 2 h; exited with code 0 "
        "(success)",
        "final exit code 0",
    ]
    assert h["preemptions"] == [{"at": 3800.2, "reason": "rebalance", "by": "w-000009"}]


def test_cancelled_while_running_names_who() -> None:
    """Cancelled by carol (the audit's workload.cancel actor) while it ran."""
    w = row(Status.CANCELLED, (attempt(1, 200, 260, "cancelled"),), "cancelled")
    audit = [AuditRow(3, 250.0, "carol", "workload.cancel", "w-000007", {"status": "running"},
                      None)]
    assert workload_history(w, audit, clock)["text"][1] == (
        "attempt 1: ran on h1 (8 GPUs) from t=200 for 1 min; cancelled by carol")


def test_cancelled_while_waiting_after_a_requeue_says_who_and_when() -> None:
    """Preempted (unallocated, for w-000009) and requeued, then cancelled by carol while
    pending (audit workload.cancel from pending): the story does not stop at the
    preemption but says it was requeued and who cancelled it, and when."""
    w = row(Status.CANCELLED, (attempt(1, 200, 300, "preempted: unallocated"),),
            "cancelled by carol", min_runtime=0.0)
    audit = [AuditRow(9, 500.0, "carol", "workload.cancel", "w-000007", {"status": "pending"},
                      None),
             AuditRow(5, 300.0, "scheduler", "workload.preempt", "w-000007", None,
                      {"reason": "unallocated", "by": "w-000009"})]
    assert workload_history(w, audit, clock)["text"][1:] == [
        "attempt 1: ran on h1 (8 GPUs) from t=200 for 1 min 40 s; preempted: as unallocated "
        "work it gave way to allocated work, for w-000009; requeued (it kept its place in "
        "its budget's queue)",
        "then, while it waited, cancelled by carol at t=500",
    ]


def test_ended_by_the_scheduler_while_waiting_gives_its_reason() -> None:
    """Requeued after a host failure, then ended by the scheduler while pending because
    its dependency failed: the reason from the audit entry is told."""
    w = row(Status.CANCELLED, (attempt(1, 200, 300, "host_failure"),),
            "dependency w-000003 failed (afterok)")
    audit = [AuditRow(9, 700.0, "scheduler", "workload.cancel", "w-000007",
                      {"status": "pending"}, {"reason": "dependency w-000003 failed (afterok)"})]
    assert workload_history(w, audit, clock)["text"][-1] == (
        "then, while it waited, cancelled by scheduler at t=700: dependency w-000003 failed "
        "(afterok)")


def test_cancelled_before_it_ran() -> None:
    """Never started: the store's end reason names who cancelled it."""
    w = row(Status.CANCELLED, (), "cancelled by bob", min_runtime=0.0)
    text = workload_history(w, [], clock)["text"]
    assert text[0].startswith("w-000007 (cancelled, 8 GPUs, budget ai/llm, unallocated, "
                              "minimum runtime 0)")
    assert text[1:] == ["it never ran: cancelled by bob"]


def test_failed_and_host_failure() -> None:
    """A host failure requeues; the next attempt exits 3: the final exit code is 3."""
    w = row(Status.FAILED, (attempt(1, 200, 300, "host_failure"),
                            attempt(2, 400, 430, "exited 3", 3)), "exited 3", 3)
    text = workload_history(w, [], clock)["text"]
    assert text[1].endswith("for 1 min 40 s; its host failed; requeued (it kept its place in "
                            "its budget's queue)")
    assert text[2].endswith("for 30 s; exited with code 3")
    assert text[3] == "final exit code 3"
