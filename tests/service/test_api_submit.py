"""The submission vocabulary over HTTP with a scheduler stepped by hand (fake clock,
in-memory executor): arrays and their throttle, dependencies, time limits and host
constraints, their validation (422 naming the field), the queue view of held work, the
logs offset and ``/v1/me``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from store_db import ServerThread, SwappableApp
from test_api import JOB, Service, shared_server, submit, svc, template

from apportion.core import Status
from apportion.service.api import create_app
from apportion.service.config import parse_config
from apportion.service.executors._wrapper import CHILD_UMASK
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler

__all__ = ["shared_server", "svc", "template"]  # fixtures, used by name


def statuses(svc: Service, ids: list[str]) -> list[str]:
    return [svc.store.get_workload(w).status.value for w in ids]


def test_an_array_is_one_workload_per_index_and_its_throttle_holds(svc: Service) -> None:
    """``array: "0-3%2"`` stores four workloads in index order, the first's id naming the
    array; a pass starts two and the queue view lists the other two as held by the
    throttle (no position); when one ends, the next index starts."""
    r = submit(svc, gpus=1, array="0-3%2")
    assert r.status_code == 201, r.text
    w = r.json()
    ids = w["array_ids"]
    assert len(ids) == 4 and ids[0] == w["id"]
    rows = [svc.store.get_workload(i) for i in ids]
    assert [(x.array_id, x.array_index, x.array_throttle) for x in rows] == [
        (w["id"], i, 2) for i in range(4)]
    svc.scheduler.step()
    assert statuses(svc, ids) == ["running", "running", "pending", "pending"]
    held = [p for p in svc.scheduler.queue_view().pending if p.id in ids]
    assert [(p.id, p.position, p.wait_reason) for p in held] == [
        (ids[2], None, "held"), (ids[3], None, "held")]
    assert held[0].hold == f"array throttle: 2 of array {w['id']} at once"
    listed = svc.call("GET", f"/v1/workloads?array={w['id']}&status=all", "alice").json()
    assert [x["id"] for x in listed] == ids
    r = svc.call("POST", f"/v1/workloads/{ids[0]}/cancel", "alice")
    assert r.status_code == 200
    svc.scheduler.step()
    svc.scheduler.step()
    assert statuses(svc, ids) == ["cancelled", "running", "running", "pending"]


def test_a_dependency_holds_then_releases_or_ends_with_the_reason(svc: Service) -> None:
    """afterany on a running workload: held while it runs, queued once it ended. afterok on
    it: ended (cancelled) with the reason once it was cancelled."""
    first = submit(svc, gpus=1).json()["id"]
    svc.scheduler.step()
    any_ = submit(svc, gpus=1, dependency=f"afterany:{first}").json()["id"]
    ok = submit(svc, gpus=1, dependency=f"afterok:{first}").json()["id"]
    svc.scheduler.step()
    assert statuses(svc, [first, any_, ok]) == ["running", "pending", "pending"]
    assert svc.scheduler.hold_reason(ok) == f"dependency: waiting for {first}"
    svc.call("POST", f"/v1/workloads/{first}/cancel", "alice")
    for _ in range(3):
        svc.clock.advance(svc.config.executor.grace_s + 1)
        svc.scheduler.step()
    assert statuses(svc, [first, any_, ok]) == ["cancelled", "running", "cancelled"]
    assert svc.store.get_workload(ok).end_reason == f"dependency {first} cancelled (afterok)"


def test_a_dependency_on_an_array_waits_for_every_element(svc: Service) -> None:
    """afterok on an array's id (its first element's, which names it) waits for every
    element, as Slurm's on an array job id: it stays held once the first completed and runs
    once all three did (it once ran after the first alone). afterok on the second element
    waits for that element only. afternotok on the whole array is refused."""
    ids = submit(svc, gpus=1, array="0-2").json()["array_ids"]
    svc.scheduler.step()
    whole = submit(svc, gpus=1, dependency=f"afterok:{ids[0]}").json()
    second = submit(svc, gpus=1, dependency=f"afterok:{ids[1]}").json()["id"]
    assert whole["dependencies"] == [["afterok", i] for i in ids]
    executor = svc.scheduler.executor
    assert isinstance(executor, MemoryExecutor)
    for done in ids[:2]:
        executor.finish(done)
        svc.scheduler.step()
        svc.scheduler.step()
    assert statuses(svc, [*ids, whole["id"], second]) == [
        "completed", "completed", "running", "pending", "running"]
    assert svc.scheduler.hold_reason(whole["id"]) == f"dependency: waiting for {ids[2]}"
    executor.finish(ids[2])
    svc.scheduler.step()
    svc.scheduler.step()
    assert statuses(svc, [whole["id"]]) == ["running"]
    # afternotok on a whole array (Slurm: all ended, one at least failed) is refused, not
    # read as "every element failed"
    r = submit(svc, gpus=1, dependency=f"afternotok:{ids[0]}")
    assert (r.status_code, r.json()["detail"]) == (422, (
        f"dependency: afternotok:{ids[0]}: {ids[0]} names an array of 3 workloads, and "
        "afternotok on a whole array is not supported (in Slurm: all ended, one at least "
        f"failed); use afterany:{ids[0]} (all ended), or name single elements"))


def test_the_dashboard_counts_held_work_apart_and_gives_it_its_class(svc: Service) -> None:
    """An array of three 1-GPU debug jobs throttled to one at once: the dashboard's state
    lists the two held elements with their class (it was empty for held work), and counts
    them apart from the queue, whose count is the budgets' pending sum (the card counted
    held work too, and disagreed with the budgets table and the metrics)."""
    ids = submit(svc, gpus=1, min_runtime="10m", array="0-2%1").json()["array_ids"]
    svc.scheduler.step()
    state = svc.call("GET", "/v1/dashboard/state", "alice").json()
    held = [p for p in state["pending"] if p["id"] in ids[1:]]
    assert [(p["wait_reason"], p["class"]) for p in held] == [("held", "debug")] * 2
    leaves = [b for b in state["budgets"] if b["leaf"]]
    assert (state["cluster"]["pending"], state["cluster"]["held"]) == (
        sum(b["pending"] for b in leaves), 2)


def test_a_time_limit_stops_the_run_and_it_ends_as_timeout(svc: Service) -> None:
    """``time_limit: "1h"``: running until the clock reaches its start + 1 h, then stopped
    by the scheduler and ended as ``timeout`` with the limit in the reason."""
    wid = submit(svc, gpus=1, time_limit="1h").json()["id"]
    svc.scheduler.step()
    started = svc.store.get_workload(wid).attempts[0].started_at
    svc.clock.set(started + 3599)
    svc.scheduler.step()
    assert svc.store.get_workload(wid).status is Status.RUNNING
    svc.clock.set(started + 3600)
    svc.scheduler.step()
    svc.clock.advance(svc.config.executor.grace_s + 1)
    svc.scheduler.step()
    w = svc.store.get_workload(wid)
    assert w.status is Status.TIMEOUT
    assert w.end_reason == "timeout: reached its time limit of 1 h"


def test_the_configured_default_time_limit_applies_and_the_cap_refuses(
    svc: Service, shared_server: tuple[ServerThread, SwappableApp]
) -> None:
    """With ``[policy] default_time_limit = "2h"`` and ``max_time_limit = "8h"``, work
    submitted without a limit gets 2 h and a 9 h limit is refused in human units."""
    cfg = parse_config({"policy": {"default_time_limit": "2h", "max_time_limit": "8h"}})
    assert (cfg.policy.default_time_limit, cfg.policy.max_time_limit) == (7200.0, 28800.0)
    _, swap = shared_server
    old = swap.app
    swap.app = create_app(svc.store, svc.scheduler,
                          dataclasses.replace(svc.config, policy=cfg.policy))
    try:
        assert submit(svc).json()["time_limit"] == 7200.0
        r = submit(svc, time_limit="9h")
        assert r.status_code == 422
        assert r.json()["detail"] == "time_limit: 9 h is over the cap of 8 h"
    finally:
        swap.app = old


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"array": "5-3"}, "array: range '5-3' ends before it starts"),
        ({"array": "0-20000"}, "array: 20001 elements, at most 10000"),
        ({"array": "0-3%0"}, "array: '0-3%0': the throttle after % must be a whole number"),
        ({"dependency": "after:w-000001"}, "dependency: 'after:w-000001': type must be one"),
        ({"dependency": "afterok:w-999999"}, "dependency: w-999999: no such workload"),
        ({"time_limit": "soon"}, "time_limit: "),
        ({"time_limit": "10m"}, "time_limit: 10 min is shorter than its minimum runtime of "
                                "30 min"),
        ({"min_runtime": "8h1s"}, "min_runtime: 8 h 0 min 1 s is over the cap of 8 h"),
        ({"min_runtime": "1h1s", "time_limit": "1h"},
         "time_limit: 1 h is shorter than its minimum runtime of 1 h 0 min 1 s"),
        ({"min_runtime": 28800.5}, "min_runtime: 28800.5 s is over the cap of 8 h"),
        ({"nodelist": ["h9"]}, "nodelist: unknown host 'h9'"),
        ({"nodelist": ["h1", "h9"]}, "nodelist: unknown host 'h9'"),
        ({"exclude": ["h11"]}, "exclude: unknown host 'h11'; did you mean 'h1'?"),
        ({"nodelist": ["h1"], "exclude": ["h1"]},
         "nodelist/exclude: leave no host to run on"),
        ({"exclude": ["h1", "h2"]}, "exclude: leaves no host to run on"),
        ({"gpu_kind": "h100"}, "gpu_kind: unknown GPU kind 'h100' (the fleet has gpu)"),
        ({"name": "x" * 129}, "name: "),
        ({"name": "a/b"}, "name: 'a/b' is not a name: character 2 ('/') is not an ASCII"),
        ({"umask": 512}, "umask: Input should be less than or equal to 511"),
        ({"umask": -1}, "umask: Input should be greater than or equal to 0"),
        ({"umask": "077"}, "umask: Input should be a valid integer"),
        ({"signal": "B:FOO@120"}, "signal: 'FOO' is not a signal"),
        ({"signal": "USR1@65536"}, "signal: 65536 s: at most 65535 seconds"),
    ],
)
def test_bad_submission_vocabulary_is_refused_naming_the_field(
    svc: Service, body: dict[str, Any], detail: str
) -> None:
    """422 with the field first; nothing stored."""
    r = svc.call("POST", "/v1/workloads", "alice", {**JOB, **body})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(detail), r.json()
    assert svc.store.list_workloads() == []


def test_the_submitters_umask_is_stored_and_given_to_the_launch(svc: Service) -> None:
    """``umask: 63`` (077) is stored, answered, and is the launch's umask; a submission
    without one is stored without (the executors' 022) and answered with the umask it
    runs with, 18 (022), as api.md says, not null."""
    given = submit(svc, gpus=1, umask=0o077).json()
    plain = submit(svc, gpus=1).json()
    assert (given["umask"], plain["umask"], CHILD_UMASK) == (0o077, 18, 18)
    assert svc.call("GET", f"/v1/workloads/{plain['id']}", "alice").json()["umask"] == 18
    svc.scheduler.step()
    executor = svc.scheduler.executor
    assert isinstance(executor, MemoryExecutor)
    launched = {la.workload_id: la.umask for la in executor.launches}
    assert launched == {given["id"]: 0o077, plain["id"]: None}


def test_a_signal_is_stored_answered_and_sent_once_before_the_time_limit(
    svc: Service,
) -> None:
    """``signal: "b:sigusr1@120"`` with a 1 h limit is stored and answered canonical
    (``B:USR1@120``); the launch asks the batch script to forward SIGUSR1; the pass 120 s
    before the limit sends it to the batch shell (none before), its time is kept with the
    attempt (``signal_sent_at``) and a restarted scheduler does not send it again; the
    work runs on and ends at its limit as ``timeout``, as without it."""
    import signal as signals

    w = submit(svc, gpus=1, time_limit="1h", signal="b:sigusr1@120").json()
    wid = w["id"]
    assert w["signal"] == "B:USR1@120"
    assert submit(svc, gpus=1).json()["signal"] is None
    svc.scheduler.step()
    executor = svc.scheduler.executor
    assert isinstance(executor, MemoryExecutor)
    assert {la.workload_id: la.batch_signal for la in executor.launches}[wid] == \
        signals.SIGUSR1
    started = svc.store.get_workload(wid).attempts[0].started_at
    svc.clock.set(started + 3479)
    svc.scheduler.step()
    assert executor.signals == []
    assert svc.scheduler.signal_due_at == started + 3480  # the loop passes then
    svc.clock.set(started + 3480)
    svc.scheduler.step()
    assert executor.signals == [(f"mem:{wid}:1", signals.SIGUSR1, True, started + 3480)]
    got = svc.call("GET", f"/v1/workloads/{wid}", "alice").json()
    assert (got["signal"], got["attempt"]["signal_sent_at"]) == ("B:USR1@120", started + 3480)
    again = restarted(svc)
    svc.clock.set(started + 3500)
    again.step()
    assert len(executor.signals) == 1
    assert svc.store.get_workload(wid).status is Status.RUNNING
    svc.clock.set(started + 3600)
    again.step()
    svc.clock.advance(again.grace_s + 1)
    again.step()
    assert svc.store.get_workload(wid).status is Status.TIMEOUT


def test_logs_offset_and_me(svc: Service) -> None:
    """``/v1/me`` names the token's user; the logs endpoint reads from ``offset`` and says
    where it stopped (``X-Log-Offset``) and which attempt it read (``X-Log-Attempt``)."""
    assert svc.call("GET", "/v1/me", "alice").json() == {"name": "alice", "admin": False}
    wid = submit(svc, gpus=1).json()["id"]
    svc.scheduler.step()
    path = svc.config.logs_dir / wid / "1.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("one\ntwo\n")
    r = svc.call("GET", f"/v1/workloads/{wid}/logs?offset=4", "alice")
    assert (r.text, r.headers["X-Log-Offset"], r.headers["X-Log-Attempt"]) == ("two\n", "8", "1")


def restarted(svc: Service) -> Scheduler:
    """A new scheduler on the same store and executor, as after a server restart."""
    old = svc.scheduler
    new = Scheduler(svc.store, old.executor, old.config, svc.clock, grace_s=old.grace_s)
    new.start()
    return new


def test_a_restart_keeps_the_throttle_and_the_holds(svc: Service) -> None:
    """After a restart with two of an array's four elements running (throttle 2) and a
    dependent held, a pass starts nothing more of the array and keeps the dependent held;
    the rebuilt scheduler then releases as the first did."""
    ids = submit(svc, gpus=1, array="0-3%2").json()["array_ids"]
    dep = submit(svc, gpus=1, dependency=f"afterok:{ids[3]}").json()["id"]  # one element
    svc.scheduler.step()
    again = restarted(svc)
    again.step()
    assert statuses(svc, [*ids, dep]) == ["running", "running", "pending", "pending", "pending"]
    assert again.hold_reason(ids[2]) == f"array throttle: 2 of array {ids[0]} at once"
    assert again.hold_reason(dep) == f"dependency: waiting for {ids[3]}"
    svc.store.cancel_workload(ids[1], "alice")
    for _ in range(3):
        svc.clock.advance(again.grace_s + 1)
        again.step()
    assert statuses(svc, [*ids, dep]) == ["running", "cancelled", "running", "pending",
                                          "pending"]


def test_work_stopping_at_its_limit_across_a_restart_ends_as_timeout(svc: Service) -> None:
    """Stopped at its limit, then the server restarts before it exits: the rebuilt
    scheduler still ends it as ``timeout``."""
    wid = submit(svc, gpus=1, time_limit="1h").json()["id"]
    svc.scheduler.executor.term_delays[wid] = 1.0  # type: ignore[attr-defined]
    svc.scheduler.step()
    started = svc.store.get_workload(wid).attempts[0].started_at
    svc.clock.set(started + 3600)
    svc.scheduler.step()
    assert svc.store.get_workload(wid).status is Status.STOPPING
    again = restarted(svc)
    svc.clock.advance(again.grace_s + 1)
    again.step()
    w = svc.store.get_workload(wid)
    assert (w.status, w.end_reason) == (Status.TIMEOUT, "timeout: reached its time limit of 1 h")


def test_a_hold_on_many_dependencies_names_the_first_three_and_counts_the_rest(
    svc: Service,
) -> None:
    """Work waiting on a whole array of 8 (stored as 8 dependencies) is held, in the
    queue view and ``why``, by ``dependency: waiting for <first>, <second>, <third> and 5
    more``, one short line however large the array (every id was listed: a 1000-element
    array's made a queue row thousands of characters long); five are still all listed."""
    ids = submit(svc, gpus=1, array="0-7%1").json()["array_ids"]
    many = submit(svc, gpus=1, dependency=f"afterok:{ids[0]}").json()["id"]
    five = submit(svc, gpus=1, dependency="afterok:" + ":".join(ids[3:])).json()["id"]
    svc.scheduler.step()
    want = f"dependency: waiting for {ids[0]}, {ids[1]}, {ids[2]} and 5 more"
    assert svc.scheduler.hold_reason(many) == want
    assert svc.scheduler.hold_reason(five) == f"dependency: waiting for {', '.join(ids[3:])}"
    assert svc.call("GET", f"/v1/workloads/{many}/why", "alice").json()["hold"] == want


def test_why_of_held_work_says_what_holds_it(svc: Service) -> None:
    """``why`` of an array element held by its throttle and of work waiting on a dependency
    answers 200 (``kind: held``) with the queue view's hold text, not a 409 'not yet seen
    by the scheduler'."""
    ids = submit(svc, gpus=1, array="0-3%1").json()["array_ids"]
    dep = submit(svc, gpus=1, dependency=f"afterok:{ids[0]}").json()["id"]
    svc.scheduler.step()
    for wid, hold in ((ids[1], f"array throttle: 1 of array {ids[0]} at once"),
                      (dep, f"dependency: waiting for {', '.join(ids)}")):  # the array
        r = svc.call("GET", f"/v1/workloads/{wid}/why", "alice")
        assert r.status_code == 200, r.text
        e = r.json()
        assert (e["kind"], e["status"], e["hold"]) == ("held", "pending", hold)
        assert e["text"] == [
            f"{wid} (pending, 1 GPU, budget ai/llm, allocated): held out of the queue, not "
            "yet considered by the policy", f"held by {hold}"]
