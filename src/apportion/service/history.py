"""What happened to a workload that has ended: ``apportion why`` on finished work.

Read from the store alone: the workload's attempts (hosts, start, end, exit code, end
reason, as the scheduler recorded them) and its audit entries (who cancelled it; for each
preemption the reason and the workload it was preempted for, ``workload.preempt``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apportion.core import Status, format_duration, plural

from .store import AttemptRow, AuditRow, WorkloadRow

# end reasons as the scheduler writes them -> what they mean to the workload's owner
_PREEMPTED = {
    "unallocated": "preempted: as unallocated work it gave way to allocated work",
    "rebalance": "preempted past its minimum runtime to rebalance: its budget was more "
                 "over-used than the preemptor's",
    "drain": "preempted: its host was drained",
}


def _reason(reason: str | None, preempt: AuditRow | None, cancel: AuditRow | None) -> str:
    if reason is None:
        return "ended (no reason recorded)"
    if reason.startswith("preempted"):
        kind = reason.partition(": ")[2]
        text = _PREEMPTED.get(kind, reason)
        by = preempt.new.get("by") if preempt is not None and preempt.new else None
        return f"{text}, for {by}" if by else text
    if reason == "cancelled" or reason.startswith("cancelled by"):
        who = cancel.actor if cancel is not None else reason.removeprefix("cancelled by ")
        return f"cancelled by {who}" if who and who != "cancelled" else "cancelled"
    if reason == "host_failure":
        return "its host failed"
    if reason.startswith("timeout"):
        return "stopped at its time limit (timeout)"
    if reason.startswith("exited "):
        code, _, note = reason.removeprefix("exited ").partition("; ")  # note: of its log
        text = "exited with code 0 (success)" if code == "0" else f"exited with code {code}"
        return f"{text}; {note}" if note else text
    return reason


def _hosts(a: AttemptRow) -> str:
    return ", ".join(f"{h} ({plural(g, 'GPU')})" for h, g, _ in a.placement)


def workload_history(
    row: WorkloadRow, audit: list[AuditRow], clock: Callable[[float], str]
) -> dict[str, Any]:
    """The story of ended workload ``row`` (with its attempts) as JSON, with ``text``:
    sentences for people, times written by ``clock``."""
    preempts = _preemptions(audit)
    cancel = next((a for a in audit if a.action == "workload.cancel"), None)
    kind = "allocated" if row.min_runtime > 0 else "unallocated"
    contract = (f"minimum runtime {format_duration(row.min_runtime)}" if row.min_runtime > 0
                else "minimum runtime 0")
    lines = [f"{row.id} ({row.status.value}, {plural(row.gpus, 'GPU')}, budget {row.budget}, "
             f"{kind}, {contract}): submitted by {row.user} at {clock(row.submit_time)}"]
    if not row.attempts:
        lines.append("it never ran: " + _reason(row.end_reason, None, cancel))
    lines += attempt_lines(row, audit, clock)
    ended = _ended_waiting(audit) if row.attempts else None
    if ended is not None:  # it ran, was requeued, and ended in the queue: say who and when
        lines[-1] += "; requeued (it kept its place in its budget's queue)"
        why = (ended.new or {}).get("reason")
        lines.append(f"then, while it waited, cancelled by {ended.actor} at "
                     f"{clock(ended.at)}" + (f": {why}" if why else ""))
    if row.attempts and row.exit_code is not None:
        lines.append(f"final exit code {row.exit_code}")
    return {
        "workload": row.id,
        "status": row.status.value,
        "budget": row.budget,
        "user": row.user,
        "gpus": row.gpus,
        "min_runtime": row.min_runtime,
        "allocated": row.min_runtime > 0,
        "submit_time": row.submit_time,
        "end_reason": row.end_reason,
        "exit_code": row.exit_code,
        "attempts": [a.as_dict() for a in row.attempts],
        "preemptions": [{"at": p.at, **(p.new or {})} for p in preempts],
        "text": lines,
    }


def _ended_waiting(audit: list[AuditRow]) -> AuditRow | None:
    """The audit entry that ended the workload while it was pending (a cancel, the
    scheduler's with its reason, or a set-aside), or None."""
    return next((a for a in audit if a.action in ("workload.cancel", "workload.set_aside")
                 and (a.old or {}).get("status") == Status.PENDING.value), None)


def _preemptions(audit: list[AuditRow]) -> list[AuditRow]:
    return sorted((a for a in audit if a.action == "workload.preempt"), key=lambda a: a.at)


def attempt_lines(row: WorkloadRow, audit: list[AuditRow], clock: Callable[[float], str],
                  ended_only: bool = False) -> list[str]:
    """One sentence per attempt of ``row``: where and how long it ran, how it ended (for a
    preemption, why and for which workload), and whether it was requeued. With
    ``ended_only``, the attempts that have ended: the earlier runs of work that waits or
    runs again."""
    preempts = _preemptions(audit)
    cancel = next((a for a in audit if a.action == "workload.cancel"), None)
    lines = []
    for i, a in enumerate(row.attempts):
        if ended_only and a.ended_at is None:
            continue  # the attempt running now
        end = a.ended_at if a.ended_at is not None else a.started_at
        # the preemption decided during this attempt: after it started, before the next one
        # (audit times are the store's clock, attempt times the scheduler's)
        until = row.attempts[i + 1].started_at if i + 1 < len(row.attempts) else float("inf")
        preempt = next((p for p in preempts if a.started_at <= p.at < until), None)
        text = (f"attempt {a.n}: ran on {_hosts(a)} from {clock(a.started_at)} for "
                f"{format_duration(end - a.started_at)}; "
                + _reason(a.end_reason, preempt, cancel))
        if i + 1 < len(row.attempts) or (ended_only and row.status is Status.PENDING):
            text += "; requeued (it kept its place in its budget's queue)"
        lines.append(text)
    return lines


__all__ = ["attempt_lines", "workload_history"]
