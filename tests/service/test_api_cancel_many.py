"""``POST /v1/workloads/cancel``: many workloads cancelled in one request, by ids or by a
filter, with the rights, the audit and the words of the cancel of one, answered per
workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from store_db import BACKENDS
from test_api import Service, close_service, make_service, shared_server, submit, svc, template

from apportion.core import Status

__all__ = ["shared_server", "svc", "template"]  # fixtures, used by name

URL = "/v1/workloads/cancel"


def cancel(svc: Service, who: str, body: Any) -> list[dict[str, Any]]:
    r = svc.call("POST", URL, who, body)
    assert r.status_code == 200, r.text
    out: list[dict[str, Any]] = r.json()["workloads"]
    return out


def outcomes(answer: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [(o["id"], o["result"], o["status"]) for o in answer]


def status(svc: Service, wid: str) -> Status:
    return svc.store.get_workload(wid).status


def cancels(svc: Service) -> list[tuple[str, str, Any, Any]]:
    """The ``workload.cancel`` audit entries, oldest first: actor, target, old, new."""
    return [(a.actor, a.target, a.old, a.new) for a in reversed(svc.store.audit(limit=1000))
            if a.action == "workload.cancel"]


def test_ids_are_answered_each_once_in_the_order_given(svc: Service) -> None:
    """``ids``: a pending workload is cancelled at once, a running one gets
    ``cancel_requested``, one that ended is ``ended`` with its status, an unknown id is
    ``not_found``, the last two with the words the cancel of that one alone answers with;
    an id given twice is answered once."""
    running = submit(svc, gpus=8).json()["id"]
    svc.scheduler.step()
    done = submit(svc).json()["id"]
    assert svc.call("POST", f"/v1/workloads/{done}/cancel", "alice").status_code == 200
    pending = submit(svc).json()["id"]
    assert cancel(svc, "alice", {"ids": [pending, running, done, "w-999999", pending]}) == [
        {"id": pending, "result": "cancelled", "status": "cancelled", "detail": None},
        {"id": running, "result": "cancel_requested", "status": "running", "detail": None},
        {"id": done, "result": "ended", "status": "cancelled",
         "detail": f"workload {done}: status: already cancelled"},
        {"id": "w-999999", "result": "not_found", "status": None,
         "detail": "workload w-999999: not found"},
    ]
    assert (status(svc, pending), status(svc, running)) == (Status.CANCELLED, Status.RUNNING)


def test_running_work_gets_cancel_requested_and_the_scheduler_then_stops_it(
    svc: Service,
) -> None:
    """A running workload in a bulk cancel is flagged, not ended: ``cancel_requested``;
    the scheduler's next passes stop it, it ends ``cancelled`` and its GPUs are free."""
    wid = submit(svc, gpus=8).json()["id"]
    svc.scheduler.step()
    assert outcomes(cancel(svc, "alice", {"user": "alice"})) == [
        (wid, "cancel_requested", "running")]
    w = svc.store.get_workload(wid)
    assert (w.status, w.cancel_requested) == (Status.RUNNING, True)
    svc.scheduler.step()
    svc.clock.advance(60)
    svc.scheduler.step()
    assert status(svc, wid) is Status.CANCELLED
    assert svc.scheduler.queue_view().running == []


def test_a_researcher_cannot_cancel_anothers_work_and_learns_nothing_private_of_it(
    svc: Service,
) -> None:
    """bob (a member of ai/vision) names alice's workload and his own: alice's is answered
    ``not_allowed`` in the words of the single cancel's 403 (its owner, public as in the
    queue) and nothing else of it, neither its command nor its environment; it stays
    pending and nothing of it is audited. His own is cancelled in the same request."""
    alices = submit(svc, command=["train", "--secret=hunter2"],
                    env={"API_KEY": "s3cret"}).json()["id"]
    bobs = submit(svc, who="bob", budget="ai/vision").json()["id"]
    r = svc.call("POST", URL, "bob", {"ids": [alices, bobs]})
    assert r.status_code == 200, r.text
    assert "hunter2" not in r.text and "s3cret" not in r.text
    assert r.json()["workloads"] == [
        {"id": alices, "result": "not_allowed", "status": "pending",
         "detail": f"forbidden: bob may not cancel workload {alices} (owned by alice)"},
        {"id": bobs, "result": "cancelled", "status": "cancelled", "detail": None},
    ]
    assert status(svc, alices) is Status.PENDING
    assert cancels(svc) == [("bob", bobs, {"status": "pending"}, None)]
    theirs = cancel(svc, "bob", {"user": "alice"})  # by filter: the same answer
    assert outcomes(theirs) == [(alices, "not_allowed", "pending")]
    assert status(svc, alices) is Status.PENDING


def test_a_manager_cancels_only_work_below_their_budget(svc: Service) -> None:
    """dave manages ai/llm: by ids and by the filter ``budget: ai``, alice's work in ai/llm
    is cancelled and bob's in ai/vision is ``not_allowed`` and left pending; carol, who
    manages ai, cancels bob's; root, an admin, cancels what is left."""
    a1, a2 = (submit(svc).json()["id"] for _ in range(2))
    b1, b2 = (submit(svc, who="bob", budget="ai/vision").json()["id"] for _ in range(2))
    assert outcomes(cancel(svc, "dave", {"ids": [a1, b1]})) == [
        (a1, "cancelled", "cancelled"), (b1, "not_allowed", "pending")]
    assert outcomes(cancel(svc, "dave", {"budget": "ai"})) == [
        (a2, "cancelled", "cancelled"), (b1, "not_allowed", "pending"),
        (b2, "not_allowed", "pending")]
    assert (status(svc, b1), status(svc, b2)) == (Status.PENDING, Status.PENDING)
    assert outcomes(cancel(svc, "carol", {"ids": [b1]})) == [(b1, "cancelled", "cancelled")]
    assert outcomes(cancel(svc, "root", {"budget": "ai"})) == [(b2, "cancelled", "cancelled")]


def test_a_filter_cancels_the_active_work_it_matches_the_pending_first(svc: Service) -> None:
    """``user``, ``budget`` (its subtree), ``array`` and ``status`` select active work as
    ``GET /v1/workloads`` does; the answer lists the pending work first, then the running,
    each oldest first; work that has ended is not matched, so not answered."""
    running = submit(svc, gpus=8).json()["id"]
    svc.scheduler.step()
    done = submit(svc).json()["id"]
    svc.call("POST", f"/v1/workloads/{done}/cancel", "alice")
    elements = submit(svc, gpus=1, array="0-2").json()["array_ids"]
    pending = submit(svc).json()["id"]
    bobs = submit(svc, who="bob", budget="ai/vision").json()["id"]
    assert outcomes(cancel(svc, "alice", {"user": "alice", "status": ["running"]})) == [
        (running, "cancel_requested", "running")]
    assert outcomes(cancel(svc, "alice", {"array": elements[0]})) == [
        (e, "cancelled", "cancelled") for e in elements]
    assert outcomes(cancel(svc, "root", {"budget": "ai"})) == [
        (pending, "cancelled", "cancelled"), (bobs, "cancelled", "cancelled"),
        (running, "cancel_requested", "running")]
    assert cancel(svc, "alice", {"user": "alice", "status": ["pending"]}) == []


def test_each_workload_cancelled_is_audited_as_the_cancel_of_one_audits_it(
    svc: Service,
) -> None:
    """One ``workload.cancel`` entry per workload cancelled or asked to stop, by the caller,
    with its status before, the very entry the cancel of one writes (what ``apportion
    audit``, ``why`` and the usage reports read); none for work left as it was. ``why`` of
    the stopped one says who cancelled it."""
    single = submit(svc).json()["id"]
    svc.call("POST", f"/v1/workloads/{single}/cancel", "alice")
    running = submit(svc, gpus=8).json()["id"]
    svc.scheduler.step()
    pending = submit(svc, gpus=8).json()["id"]
    theirs = submit(svc, who="bob", budget="ai/vision").json()["id"]
    cancel(svc, "alice", {"ids": [running, pending, theirs, single, "w-999999"]})
    assert cancels(svc) == [("alice", single, {"status": "pending"}, None),
                            ("alice", pending, {"status": "pending"}, None),
                            ("alice", running, {"status": "running"}, None)]
    listed = svc.call("GET", f"/v1/audit?target={running}", "alice").json()
    assert [(a["actor"], a["action"]) for a in listed] == [("alice", "workload.cancel")]
    svc.scheduler.step()
    svc.clock.advance(60)
    svc.scheduler.step()
    why = svc.call("GET", f"/v1/workloads/{running}/why", "alice").json()
    assert why["text"][1].endswith("; cancelled by alice"), why["text"]


def test_a_retried_bulk_cancel_changes_nothing_more(svc: Service) -> None:
    """The same request sent again (a client retrying after a lost answer): the pending
    workload it cancelled is answered ``ended`` (cancelled), the running one
    ``cancel_requested`` again, and nothing changes: no row, no audit entry."""
    running = submit(svc, gpus=8).json()["id"]
    svc.scheduler.step()
    pending = submit(svc, gpus=8).json()["id"]
    body = {"ids": [pending, running]}
    first = cancel(svc, "alice", body)
    assert outcomes(first) == [(pending, "cancelled", "cancelled"),
                               (running, "cancel_requested", "running")]

    def state() -> tuple[Any, ...]:
        return ([w.as_dict() for w in svc.store.list_workloads(statuses=list(Status))],
                svc.store.audit(limit=1000))

    before = state()
    assert outcomes(cancel(svc, "alice", body)) == [(pending, "ended", "cancelled"),
                                                    (running, "cancel_requested", "running")]
    assert outcomes(cancel(svc, "alice", {"user": "alice"})) == [
        (running, "cancel_requested", "running")]
    assert state() == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bulk_cancel_works_the_same_on_each_database(tmp_path: Path, backend: str) -> None:
    """By ids and by filter, on SQLite and PostgreSQL: the pending work is cancelled, the
    running work asked to stop, in batches of their own (locked rows, one audit entry
    each), answered in the same order."""
    s = make_service(tmp_path, backend)
    try:
        running = submit(s, gpus=8).json()["id"]
        s.scheduler.step()
        pending = [submit(s, gpus=8).json()["id"] for _ in range(3)]
        assert outcomes(cancel(s, "alice", {"ids": [pending[0], "w-999999"]})) == [
            (pending[0], "cancelled", "cancelled"), ("w-999999", "not_found", None)]
        assert outcomes(cancel(s, "dave", {"budget": "ai/llm"})) == [
            (pending[1], "cancelled", "cancelled"), (pending[2], "cancelled", "cancelled"),
            (running, "cancel_requested", "running")]
        assert [t for _, t, _, _ in cancels(s)] == [pending[0], pending[1], pending[2], running]
    finally:
        close_service(s)


@pytest.mark.parametrize(("body", "detail"), [
    ({}, "body: give ids, or a filter: user, budget or array"),
    ({"ids": "w-000001"}, "ids: Input should be a valid list"),
    ({"ids": [1]}, "ids.0: Input should be a valid string"),
    ({"ids": ["w-000001", "5"]}, "ids.1: '5' is not a workload id (w-000005)"),
    ({"ids": []}, "ids: List should have at least 1 item after validation, not 0"),
    ({"ids": [f"w-{i:06d}" for i in range(10_001)]},
     "ids: List should have at most 10000 items after validation, not 10001"),
    ({"ids": ["w-000001"], "user": "alice"},
     "ids: give ids or a filter (user, budget, array, status), not both"),
    ({"status": ["pending"]}, "status: only with a filter: user, budget or array"),
    ({"user": "alice", "status": ["completed"]},
     "status.0: Input should be 'pending', 'running' or 'stopping'"),
    ({"user": "alice", "status": "pending"}, "status: Input should be a valid list"),
    ({"budget": 5}, "budget: Input should be a valid string"),
    ({"user": "bobb"}, "user: user bobb: not found; did you mean bob?"),
    ({"user": "Bob"}, "user: user Bob: not found; did you mean bob?"),
    ({"budget": "ai/visoin"}, "budget: budget ai/visoin: not found; did you mean ai/vision?"),
    ({"array": "abc"}, "array: 'abc' is not a workload id (w-000005)"),
    ({"user": "alice", "force": True}, "force: Extra inputs are not permitted"),
], ids=["empty", "ids-not-a-list", "id-not-a-string", "id-not-an-id", "no-ids",
        "too-many-ids", "ids-and-filter", "status-alone", "status-finished",
        "status-not-a-list", "budget-not-a-string", "unknown-user", "user-in-capitals",
        "unknown-budget",
        "array-not-an-id", "unknown-field"])
def test_a_bad_body_is_a_422_naming_the_field_and_cancels_nothing(
    svc: Service, body: dict[str, Any], detail: str,
) -> None:
    """A body of the wrong shape (a field of the wrong type, an id that is none, more ids
    than 10,000, ids and a filter, neither, a finished state, a user or budget that does
    not exist, an unknown field) is a 422 whose detail names the field; nothing is
    cancelled."""
    wid = submit(svc).json()["id"]
    r = svc.call("POST", URL, "alice", body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == detail
    assert status(svc, wid) is Status.PENDING
